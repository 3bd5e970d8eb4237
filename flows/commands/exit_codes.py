"""The command's exit codes, and the one table that maps what went wrong to them (SPEC 5):
0 ok, 1 a gate or check failed (the command returns it), 2 bad input or usage and the
environment's refusals (a full disk, a missing folder), 130 / 143 interrupted, 141 the reader
of a pipe went away. Kept to the standard library at import: the entry point imports it
before it installs its signal handlers, so an interrupt in that time is Python's own (importing
the store's errors with it, the whole storage package and BLAKE3, made that window 20 ms)."""

from __future__ import annotations

import signal

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # as a shell reports a command that SIGPIPE ended
EXIT_ON_SIGNAL = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}


def interrupted_line(signum: int) -> str:
    what = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    return f"retrieval-eval: {what}; what was committed before stands, nothing after it was"


def error_exit(error: BaseException) -> tuple[int, str] | None:
    """The exit code and the one line said for an error that is the user's or the environment's,
    not the program's; None for any other (it is raised, with its traceback). Interrupts and a
    closed pipe are met before this (flows/commands/cli.py `main`)."""
    from ...transforms.errors import InputError  # deferred: this module is imported before the handlers
    from ..storage.errors import StoreError  # deferred: as above
    from ..storage.locations import LocationError  # deferred: as above

    if isinstance(error, InputError):
        return EXIT_BAD_INPUT, f"retrieval-eval: {error}"
    if isinstance(error, StoreError):  # a store's refusal or absence, named by its location (never a secret)
        return EXIT_BAD_INPUT, f"retrieval-eval: {error}"
    if isinstance(error, LocationError):  # a location that cannot be parsed (its message repeats no user information)
        return EXIT_BAD_INPUT, f"retrieval-eval: {error}"
    if isinstance(error, OSError):  # disk full, read-only or missing folders: the environment, said plainly
        where = f"{error.filename}: " if error.filename else ""
        return EXIT_BAD_INPUT, f"retrieval-eval: {where}{error.strerror or error}"
    return None
