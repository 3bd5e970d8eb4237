"""The baseline file on disk: read and checked against its published JSON Schema (a malformed
or empty snapshot is exit 2 naming the field, never a pass), and written whole or not at all.
A job reads it once, before any work, and hands the checked `Baseline` to its report and gate."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ...transforms.baseline import dumps, snapshot_case_metrics, snapshot_problems
from ...transforms.errors import InputError, first_lines
from ..sources.artifacts import read_json_file
from ..sources.schemas import validate
from ..sources.stored_file import StoredFile, is_uri
from ..storage.output_files import written_aside

LISTED_PROBLEMS = 20
# A baseline's fields nest four containers deep (cases → a case → its gold list); far deeper
# is refused while it is parsed, before a schema check could recurse into it.
MAX_DEPTH = 32


class Baseline:
    """A checked snapshot: where it was read, the file's document and its cases as a frame
    (snapshot_case_metrics). A plain class, not a dataclass, so that Prefect, handed one as a
    task's input, does not walk the document's every case looking for futures."""

    __slots__ = ("cases", "path", "snapshot")

    def __init__(self, path: Path, snapshot: dict, cases: pl.DataFrame) -> None:
        self.path, self.snapshot, self.cases = path, snapshot, cases

    def __repr__(self) -> str:
        return f"Baseline({str(self.path)!r}, run {self.snapshot['run_id']!r}, k={self.snapshot['k']})"


def read_baseline(path: Path | str) -> Baseline:
    """The snapshot at `path`, a local file or a bucket's object (SPEC 14), checked."""
    stored = StoredFile.at(path) if is_uri(path) else Path(path)
    snapshot = read_json_file(stored, "no baseline: write one with `retrieval-eval baseline refresh RUN_ID`", MAX_DEPTH)
    problems = validate(snapshot, "baseline")
    cases = None if problems else snapshot_case_metrics(snapshot)
    problems = problems or snapshot_problems(snapshot, cases)  # its figures, once its shape holds
    if problems:
        raise InputError(
            f"{path}: not a valid baseline snapshot (`retrieval-eval schema baseline` prints its schema):\n"
            + first_lines([f"{path}: {problem}" for problem in problems], LISTED_PROBLEMS)
        )
    return Baseline(path, snapshot, cases)


def write_baseline(snapshot: dict, path: Path) -> None:
    if not path.is_dir():  # a folder given is named by written_aside
        path.parent.mkdir(parents=True, exist_ok=True)
    with written_aside(path) as handle:
        handle.write(dumps(snapshot))
