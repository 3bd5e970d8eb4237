"""The gold files `--qrels` names (SPEC 15), each read into gold by case id: TREC qrels
(`qid iter docno rel`, read by flows/sources/trec_files.py's reader), a BEIR qrels TSV (a
header line, then `query-id`, `corpus-id`, `score`), ranx qrels JSON (`{q: {d: grade}}`),
and JSONL lines `{case_id, must_cite_one_of | relevant_ids | relevance}`.

Which one a file is: by its suffix (`.json` ranx, `.jsonl` JSONL, `.tsv` BEIR), else by its
first line (a tab-separated `query-id` header is BEIR, an object is JSONL, anything else
TREC). Grades of the qrels formats follow trec_eval: a negative grade is judged and not
relevant (grade 0); a pair judged twice takes the later grade. JSONL gold is taken as it is
written (an integer id, in `case_id` or a list of ids, as its decimal string): its values are
the record rules' to judge, as in a cases file. A file that holds no judgment and no
malformed record is bad input, as an empty TREC qrels is.

`with_gold` then gives each case of a format its gold by case id, and adds the cases only
the qrels know, which retrieved nothing and score 0 (as `trec_eval -c` counts them)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ....transforms.errors import InputError
from ....transforms.records import MAX_RECORD_BYTES
from ..trec_files import read_qrels
from .identity import id_text
from .input_rows import json_document, jsonl_rows, require_file
from .record import UNDETERMINED_LOCALE, FormatRecord, IdentityCounts, line_origin, row_origin

GOLD_FIELDS = ("must_cite_one_of", "relevant_ids", "relevance")
BEIR_HEADER_FIRST_FIELD = "query-id"


@dataclass
class GoldFile:
    """The gold of each case id (`{"relevance": {card: grade}}`, or the fields a JSONL line
    gives), where each was read, and the records of the file that could not be read."""

    path: Path
    gold: dict[str, dict] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    rejects: list[FormatRecord] = field(default_factory=list)


def read_gold(path: Path) -> GoldFile:
    """The gold of a qrels file of any of the four kinds (see the module's docstring)."""
    require_file(path, "--qrels")
    gold = _reader_of(path)(path)
    if not gold.gold and not gold.rejects:
        raise InputError(f"{path}: holds no judgments (--qrels)")
    return gold


def _reader_of(path: Path) -> Callable[[Path], GoldFile]:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return ranx_qrels
    if suffix in (".jsonl", ".ndjson"):
        return jsonl_gold
    if suffix == ".tsv":
        return beir_qrels
    first = _first_line(path)
    if first.split("\t")[0].strip() == BEIR_HEADER_FIRST_FIELD:
        return beir_qrels
    if first.startswith("{"):
        return jsonl_gold
    return trec_qrels


def _first_line(path: Path) -> str:
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                return raw.decode("utf-8", errors="replace").strip()
    return ""


def _grade(grade: object) -> object:
    """A qrels grade as trec_eval takes it: a negative integer is 0 (judged, not relevant)."""
    if isinstance(grade, int) and not isinstance(grade, bool) and grade < 0:
        return 0
    return grade


def trec_qrels(path: Path) -> GoldFile:
    """TREC qrels, by the TREC reader; its malformed lines are rejects by line."""
    qrels = read_qrels(path)
    gold = GoldFile(path)
    for case_id, judged in qrels.judged.iter_rows():
        gold.gold[case_id] = {"relevance": {pair["card_id"]: pair["grade"] for pair in judged}}
        gold.origins[case_id] = f"{path}:query {case_id}"
    gold.rejects = [FormatRecord(line_origin(path, reject.line), reject=reject.reason) for reject in qrels.rejects]
    return gold


def beir_qrels(path: Path) -> GoldFile:
    """A BEIR qrels TSV, as BEIR's GenericDataLoader reads it: the first line is the header,
    each further line `query-id<TAB>corpus-id<TAB>score` with an integer score."""
    gold = GoldFile(path)
    try:
        _read_beir_rows(path, gold)
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except csv.Error as error:
        raise InputError(f"{path}: not a readable TSV file ({error})") from None
    return gold


def _read_beir_rows(path: Path, gold: GoldFile) -> None:
    """The lines of a BEIR qrels TSV into `gold` (raises UnicodeDecodeError, csv.Error)."""
    csv.field_size_limit(MAX_RECORD_BYTES)
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        next(reader, None)
        for row in reader:
            origin = line_origin(path, reader.line_num)
            if not row or not "".join(row).strip():
                continue
            if len(row) < 3:
                gold.rejects.append(FormatRecord(origin, reject=f"{len(row)} field(s), expected query-id, corpus-id, score"))
                continue
            query_id, corpus_id, score = row[0], row[1], row[2].strip()
            try:
                grade = int(score)
            except ValueError:
                gold.rejects.append(FormatRecord(origin, reject=f"score {score!r} is not an integer grade"))
                continue
            gold.gold.setdefault(query_id, {"relevance": {}})["relevance"][corpus_id] = _grade(grade)
            gold.origins.setdefault(query_id, origin)


def ranx_qrels(path: Path) -> GoldFile:
    """ranx qrels as JSON, `{query_id: {doc_id: grade}}`; each query is a row, in order."""
    document = json_document(path, "--qrels")
    if not isinstance(document, dict):
        raise InputError(f"{path}: not a JSON object of query id to {{doc id: grade}} (--qrels)")
    gold = GoldFile(path)
    for position, (query_id, judged) in enumerate(document.items(), start=1):
        origin = row_origin(path, position)
        if not isinstance(judged, dict):
            gold.rejects.append(FormatRecord(origin, reject=f"query {query_id!r}: not an object of doc id to grade"))
            continue
        gold.gold[query_id] = {"relevance": {doc: _grade(grade) for doc, grade in judged.items()}}
        gold.origins[query_id] = origin
    return gold


def jsonl_gold(path: Path) -> GoldFile:
    """JSONL lines `{case_id, must_cite_one_of | relevant_ids | relevance}`."""
    gold = GoldFile(path)
    for row in jsonl_rows(path):
        if row.problem is not None:
            gold.rejects.append(FormatRecord(row.origin, reject=row.problem))
            continue
        case_id = id_text(row.values.get("case_id"))
        given = {name: _ids_as_text(row.values[name]) for name in GOLD_FIELDS if name in row.values}
        if not isinstance(case_id, str) or not case_id:
            reason = "field case_id is missing" if case_id is None else "field case_id must be a non-empty string"
            gold.rejects.append(FormatRecord(row.origin, reject=reason))
        elif not given:
            gold.rejects.append(FormatRecord(row.origin, reject="has none of must_cite_one_of, relevant_ids, relevance"))
        elif case_id in gold.gold:
            gold.rejects.append(FormatRecord(row.origin, reject=f"case_id {case_id!r} repeats {gold.origins[case_id]}"))
        else:
            gold.gold[case_id] = given
            gold.origins[case_id] = row.origin
    return gold


def _ids_as_text(value: object) -> object:
    """A list of ids with each integer id as its decimal string (a relevance object's keys are
    text already; any other value is the record rules' to judge)."""
    if isinstance(value, list):
        return [id_text(entry) if isinstance(entry, int) else entry for entry in value]
    return value


def gold_count(gold: dict) -> int:
    """How many gold entries a case's gold names (those of the field that decides, SPEC 12's
    precedence: relevance, relevant_ids, must_cite_one_of)."""
    for name in ("relevance", "relevant_ids", "must_cite_one_of"):
        value = gold.get(name)
        if isinstance(value, dict | list):
            return len(value)
    return 0


def judged_by(records: Iterator[FormatRecord], qrels: Path | None, category: str) -> Iterator[FormatRecord]:
    """`records` with their gold from the `qrels` file when one is given (`with_gold`, read
    before the first record), else as the input gave it. Whether a format may go without
    qrels is its source's rule (flows/sources/format_sources.py `needs_qrels`)."""
    return records if qrels is None else with_gold(records, read_gold(qrels), category)


def with_gold(records: Iterator[FormatRecord], gold: GoldFile, category: str) -> Iterator[FormatRecord]:
    """The gold file's rejects, then `records` with each case's gold taken from `gold` by its
    case id (in place of any the input held; a case the file does not judge is unlabelled),
    then one case per case id only the gold file knows: it retrieved nothing and scores 0."""
    yield from gold.rejects
    seen: set[object] = set()
    for record in records:
        if record.case is None:
            yield record
            continue
        case_id = record.case.get("case_id")
        seen.add(case_id)
        case = {name: value for name, value in record.case.items() if name not in GOLD_FIELDS}
        given = gold.gold.get(case_id) if isinstance(case_id, str) else None
        case.update(given or {})
        yield FormatRecord(record.origin, case, retrieved_by=record.retrieved_by,
                           gold_by=IdentityCounts(id=gold_count(given or {})))
    for case_id, given in gold.gold.items():
        if case_id not in seen:
            case = {"case_id": case_id, "locale": UNDETERMINED_LOCALE, "category": category, "retrieved_context": [],
                    **given}
            yield FormatRecord(gold.origins[case_id], case, gold_by=IdentityCounts(id=gold_count(given)))
