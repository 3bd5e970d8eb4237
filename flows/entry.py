"""The command's entry point, kept to a few lines: an interrupt that arrives while the command
is still being imported ends it quietly with 130 / 143, like one that arrives later; the
garbage collector is off while the command's modules are imported (flows/cli.py
`imports_done` turns it on again)."""

import gc
import signal

EXIT_ON_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _exit_quietly(signum, frame) -> None:
    raise SystemExit(EXIT_ON_SIGNAL[signum])


def console() -> int:
    for signum in EXIT_ON_SIGNAL:
        signal.signal(signum, _exit_quietly)
    gc.disable()
    from .cli import console as command

    return command()
