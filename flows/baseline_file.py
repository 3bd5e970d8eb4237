"""The baseline file on disk: read and checked against its published JSON Schema (a malformed
or empty snapshot is exit 2 naming the field, never a pass), and written whole or not at all."""

from __future__ import annotations

from pathlib import Path

from ..transforms.baseline import dumps, snapshot_problems
from ..transforms.errors import InputError, first_lines
from .artifacts import read_json_file
from .schemas import validate

LISTED_PROBLEMS = 20


def read_baseline(path: Path) -> dict:
    snapshot = read_json_file(path, "no baseline: write one with `retrieval-eval baseline refresh RUN_ID`")
    problems = validate(snapshot, "baseline")
    problems = problems or snapshot_problems(snapshot)  # its figures, once its shape holds
    if problems:
        raise InputError(
            f"{path}: not a valid baseline snapshot (`retrieval-eval schema baseline` prints its schema):\n"
            + first_lines([f"{path}: {problem}" for problem in problems], LISTED_PROBLEMS)
        )
    return snapshot


def write_baseline(snapshot: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(path.name + ".tmp")
    aside.write_text(dumps(snapshot), encoding="utf-8")
    aside.replace(path)
