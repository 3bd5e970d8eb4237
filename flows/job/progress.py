"""A one-line progress display on stderr for large runs, only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")

LARGE_RUN_BYTES = 32 * 1024 * 1024


class Progress:
    """`[2/4] run-id (440 MB)  batch 3  1.2 s` rewritten in place; silent when
    piped or for small runs."""

    def __init__(self, n_runs: int, stream: TextIO = sys.stderr):
        self.n_runs = n_runs
        self.stream = stream
        self.active = False
        self.started = 0.0

    def start_run(self, index: int, run_id: str, size_bytes: int) -> None:
        self.active = self.stream.isatty() and size_bytes >= LARGE_RUN_BYTES
        self.prefix = f"[{index}/{self.n_runs}] {run_id} ({size_bytes / 1e6:,.0f} MB)"
        self.started = time.monotonic()
        self.show("reading and checking records")

    def show(self, step: str) -> None:
        if self.active:
            elapsed = time.monotonic() - self.started
            self.stream.write(f"\r\x1b[K{self.prefix}  {step}  {elapsed:4.1f} s")
            self.stream.flush()

    def batches(self, batches: Iterable[T]) -> Iterator[T]:
        """`batches`, each shown as it is taken."""
        for number, batch in enumerate(batches, start=1):
            self.show(f"batch {number}")
            yield batch

    def end_run(self) -> None:
        if self.active:
            self.show("done")
            self.stream.write("\n")
            self.stream.flush()
