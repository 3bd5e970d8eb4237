"""ranx runs (SPEC 15 `ranx`): INPUT is a ranx run as JSON, `{q: {d: score}}` (what ranx's
`Run.save` writes for a `.json` path; read as BEIR's results are, beir.py), or a TREC run
(read by flows/sources/trec_files.py, which ranks as trec_eval does). `--qrels` is ranx
qrels JSON `{q: {d: grade}}` or TREC qrels (qrels.py). Ranking: score descending, ties by
doc id descending; a query only the qrels know scores 0. Locale `und`, category `ranx`."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..trec_files import TrecRunRead
from .beir import scored_queries
from .identity import Card
from .input_rows import require_file
from .qrels import judged_by
from .record import FormatRecord, IdentityCounts, case_of, item_of, line_origin

FORMAT = "ranx"


def read_cases(path: Path, *, qrels: Path | None = None) -> Iterator[FormatRecord]:
    """The cases of a ranx run, their gold from `qrels` (without it, unlabelled)."""
    require_file(path, "--source input")
    run = scored_queries(path, FORMAT) if _is_json(path) else trec_run_cases(path)
    return judged_by(run, qrels, FORMAT)


def _is_json(path: Path) -> bool:
    if path.suffix.lower() == ".json":
        return True
    with open(path, "rb") as handle:
        return handle.read(4096).lstrip().startswith(b"{")


def trec_run_cases(path: Path) -> Iterator[FormatRecord]:
    """The topics of a TREC run as cases (origin `file:query Q`: a topic spans many lines),
    in topic order; then the run's malformed lines as rejects, by line."""
    with tempfile.TemporaryDirectory(prefix="ranx-trec-") as scratch:
        read = TrecRunRead(path, spill_dir=Path(scratch))
        for topics in read.topics(in_file_order=False):
            for case_id, retrieved in topics.select("case_id", "retrieved_context").iter_rows():
                items = [item_of(Card(item["id"], "id"), score=item["score"]) for item in retrieved]
                case = case_of({}, case_id=case_id, category=FORMAT, question=None, retrieved=items, gold=None)
                yield FormatRecord(f"{path}:query {case_id}", case, retrieved_by=IdentityCounts(id=len(items)))
    for reject in read.rejects:
        yield FormatRecord(line_origin(path, reject.line), reject=reject.reason)
