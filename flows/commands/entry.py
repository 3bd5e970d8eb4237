"""The command's entry point, kept to a few lines: an interrupt that arrives while the command
is still being imported ends it with 130 / 143 and its one line, like one that arrives later;
the garbage collector is off while the command's modules are imported (flows/commands/cli.py
`imports_done` turns it on again)."""

import gc
import signal
import sys

EXIT_ON_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}


def interrupted_line(signum: int) -> str:
    what = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    return f"retrieval-eval: {what}; what was committed before stands, nothing after it was"


def _exit_while_importing(signum, frame) -> None:
    print(interrupted_line(signum), file=sys.stderr)
    raise SystemExit(EXIT_ON_SIGNAL[signum])


def console() -> int:
    for signum in EXIT_ON_SIGNAL:
        signal.signal(signum, _exit_while_importing)
    gc.disable()
    from .cli import console as command

    return command()
