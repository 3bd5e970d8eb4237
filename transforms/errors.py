"""Errors that name the user's mistake: the CLI prints them and exits 2, never a traceback."""

from __future__ import annotations

import shlex
from dataclasses import dataclass


class InputError(Exception):
    """Bad input or usage: the message names the file, and the line and field when known."""


class NotClean(Exception):
    """The fast pass cannot take these records (a record breaks a rule, Arrow's reader refuses
    the file, or the file holds something JSON does not allow): the line-by-line pass decides."""


@dataclass(frozen=True)
class Reject:
    """One record of a cases file that failed validation, kept whole in `raw`."""

    source_file: str
    line: int  # the record's line, or its row where `unit` says so
    reason: str
    raw: str
    unit: str = "line"  # "row": a table's row, or an entry of a JSON list (SPEC 15 `file:row N`)

    def describe(self) -> str:
        where = self.line if self.unit == "line" else f"{self.unit} {self.line}"
        return f"{self.source_file}:{where}: {self.reason}"


def first_lines(lines: list[str], limit: int) -> str:
    """The first `limit` of `lines`, one a line, then how many more there are."""
    more = f"\n... and {len(lines) - limit} more" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


# A message names this many rejected records; the rest are counted (and all are in `rejects`).
LISTED_REJECTS = 20


@dataclass(frozen=True)
class RejectTally:
    """How many records were rejected, and the first LISTED_REJECTS of them in the order they
    were found: what a message says, whatever their number."""

    count: int = 0
    first: tuple[Reject, ...] = ()

    def __add__(self, other: RejectTally) -> RejectTally:
        return RejectTally(self.count + other.count, (self.first + other.first)[:LISTED_REJECTS])


def rejects_query(run_ids: list[str], warehouse: str | None = None) -> str:
    """Where every reject of `run_ids` can be read: the `query` command that selects them
    (`warehouse`: its --warehouse, when not the default). Run ids are safe names (SPEC 6), so
    they stand quoted as they are."""
    where = f"run_id = '{run_ids[0]}'" if len(run_ids) == 1 else f"run_id in ({', '.join(repr(r) for r in run_ids)})"
    option = f" --warehouse {shlex.quote(warehouse)}" if warehouse else ""
    return f'all are in the rejects view: retrieval-eval query "select * from rejects where {where}"{option}'


class RejectedRecords(InputError):
    """A run holds rejected records and --allow-rejects was not given (`allow`: how the caller
    allows them, the flag or the Python API's argument). The message lists the first
    LISTED_REJECTS and counts the others; `where_all` says where every one of them is."""

    def __init__(self, run_id: str, tally: RejectTally, allow: str = "--allow-rejects", where_all: str = ""):
        self.run_id = run_id
        self.rejects = list(tally.first)
        self.count = tally.count
        lines = [r.describe() for r in tally.first]
        if tally.count > len(lines):
            lines.append(f"... and {tally.count - len(lines):,} more{'; ' + where_all if where_all else ''}")
        body = "\n".join(lines)
        super().__init__(
            f"run {run_id}: {tally.count:,} record(s) rejected, run not loaded "
            f"(use {allow} to load the valid records):\n{body}"
        )
