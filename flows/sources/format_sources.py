"""Other tools' stored results as runs of the main job (SPEC 15 `run --source FORMAT INPUT`).

A `FormatSource` is one input file of a format (a reader of flows/sources/formats/) and the
qrels given with it: a source of run artifacts (flows/sources/source.py `RunSource`) that the
job plans, fingerprints and reuses like a run folder. Its ingest (`FormatIngest`) takes the
cases the reader yields one at a time, judges each by the record rules of a cases file
(transforms/records.py `judge_line`, a case id once per run), writes the valid ones to a clean
copy in the run's scratch folder and stages that copy as a cases file's line-by-line pass does
(flows/sources/ingest.py `clean_batches`): memory holds one case and one batch, whatever the
input's size. Every reject, the reader's or the rules', is named by the reader's origin
(`file:line N`, `file:row N`), the input's location standing for its local copy.

A retrieved item identified by its content (identity.py) is the chunk named by its text: its
`id` becomes that text (at most CHUNK_TEXT_CHARS characters) and its `parent_id` the content's
card id, so that card identity (SPEC 2.1) is the digest and the `retrieved` view keeps the
text the report's explorer shows. Each staged case carries how its retrieved items and gold
entries were identified (transforms/run_summary.py IDENTITY_COUNTS), which the `runs` row adds
up.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl

from ...transforms.errors import InputError, Reject
from ...transforms.records import MAX_RECORD_BYTES, judge_line
from ...transforms.run_summary import IDENTITY_COUNTS
from ..storage.hashing import file_digest
from .case_file import FileFacts
from .strict_read import Prefetch
from .formats import READERS
from .formats.identity import content_id
from .formats.record import FormatRecord
from .ingest import LINE_BY_LINE, IngestAccount, RunIngestBase, StagedBatch, clean_batches
from .reject_stream import RejectStream
from .one_input import OneInputSource, artifacts_digest
from .trec_files import existing_input, input_manifest

# The formats that store no gold: their runs need --qrels.
WITHOUT_GOLD = frozenset({"beir", "ranx", "openinference"})
INPUT_OPTION = "--source input"
CHUNK_TEXT_CHARS = 2000  # of a content-identified chunk's text, kept as its id
ORIGIN = re.compile(r"(?P<file>.*):(?P<unit>line|row|query) (?P<at>.+)", re.DOTALL)


@dataclass(frozen=True)
class FormatSource(OneInputSource):
    """One input of format `format_name` and its qrels (None: the input holds its gold)."""

    format_name: str

    def fingerprint(self) -> list:
        """The input's and the qrels' (StoredFile.fingerprint), without reading them."""
        return [self.format_name, self.input.fingerprint(), None if self.qrels is None else self.qrels.fingerprint()]

    def ingest(self, scratch: Path, *, allow_rejects: bool, relevance_level: int, batch_items: int,
               committed_digest: str | None, prefetch: Prefetch | None = None) -> FormatIngest:
        return FormatIngest(self, scratch, allow_rejects=allow_rejects, relevance_level=relevance_level,
                            batch_items=batch_items, committed_digest=committed_digest)


def format_source(format_name: str, location: Path | str, *, qrels: Path | str | None = None,
                  run_id: str | None = None, top_k: int,
                  committed: Mapping[str, dict] | None = None) -> list[FormatSource]:
    """The one run of `run --source format_name location [--qrels qrels] [--run-id run_id]`:
    run id `run_id` or the input's name without its extension, created_at the input's
    modification time, retrieval_top_k `top_k`. Refused here, before anything is written: a
    missing input or qrels, a format without gold and no --qrels, an unsafe run id. One input
    file is one run: `committed` (flows/sources/source.py SourceFormat) saves no read here."""
    needs_qrels(format_name, location, qrels)
    stored = existing_input(location, INPUT_OPTION)
    judged = None if qrels is None else existing_input(qrels, "--qrels")
    config = {"source": format_name, "input": stored.location, "qrels": None if judged is None else judged.location}
    manifest = input_manifest(stored, location, run_id, top_k=top_k, config=config)
    return [FormatSource(manifest, stored, judged, format_name)]


def needs_qrels(format_name: str, location: Path | str, qrels: Path | str | None) -> None:
    """A format that stores no gold (WITHOUT_GOLD) cannot do without `qrels`: bad input. The
    one place this rule is checked; its readers take whatever gold they are given."""
    if format_name in WITHOUT_GOLD and qrels is None:
        raise InputError(f"{location}: a {format_name} input holds no gold: give the judgments with --qrels FILE")


# Format name → its SourceFormat (flows/sources/source.py), as `run --source` names them.
FORMAT_SOURCES = {name: partial(format_source, name) for name in READERS}


def shown_origin(origin: str, locations: dict[str, str]) -> str:
    """A reader's origin with the input's location in place of its local copy."""
    found = ORIGIN.fullmatch(origin)
    if found is None or found["file"] not in locations:
        return origin
    return f"{locations[found['file']]}:{found['unit']} {found['at']}"


def named_reject(origin: str, reason: str, raw: str, locations: dict[str, str]) -> Reject:
    """A reject named by the reader's origin, the input's location in place of its local copy:
    `file:line N` is line N of the file, `file:row N` row N (its unit says which);
    `file:query Q`, which is neither, keeps its query in the reason (line 0)."""
    found = ORIGIN.fullmatch(origin)
    if found is None:
        return Reject(origin, 0, reason, raw)
    file = locations.get(found["file"], found["file"])
    unit, at = found["unit"], found["at"]
    if unit in ("line", "row"):
        return Reject(file, int(at), reason, raw, unit)
    return Reject(file, 0, f"{unit} {at}: {reason}", raw)


def chunk_named_by_text(item: dict) -> dict:
    """A retrieved item of a reader as the cases file holds it: one identified by its content
    (its id is the content's card id) becomes the chunk named by its text, its card that id."""
    text = item.get("text")
    if not isinstance(text, str) or item.get("id") != content_id(text):
        return item
    shown = {key: value for key, value in item.items() if key not in ("id", "text")}
    return {"id": " ".join(text.split())[:CHUNK_TEXT_CHARS], "parent_id": item["id"], **shown}


def case_line(case: dict) -> bytes:
    """A reader's case as one line of a cases file."""
    retrieved = case.get("retrieved_context")
    if isinstance(retrieved, list):
        case = {**case, "retrieved_context": [chunk_named_by_text(i) if isinstance(i, dict) else i for i in retrieved]}
    return json.dumps(case, ensure_ascii=False).encode("utf-8", errors="surrogatepass") + b"\n"


def identity_row(record: FormatRecord) -> tuple[int, ...]:
    by = (record.retrieved_by, record.gold_by)
    return tuple(getattr(counts, method) for counts in by for method in ("id", "metadata", "content"))


def with_identity(frame: pl.DataFrame, counts: np.ndarray) -> pl.DataFrame:
    """Staged cases with their identity counts (one row of IDENTITY_COUNTS per case, in order)."""
    return frame.with_columns(pl.Series(name, counts[:, column], dtype=pl.Int64)
                              for column, name in enumerate(IDENTITY_COUNTS))


class FormatIngest(RunIngestBase):
    """The ingest of a FormatSource (the interface of flows/sources/ingest.py `Ingest`): iterate
    `batches()` to the end, then read `account`. With rejects and not `allow_rejects`, every
    record is still judged, to name them all, but no batch is yielded and the account says
    `refused`."""

    def __init__(self, source: FormatSource, scratch: Path, *, allow_rejects: bool, relevance_level: int,
                 batch_items: int, committed_digest: str | None) -> None:
        super().__init__(scratch, allow_rejects=allow_rejects, relevance_level=relevance_level, batch_items=batch_items,
                         committed_digest=committed_digest)
        self.source = source

    def batches(self) -> Iterator[StagedBatch]:
        self.scratch.mkdir(parents=True, exist_ok=True)
        source = self.source
        local_input = source.input.local_copy(self.scratch)
        local_qrels = None if source.qrels is None else source.qrels.local_copy(self.scratch)
        digest = artifacts_digest(file_digest(local_input), None if local_qrels is None else file_digest(local_qrels))
        if digest == self.committed_digest:  # touched, not changed: the committed evaluation stands
            self.account = IngestAccount(FileFacts(digest, 0, 0, True), LINE_BY_LINE, 0, same_bytes=True)
            return
        locations = {str(local_input): source.input.location}
        if local_qrels is not None:
            locations[str(local_qrels)] = source.qrels.location
        clean = self.scratch / "format-cases.jsonl"
        rejects = RejectStream(self.scratch, "format-rejects")
        identity = array("q")
        first_origin: dict[str, str] = {}
        valid = longest = 0
        with open(clean, "wb") as clean_out:
            for record in self._records(local_input, local_qrels, locations):
                if record.reject is not None:
                    rejects.append(named_reject(record.origin, record.reject, "", locations))
                    continue
                try:
                    line = case_line(record.case)
                except TypeError as error:  # a Parquet cell of a type JSON has not (bytes, a timestamp)
                    rejects.append(named_reject(record.origin, f"holds a value that is not JSON ({error})", "", locations))
                    continue
                verdict = judge_line(line) if len(line) <= MAX_RECORD_BYTES else None
                reason = f"record longer than {MAX_RECORD_BYTES} bytes" if verdict is None else verdict.reason
                if reason is None and verdict.case_id in first_origin:
                    reason = f"case_id {verdict.case_id!r} repeats {first_origin[verdict.case_id]}"
                if reason is not None:
                    raw = line[:1024].decode("utf-8", errors="replace").rstrip("\n")
                    rejects.append(named_reject(record.origin, reason, raw, locations))
                    continue
                first_origin[verdict.case_id] = shown_origin(record.origin, locations)
                valid += 1
                longest = max(longest, len(verdict.clean))
                clean_out.write(verdict.clean)
                identity.extend(identity_row(record))
        reject_files = rejects.finish()
        if valid + reject_files.count == 0:
            raise InputError(f"{source.input.location}: holds no records")
        facts = FileFacts(digest, None, None, True)
        if reject_files.count and not self.allow_rejects:
            clean.unlink()
            self.account = IngestAccount(facts, LINE_BY_LINE, 0, reject_files, refused=True)
            return
        counts = np.frombuffer(identity, dtype=np.int64).reshape(-1, len(IDENTITY_COUNTS))
        n_records = 0
        for batch in clean_batches(clean, longest, self.batch_items, self.relevance_level):
            rows = counts[n_records:n_records + batch.frame.height]
            n_records += batch.frame.height
            yield StagedBatch(batch.attempt, batch.index, with_identity(batch.frame, rows))
        if n_records != valid:
            raise RuntimeError(f"{source.input.location}: records that passed the rules failed staging's checks")
        clean.unlink()
        self.account = IngestAccount(facts, LINE_BY_LINE, n_records, reject_files)

    def _records(self, local_input: Path, local_qrels: Path | None, locations: dict[str, str]) -> Iterator[FormatRecord]:
        """The reader's records; its refusal of a whole file names the file's location."""
        try:
            yield from READERS[self.source.format_name](local_input, qrels=local_qrels)
        except InputError as error:
            message = str(error)
            for local, location in locations.items():
                message = message.replace(local, location)
            raise InputError(message) from None
