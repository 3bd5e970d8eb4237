"""Rejected records as they are found → Parquet files in an ingest's scratch folder, so that
memory holds a bounded batch of them whatever their number (SPEC 16 "Bounded memory on bad
input"). The run's finish writes them as the parts of its `rejects` table
(flows/job/run_steps.py); the message names the first few and counts the rest (transforms/errors.py
`RejectTally`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ...transforms.errors import LISTED_REJECTS, Reject, RejectTally

REJECT_COLUMNS = {"source_file": pl.String, "line": pl.Int64, "reason": pl.String, "raw": pl.String, "unit": pl.String}
# A file is written once this many rejects, or this many bytes of their raw lines, are held.
FLUSH_ROWS = 50_000
FLUSH_BYTES = 32 << 20


@dataclass(frozen=True)
class RejectFiles:
    """Every reject of one ingest: the tally for the message, and the files holding them all
    (REJECT_COLUMNS, in the order found)."""

    tally: RejectTally = RejectTally()
    files: tuple[Path, ...] = ()

    @property
    def count(self) -> int:
        return self.tally.count

    def frames(self) -> Iterator[pl.DataFrame]:
        """The rejects, one file's frame at a time."""
        for path in self.files:
            yield pl.read_parquet(path)

    def __add__(self, other: RejectFiles) -> RejectFiles:
        return RejectFiles(self.tally + other.tally, self.files + other.files)


class RejectStream:
    """Takes rejects one by one or a block's list at a time (`append`, `extend`, as a list
    does) and writes them to `folder` as `<name>-NNNN.parquet` in batches; `finish()` says what
    was written."""

    def __init__(self, folder: Path, name: str = "rejects") -> None:
        self.folder = folder
        self.name = name
        self._count = 0
        self._first: list[Reject] = []
        self._held: list[Reject] = []
        self._held_bytes = 0
        self._files: list[Path] = []

    def __len__(self) -> int:
        return self._count

    def append(self, reject: Reject) -> None:
        self._count += 1
        if len(self._first) < LISTED_REJECTS:
            self._first.append(reject)
        self._held.append(reject)
        self._held_bytes += len(reject.raw) + len(reject.reason)
        if len(self._held) >= FLUSH_ROWS or self._held_bytes >= FLUSH_BYTES:
            self._flush()

    def extend(self, rejects: Iterable[Reject]) -> None:
        for reject in rejects:
            self.append(reject)

    def _flush(self) -> None:
        if not self._held:
            return
        path = self.folder / f"{self.name}-{len(self._files):04d}.parquet"
        columns = {name: [getattr(r, name) for r in self._held] for name in REJECT_COLUMNS}
        pl.DataFrame(columns, schema=REJECT_COLUMNS).write_parquet(path, compression="zstd")
        self._files.append(path)
        self._held, self._held_bytes = [], 0

    def finish(self) -> RejectFiles:
        self._flush()
        return RejectFiles(RejectTally(self._count, tuple(self._first)), tuple(self._files))

    def discard(self) -> None:
        """Forget every reject taken (a read that starts over), and remove their files."""
        for path in self._files:
            path.unlink(missing_ok=True)
        self._count, self._first, self._held, self._held_bytes, self._files = 0, [], [], 0, []
