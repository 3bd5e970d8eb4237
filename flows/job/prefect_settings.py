"""How retrieval-eval talks to Prefect (SPEC 7): the API checked before any work (a dead URL is
one line and exit 2), a lost API noticed within seconds instead of minutes of retries, Prefect's
own output quiet, no telemetry, heartbeats for served runs and the automation that marks a run
whose heartbeats stopped Crashed, and, without an API, a server started up front and named to
every process of the run (Prefect's temporary one; for `serve`, `prefect server start`).

Prefect is imported inside each function: the CLI imports this module to check the API before
Prefect's own import, which costs seconds."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from ...transforms.errors import InputError

EPHEMERAL_STARTUP_TIMEOUT_S = 90
HEALTH_TIMEOUT_S = 3.0
HEARTBEAT_S = 30  # Prefect's least; each costs nothing measurable, but ~1 s when a flow run ends
CRASH_AFTER_S = 90  # a flow run silent this long (its heartbeats stopped) is marked Crashed
EVENTS_RECONNECTIONS = 2  # Prefect's events client tries 10 times per event (~7 s each) otherwise
SERVER_POLL_S, SERVER_STOP_S = 0.5, 15  # `serve`'s own server: how often it is asked if it is up, how long it may take to stop
SERVICE_DRAIN_S = 5  # at most this long to send a run's last logs and events to its temporary server
CRASH_AUTOMATION = "retrieval-eval-crash-silent-flow-runs"
# Set in the command's environment (flows/commands/cli.py) before Prefect is imported, since Prefect's
# telemetry and its worker processes read the environment, not temporary settings.
ENVIRONMENT = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLIENT_MAX_RETRIES": "1",
    "DASK_LOGGING__DISTRIBUTED": "error",
}


def prefect_environment() -> None:
    for name, value in ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def check_api(url: str) -> None:
    """The API at `url` answers its health check, or this is bad input (exit 2), said in one
    line; it needs only httpx, so it runs before Prefect is imported."""
    import httpx

    try:
        response = httpx.get(url.rstrip("/") + "/health", timeout=HEALTH_TIMEOUT_S)
        response.raise_for_status()
    except httpx.HTTPError as error:
        raise InputError(f"the Prefect API at {url} does not answer ({type(error).__name__}: {error}); "
                         "start it, or unset PREFECT_API_URL to run without it") from None


QUEUE_SERVICES = ("EventsWorker", "APILogWorker")  # Prefect's queue services' loggers (top level)


def quiet_prefect_loggers(level: int) -> list[tuple[logging.Logger | logging.Handler, int]]:
    """Every Prefect logger at `level` (some have their own level, the internal ones ignore
    logger levels but not their handler's, the queue services log at the top level); returns
    what to restore."""
    changed: list[tuple[Any, int]] = []
    names = ["prefect", *[n for n in logging.root.manager.loggerDict if n.startswith("prefect.")],
             *QUEUE_SERVICES, "distributed"]
    for name in names:
        logger = logging.getLogger(name)
        changed.append((logger, logger.level))
        logger.setLevel(level)
    for handler in logging.getLogger("prefect._internal").handlers:
        changed.append((handler, handler.level))
        handler.setLevel(level)
    return changed


class GateFailed(Exception):
    """A flow run's failed gate, as the data of its Failed state: an exception, so that Prefect
    logs it as one (a failed state's other data it logs with a traceback of its own making),
    carrying the job's result for the caller."""

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class PlainExpectedErrors(logging.Filter):
    """Prefect's engines log a failed flow or task run with its traceback. A failure the command
    explains in one line (bad input, a damaged warehouse, a full or read-only disk: flows/commands/cli.py;
    a failed gate) is logged as that line, without the engine's frames, so a user who chose a
    Prefect log level sees what went wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (InputError, OSError, GateFailed)):
            record.exc_info = None
            record.exc_text = None
            if isinstance(error, GateFailed):
                record.msg, record.args = str(error), None
        return True


RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
PLAIN_EXPECTED_ERRORS = PlainExpectedErrors()


def plain_run_logs() -> None:
    """The run loggers of this process log expected failures plainly: a served or deployed
    run's own process enters the flow without `configured` (adding a filter twice is a no-op)."""
    for name in RUN_LOGGERS:
        logging.getLogger(name).addFilter(PLAIN_EXPECTED_ERRORS)


@contextmanager
def configured(*, served: bool = False) -> Iterator[None]:
    """Prefect's settings for our flow runs: warnings only (nothing at all when the user did not
    choose a level: our own messages say what matters), a patient temporary-server start, one
    retry per request, a bounded events client; the flow heartbeat only for served runs (a
    killed process is then marked Crashed), since each heartbeat thread costs about a second
    at the end of every flow run."""
    from prefect.events.clients import PrefectEventsClient
    from prefect.events.worker import EventsWorker
    from prefect.settings import (
        PREFECT_CLIENT_MAX_RETRIES,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_LOGGING_LEVEL,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    defaults: dict[Any, Any] = {PREFECT_LOGGING_LEVEL: "WARNING", PREFECT_CLIENT_MAX_RETRIES: 1}
    if "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" not in os.environ:
        defaults[PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS] = EPHEMERAL_STARTUP_TIMEOUT_S
    updates: dict[Any, Any] = {PREFECT_SERVER_ANALYTICS_ENABLED: False,
                               PREFECT_FLOWS_HEARTBEAT_FREQUENCY: HEARTBEAT_S if served else None}
    EventsWorker.set_client_override(PrefectEventsClient, reconnection_attempts=EVENTS_RECONNECTIONS)
    restore = [] if "PREFECT_LOGGING_LEVEL" in os.environ else quiet_prefect_loggers(logging.CRITICAL)
    plain_run_logs()
    try:
        with temporary_settings(updates=updates, set_defaults=defaults):
            yield
    finally:
        drain_services()  # now, while Prefect is quiet
        for name in RUN_LOGGERS:
            logging.getLogger(name).removeFilter(PLAIN_EXPECTED_ERRORS)
        for item, level in restore:
            # The queue services stay quiet, and so do the handlers of Prefect's internal
            # loggers: what the services could not send in time they would say after the
            # command's own line (a warning at the interpreter's exit; an error per event
            # from the internal concurrency logger while the events client still retries a
            # lost API, seconds after the drain gave up).
            if getattr(item, "name", None) not in QUEUE_SERVICES and not isinstance(item, logging.Handler):
                item.setLevel(level)


def drain_services() -> None:
    """Send the logs and events this process's Prefect client still holds (bounded wait)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        service.drain_all(timeout=SERVICE_DRAIN_S)


@contextmanager
def api_for_run(*, dask_address: str | None = None, services: bool = False) -> Iterator[str | None]:
    """The Prefect API the flow run reports to, checked before any work. Without one, a server
    is started here, set as PREFECT_API_URL for the block (so that this process's bounded
    events client, the Dask workers and a served run's process all report to it), and stopped
    when the block ends (inside `configured`: its goodbye is as quiet as the rest of Prefect's
    output). `services` (serving): `prefect server start`, whose scheduler makes the cron's
    runs (Prefect's temporary server runs none); otherwise the temporary server. Workers of an
    existing Dask cluster must report to this process's API: without one, that is refused."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_EPHEMERAL_ENABLED,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        PREFECT_UI_URL,
        temporary_settings,
    )

    url = PREFECT_API_URL.value()
    if url:
        check_api(url)
        yield url
        return
    if dask_address is not None:
        raise InputError(
            f"--dask-address {dask_address}: its workers must report to a Prefect server this process "
            "reports to too; start one (`prefect server start`) and set PREFECT_API_URL here and on the workers"
        )
    if not services and not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        yield None  # Prefect says what it needs
        return
    if services:
        server: Any = ServerWithServices()
        say("starting a Prefect server for serving (`prefect server start`, without its UI; 10-30 s)")
    else:
        from prefect.server.api.server import SubprocessASGIServer

        server = SubprocessASGIServer()
        say("starting a temporary Prefect server for this run (10-30 s)")
    # Our server has no UI: Prefect would print links to flow runs there that do not resolve.
    ui_url = os.environ.get("PREFECT_UI_URL")
    os.environ["PREFECT_UI_URL"] = ""  # the served runs' processes inherit it
    try:
        server.start(timeout=PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
        with temporary_settings(updates={PREFECT_API_URL: server.api_url, PREFECT_UI_URL: ""}):
            try:
                yield server.api_url
            finally:  # the run's last logs and events are sent before their server goes
                drain_services()
    finally:
        server.stop()
        if ui_url is None:
            del os.environ["PREFECT_UI_URL"]
        else:
            os.environ["PREFECT_UI_URL"] = ui_url


def say(line: str) -> None:
    """One line of ours on stderr, whatever Prefect's log level."""
    print(f"retrieval-eval: {line}", file=sys.stderr, flush=True)


def where_runs_are(api_url: str | None, flow_run_id: Any) -> str:
    """How to look at a tracked flow run after the command: on the API it ran against, or, after
    a temporary server, in the database of PREFECT_HOME, which Prefect's CLI reads with no
    server running (it starts its own for the command)."""
    if api_url:
        return f"flow run {flow_run_id} is tracked on the Prefect API at {api_url}: " \
               f"`PREFECT_API_URL={api_url} prefect flow-run inspect {flow_run_id}`"
    from prefect.settings import PREFECT_HOME

    home = PREFECT_HOME.value()
    return (f"flow run {flow_run_id} is tracked in PREFECT_HOME={home}: `PREFECT_HOME={home} prefect flow-run inspect "
            f"{flow_run_id}` shows it, `prefect flow-run ls` lists every run, `prefect server start` serves them in a UI")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerWithServices:
    """`prefect server start` on a free local port, without the UI, for as long as `serve`
    runs: on Prefect's default database (PREFECT_HOME), so the served runs' history outlives it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.process: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()

    def start(self, timeout: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port), "--no-ui",
             "--analytics-off"], stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                self.log.seek(0)
                said = self.log.read().decode(errors="replace").strip().splitlines()[-3:]
                raise InputError(f"`prefect server start` exited {self.process.returncode}: " + " / ".join(said))
            try:
                check_api(self.api_url)
                return
            except InputError:
                if time.monotonic() > deadline:
                    raise InputError(f"`prefect server start` did not answer at {self.api_url} within {timeout} s") from None
                time.sleep(SERVER_POLL_S)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(SERVER_STOP_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def check_workers(client, api_url: str | None) -> None:
    """Every worker of a Dask cluster reports to `api_url` (a worker without PREFECT_API_URL
    would start a temporary server of its own and lose the task runs)."""
    seen = client.run(lambda: os.environ.get("PREFECT_API_URL"))
    wrong = {worker: url for worker, url in seen.items() if url != api_url}
    if wrong:
        worker, url = next(iter(wrong.items()))
        raise InputError(f"Dask worker {worker} reports to {url or 'no Prefect API'}, not {api_url}: start the "
                         f"cluster's workers with PREFECT_API_URL={api_url}")


def ensure_crash_automation(crash_after_s: float = CRASH_AFTER_S, *, update: bool = True) -> None:
    """The automation that marks a flow run Crashed when its heartbeats stop (its process was
    killed): created when missing, and updated to `crash_after_s` when it exists and `update`."""
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    wanted = Automation(
        name=CRASH_AUTOMATION,
        description="Mark a flow run Crashed when its heartbeats stop (retrieval-eval)",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
                    "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=crash_after_s),
        ),
        actions=[ChangeFlowRunState(state=StateType.CRASHED,
                                    message="Its process stopped sending heartbeats: it was killed or lost.")],
    )
    with get_client(sync_client=True) as client:
        existing = client.read_automations_by_name(CRASH_AUTOMATION)
    if not existing:
        wanted.create()
    elif update:
        wanted.id = existing[0].id
        wanted.update()


def crash_stale_runs(deployment_id) -> int:
    """Mark the deployment's runs left Running or Pending by a server process that died Crashed
    (this process serves the deployment alone), so that the next run gets the concurrency slot
    at once rather than after the slot's lease of five minutes; returns how many."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
                any_=[StateType.RUNNING, StateType.PENDING, StateType.CANCELLING]))),
        )
        for run in runs:
            client.set_flow_run_state(run.id, Crashed(message="The process that served it is gone."), force=True)
    return len(runs)
