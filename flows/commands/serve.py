"""`retrieval-eval serve`: the nightly Prefect deployment, served until a signal ends it (the
command's exit code for that signal is flows/commands/cli.py's)."""

from __future__ import annotations

import argparse

from ..job.prefect_flows import serve
from ..job.prefect_settings import prefect_environment
from .run import job_options


def serve_nightly(args: argparse.Namespace) -> None:
    prefect_environment()
    try:
        serve(args.cron, job_options(args), args.task_runner, args.dask_address, crash_after_s=args.crash_after)
    except SystemExit as stop:  # Prefect's runner takes SIGTERM, and exits 0 on it before it has started
        if stop.code not in (0, None):
            raise
