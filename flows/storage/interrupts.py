"""Where an interrupt may not land: Ctrl-C or SIGTERM while a commit, its cleanup or an
engine's import runs takes effect right after it (a C extension interrupted while it loads
can abort the process; a log entry is written whole anyway, and this keeps the cleanup whole
too)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)  # SIGALRM: an interrupt raised later (flows/commands/cli.py)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {number: signal.signal(number, lambda n, frame: received.append(n)) for number in SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if received and callable(previous[received[0]]):
            previous[received[0]](received[0], None)


def import_engines() -> None:
    """Import the engines (Arrow, Polars, DuckDB) where no interrupt lands."""
    with interrupts_deferred():
        import duckdb  # noqa: F401
        import polars  # noqa: F401
        import pyarrow  # noqa: F401
