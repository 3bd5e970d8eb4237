"""The report's charts, drawn in a forked process beside the main job.

matplotlib takes about 0.3 s to import and 0.25 s to draw the report's charts: 40% of a
`retrieval-eval run` on the sample. Forked when the command starts, before the main job
imports its engines or starts a thread, a child imports matplotlib on the other core while
the main job works, then waits for the runs to draw, draws them while the parent writes
the rest of the report, and exits.

Use it first thing in a process, as `retrieval-eval run` does. Where fork is missing or
unsafe (another thread is running, or Polars or DuckDB is loaded and may have started its
thread pool: a child could inherit a lock held by one), or the child cannot deliver (it
died, took too long, or drawing failed there), the charts are drawn in this process
instead, so the report never lacks them. A child whose charts are not needed any more (the
run failed) is killed, never waited for.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transforms.report import RunReport

# Drawing takes well under a second here; on a machine this busy, drawing in-process is as good.
ANSWER_TIMEOUT_S = 20.0
# Engines with native thread pools: once one is loaded, forking is no longer safe.
THREADED_ENGINES = ("polars", "duckdb", "pyarrow")


class ChartProcess:
    """One forked child that draws one set of charts; use as a context manager, `start`
    the charts as soon as the runs are known and `wait` for them when they are needed."""

    def __init__(self) -> None:
        self._connection: Connection | None = None
        self._pid: int | None = None
        self._job: tuple | None = None
        self._answered = False

    def __enter__(self) -> ChartProcess:
        if (
            not hasattr(os, "fork")
            or threading.active_count() > 1
            or any(engine in sys.modules for engine in THREADED_ENGINES)
        ):
            return self
        parent_end, child_end = Pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            parent_end.close()
            _serve(child_end)
        child_end.close()
        self._connection, self._pid = parent_end, pid
        return self

    def __exit__(self, *exc_info) -> None:
        self._close()

    @property
    def started(self) -> bool:
        return self._job is not None

    def start(self, runs: list[RunReport], out_dir: Path, baseline: dict[str, float] | None) -> None:
        """Begin drawing the charts of `runs` into `out_dir`; `wait` for them."""
        self._job = (runs, out_dir, baseline)
        if self._connection is not None:
            try:
                self._connection.send(self._job)
            except OSError:
                self._close()  # the child is gone: `wait` draws here

    def wait(self) -> dict[str, str]:
        """The charts started, written: chart name → file name."""
        if self._job is None:
            raise RuntimeError("no charts were started")
        if self._connection is not None:
            try:
                if self._connection.poll(ANSWER_TIMEOUT_S):
                    status, value = self._connection.recv()
                    self._answered = True
                    if status == "ok":
                        return value
            except (EOFError, OSError):
                pass  # the child is gone: draw here
        from transforms.charts import write_charts

        return write_charts(*self._job)

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        if self._pid is not None:
            if not self._answered:  # still warming up or drawing for nobody: stop it now
                os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
        self._connection = self._pid = None


def _yield_to_the_main_job() -> None:
    """Give the main job's threads the CPU first. A nice level, not SCHED_IDLE: an idle-class
    child starves (minutes) whenever any other process keeps the CPU busy."""
    os.nice(10)


def _serve(connection: Connection) -> None:
    """The child: import the plotting stack now, draw the one job that comes, exit."""
    code = 0
    try:
        _yield_to_the_main_job()
        from transforms.charts import warm_up, write_charts

        warm_up()

        runs, out_dir, baseline = connection.recv()
        try:
            connection.send(("ok", write_charts(runs, out_dir, baseline)))
        except Exception as error:  # the parent draws again in-process and raises it there
            connection.send(("failed", repr(error)))
    except EOFError:
        pass  # the parent finished without charts
    except BaseException:
        code = 1
    finally:
        os._exit(code)  # no atexit handlers, no flushing of buffers inherited from the parent
