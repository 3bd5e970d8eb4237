"""The garbage collector while the command's modules are imported: flows/commands/entry.py
turns it off for the imports, `imports_done` turns it on again once they are."""

from __future__ import annotations

import gc


def imports_done() -> None:
    """The command's modules are imported: what they made lives as long as the process, so it
    is frozen (left out of every later collection) and the collector, which flows/commands/entry.py
    turned off for the imports, is on again. Its passes over import-time objects freed nothing
    and held the interpreter for ~0.08 s of every command's start (one full pass: 38 ms); the
    few cycles left unfreed (the argument parser's, ~150 KB) stay for the process's life. When
    the entry did not turn it off (`main` called in a test), nothing changes."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
