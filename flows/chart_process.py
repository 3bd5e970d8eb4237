"""The report's charts, drawn in a forked process beside the main job.

matplotlib takes about 0.3 s to import and 0.25 s to draw the report's charts: 40% of a
`retrieval-eval run` on the sample. Forked when the command starts, before the main job
imports its engines or starts a thread, a child imports matplotlib on the other core while
the main job works, then waits for the runs to draw, draws them while the parent writes
the rest of the report, and exits.

Where fork is missing or unsafe (another thread is running: a child could inherit a lock
held by it), or the child cannot deliver (it died, hung, or drawing failed there), the
charts are drawn in this process instead, so the report never lacks them.
"""

from __future__ import annotations

import os
import signal
import threading
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transforms.report import RunReport

# Drawing takes well under a second; a child that has not answered by then is stuck.
ANSWER_TIMEOUT_S = 60.0


class ChartProcess:
    """One forked child that draws one set of charts; use as a context manager, `start`
    the charts as soon as the runs are known and `wait` for them when they are needed."""

    def __init__(self) -> None:
        self._connection: Connection | None = None
        self._pid: int | None = None
        self._job: tuple | None = None

    def __enter__(self) -> ChartProcess:
        if not hasattr(os, "fork") or threading.active_count() > 1:
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
                    if status == "ok":
                        return value
                else:
                    os.kill(self._pid, signal.SIGKILL)
            except (EOFError, OSError):
                pass  # the child is gone: draw here
        from transforms.charts import write_charts

        return write_charts(*self._job)

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()  # a child still waiting for a job sees EOF and exits
        if self._pid is not None:
            os.waitpid(self._pid, 0)
        self._connection = self._pid = None


def _yield_to_the_main_job() -> None:
    """Run only on CPU the main job leaves idle: SCHED_IDLE where Linux offers it, else the
    lowest nice level. Drawing, at the end, happens while the main job waits for it."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


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
