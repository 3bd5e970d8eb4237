"""How retrieval-eval talks to Prefect: quiet settings, the API checked before any work (a dead
URL is one line and exit 2), and the temporary server started up front when Dask workers must
be told its address (SPEC 7)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..transforms.errors import InputError

EPHEMERAL_STARTUP_TIMEOUT_S = 90
HEALTH_TIMEOUT_S = 3.0
QUIET_LOGGERS = ("prefect", "distributed")


@contextmanager
def configured(*, served: bool = False) -> Iterator[None]:
    """Prefect's settings for our flow runs: no telemetry, warnings only, a patient temporary
    server start; the flow heartbeat only for served runs (a killed process is then marked
    Crashed), since each heartbeat thread costs about a second of every flow run's exit."""
    from prefect.settings import (
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_LOGGING_LEVEL,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    defaults: dict[Any, Any] = {PREFECT_LOGGING_LEVEL: "WARNING"}
    if "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" not in os.environ:
        defaults[PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS] = EPHEMERAL_STARTUP_TIMEOUT_S
    updates: dict[Any, Any] = {PREFECT_SERVER_ANALYTICS_ENABLED: False}
    if not served:
        updates[PREFECT_FLOWS_HEARTBEAT_FREQUENCY] = None
    with temporary_settings(updates=updates, set_defaults=defaults):
        yield


@contextmanager
def quiet_loggers() -> Iterator[None]:
    """Prefect configures its loggers once, at import: the setting alone does not lower them."""
    if "PREFECT_LOGGING_LEVEL" in os.environ:
        yield
        return
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def check_api(url: str) -> None:
    """The API at `url` answers its health check, or this is bad input (exit 2), said in one line."""
    import httpx

    try:
        response = httpx.get(url.rstrip("/") + "/health", timeout=HEALTH_TIMEOUT_S)
        response.raise_for_status()
    except httpx.HTTPError as error:
        raise InputError(f"the Prefect API at {url} does not answer ({type(error).__name__}: {error}); "
                         "start it, or unset PREFECT_API_URL to run without it") from None


def ensure_api(*, dask: bool, dask_address: str | None = None, start: bool = False) -> str | None:
    """The Prefect API the flow run reports to, checked before any work. Without one, the
    temporary server is started here when worker processes must be pointed at it (local Dask)
    or when `start` asks (serving); otherwise Prefect starts it on first use."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_EPHEMERAL_ENABLED,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
    )

    url = PREFECT_API_URL.value()
    if url:
        check_api(url)
        return url
    if dask_address is not None:
        raise InputError(
            f"--dask-address {dask_address}: its workers must report to a Prefect server this process "
            "reports to too; start one (`prefect server start`) and set PREFECT_API_URL here and on the workers"
        )
    if not (dask or start) or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return None
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start(timeout=PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    return server.api_url
