"""The command's entry point, kept to a few lines: an interrupt that arrives while the command
is still being imported ends it with 130 / 143 and its one line, like one that arrives later;
the garbage collector is off while the command's modules are imported (flows/commands/cli.py
`imports_done` turns it on again)."""

import gc
import signal
import sys

from .exit_codes import EXIT_ON_SIGNAL, interrupted_line


def _exit_while_importing(signum, frame) -> None:
    print(interrupted_line(signum), file=sys.stderr)
    raise SystemExit(EXIT_ON_SIGNAL[signum])


def console() -> int:
    for signum in EXIT_ON_SIGNAL:
        signal.signal(signum, _exit_while_importing)
    gc.disable()
    from .cli import console as command  # deferred: the command's modules load with the collector off

    return command()
