"""Errors that name the user's mistake: the CLI prints them and exits 2, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass


class InputError(Exception):
    """Bad input or usage: the message names the file, and the line and field when known."""


@dataclass(frozen=True)
class Reject:
    """One record of a cases file that failed validation, kept whole in `raw`."""

    source_file: str
    line: int
    reason: str
    raw: str

    def describe(self) -> str:
        return f"{self.source_file}:{self.line}: {self.reason}"


def first_lines(lines: list[str], limit: int) -> str:
    """The first `limit` of `lines`, one a line, then how many more there are."""
    more = f"\n... and {len(lines) - limit} more" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


class RejectedRecords(InputError):
    """A run holds rejected records and --allow-rejects was not given (`allow`: how the caller
    allows them, the flag or the Python API's argument)."""

    def __init__(self, run_id: str, rejects: list[Reject], allow: str = "--allow-rejects"):
        self.run_id = run_id
        self.rejects = rejects
        lines = "\n".join(r.describe() for r in rejects)
        super().__init__(
            f"run {run_id}: {len(rejects)} record(s) rejected, run not loaded "
            f"(use {allow} to load the valid records):\n{lines}"
        )
