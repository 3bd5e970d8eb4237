"""Interrupts (SPEC 5): Ctrl-C (SIGINT) or SIGTERM at any moment of `run` ends it with one
line on stderr and exit 130 / 143, no traceback, nothing half-visible and no scratch left;
the warehouse holds each run as before or whole."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from builders import write_run
from test_reliability import assert_every_run_whole, leftovers, synthetic_cases

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("interrupts")
    write_run(root / "runs", "small", lines=synthetic_cases(50))
    write_run(root / "runs", "big", lines=synthetic_cases(30_000))
    return root / "runs"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_at_any_moment_ends_cleanly(runs, tmp_path, signum):
    warehouse = tmp_path / "wh"
    args = [sys.executable, "-m", "retrieval_eval", "run", str(runs), "--warehouse", str(warehouse),
            "--report-dir", str(tmp_path / "rep")]
    # The moments are spread over a whole run, timed first into a warehouse of its own.
    started = time.perf_counter()
    subprocess.run([*args[:-4], "--warehouse", str(tmp_path / "timed"), "--report-dir", str(tmp_path / "timed-rep")],
                   check=True, capture_output=True)
    whole_run = time.perf_counter() - started
    interrupted = 0
    for fraction in (0.05, 0.2, 0.35, 0.5, 0.65, 0.8):
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(fraction * whole_run)
        if process.poll() is None:
            process.send_signal(signum)
        _, stderr = process.communicate(timeout=120)
        if process.returncode == 0:  # it finished before the signal: evaluate it again next time
            warehouse_done = assert_every_run_whole(warehouse)
            assert warehouse_done == {"small": 50, "big": 30_000}
            subprocess.run([sys.executable, "-m", "retrieval_eval", "warehouse", "vacuum", "--warehouse",
                            str(warehouse)], check=True, capture_output=True)
            for run_dir in runs.iterdir():
                (run_dir / "manifest.json").touch()  # a new stamp and the same bytes: read again
            continue
        interrupted += 1
        assert process.returncode == EXIT[signum], stderr
        assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
        assert stderr.startswith("retrieval-eval: ")
        state = assert_every_run_whole(warehouse)
        assert set(state) <= {"small", "big"} and all(n in (50, 30_000) for n in state.values())
        assert not (warehouse / ".scratch").exists() or not any((warehouse / ".scratch").iterdir())
        if (warehouse / "_log").exists():
            assert not list((warehouse / "_log" / "pending").glob("*.json"))
            assert leftovers(warehouse) == set()
    assert interrupted >= 3


def test_a_signal_inside_engine_code_is_raised_once_the_thread_has_left_it(monkeypatch):
    """Polars calls Python from Rust (a frame's dtypes, a function given to it); an exception
    raised there panics in Rust. The handler waits for the main thread to leave such code."""
    import polars as pl
    from retrieval_eval.flows.commands import cli

    for name in ("_received", "_raised", "_deferrals"):
        monkeypatch.setattr(cli, name, [])
    armed: list[float] = []
    monkeypatch.setattr(signal, "setitimer", lambda which, seconds: armed.append(seconds))
    called_from_rust = []
    pl.Series([1]).map_elements(lambda x: called_from_rust.append(sys._getframe()) or x, return_dtype=pl.Int64)

    cli._on_signal(signal.SIGINT, called_from_rust[0])  # deferred: nothing raised
    assert armed == [cli.DEFER_S] and not cli._raised
    with pytest.raises(KeyboardInterrupt):
        cli._on_alarm(signal.SIGALRM, sys._getframe())  # the thread stands in our code now
    cli._on_alarm(signal.SIGALRM, sys._getframe())  # raised once only
    assert len(cli._raised) == 1


def test_a_signal_never_waits_for_engine_code_forever(monkeypatch):
    from retrieval_eval.flows.commands import cli

    for name in ("_received", "_raised", "_deferrals"):
        monkeypatch.setattr(cli, name, [])
    monkeypatch.setattr(signal, "setitimer", lambda which, seconds: None)
    in_engine = {"__name__": "polars.dataframe.frame"}
    frame = eval("__import__('sys')._getframe()", in_engine)
    cli._on_signal(signal.SIGTERM, frame)
    for _ in range(cli.MAX_DEFERRALS - 1):
        cli._on_alarm(signal.SIGALRM, frame)
    with pytest.raises(cli.Terminated):
        cli._on_alarm(signal.SIGALRM, frame)


def test_an_interrupt_deferred_then_met_again_inside_a_commit_is_raised_after_the_commit(monkeypatch):
    """Ctrl-C lands in engine code (deferred), the commit starts (interrupts deferred there),
    Ctrl-C comes again: once the commit is whole, the interrupt is raised, not lost."""
    import os

    from retrieval_eval.flows.commands import cli
    from retrieval_eval.flows.storage.interrupts import interrupts_deferred

    for name in ("_received", "_raised", "_deferrals"):
        monkeypatch.setattr(cli, name, [])
    monkeypatch.setattr(signal, "setitimer", lambda which, seconds: None)
    in_engine = eval("__import__('sys')._getframe()", {"__name__": "polars.dataframe.frame"})
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGALRM)}
    signal.signal(signal.SIGINT, cli._on_signal)
    signal.signal(signal.SIGALRM, cli._on_alarm)
    committed = False
    try:
        cli._on_signal(signal.SIGINT, in_engine)  # deferred
        with pytest.raises(KeyboardInterrupt):
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler runs here: it only notes the signal
                committed = True
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    assert committed and len(cli._raised) == 1


def test_a_signal_during_an_import_is_raised_once_the_import_is_done(monkeypatch, tmp_path):
    """An extension that imports from C prints an exception raised inside importlib's bootstrap
    as a traceback and carries on (CI met it once: exit 130, and a traceback beside the line)."""
    import importlib.abc
    import os

    from retrieval_eval.flows.commands import cli

    for name in ("_received", "_raised", "_deferrals"):
        monkeypatch.setattr(cli, name, [])

    class SignalOnImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "imported_under_a_signal":
                os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, inside the import
            return None

    (tmp_path / "imported_under_a_signal.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", [SignalOnImport(), *sys.meta_path])
    monkeypatch.delitem(sys.modules, "imported_under_a_signal", raising=False)
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGALRM)}
    signal.signal(signal.SIGINT, cli._on_signal)
    signal.signal(signal.SIGALRM, cli._on_alarm)
    imported = None
    try:
        with pytest.raises(KeyboardInterrupt):
            import imported_under_a_signal

            imported = imported_under_a_signal.VALUE
            time.sleep(1)  # the deferred interrupt is raised here, DEFER_S later
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for number, handler in handlers.items():
            signal.signal(number, handler)
        sys.modules.pop("imported_under_a_signal", None)
    assert imported == 1 and cli._deferrals and len(cli._raised) == 1



LATE_SIGNAL = """
import atexit, os, signal, sys, time
from retrieval_eval.flows.commands import cli

cli.main = lambda argv=None: 0  # a command that has done its work


def late_hook():  # an exit hook that takes a while (Prefect's stop of its temporary server does)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.1)


atexit.register(late_hook)
sys.exit(cli.console())
"""


def test_a_signal_after_the_command_is_over_changes_nothing():
    # Before: it raised in the exit hook (a traceback on stderr), and later in the shutdown,
    # where Python resets its own handlers to the default, it killed the process (exit -15, as
    # the random-moment test above met once under load). SIG_IGN is left as it is.
    done = subprocess.run([sys.executable, "-c", LATE_SIGNAL], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


SIGNAL_WHILE_IMPORTING = """
import importlib.abc, os, signal, sys, time


class SignalOnImport(importlib.abc.MetaPathFinder):  # the signal lands while flows/commands/cli.py is imported
    def find_spec(self, name, path, target=None):
        if name == "retrieval_eval.flows.commands.cli":
            os.kill(os.getpid(), int(sys.argv[1]))
            time.sleep(1)
        return None


sys.meta_path.insert(0, SignalOnImport())
from retrieval_eval.flows.commands import entry

sys.exit(entry.console())
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_command_is_imported_ends_it_with_its_one_line(signum):
    done = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_IMPORTING, str(int(signum))],
                          capture_output=True, text=True, timeout=60)
    what = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert (done.returncode, done.stderr) == (
        EXIT[signum], f"retrieval-eval: {what}; what was committed before stands, nothing after it was\n")
