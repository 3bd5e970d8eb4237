"""The main job as a Prefect flow: the same steps as flows/pipeline.py, one task per run.

Every task is a thin wrapper over a function of flows/ or transforms/; the flow only
orders them. Runs fan out over the task runner (threads, or a Dask cluster whose workers
each get one DuckDB and one Polars thread), then one commit makes them visible together
under the warehouse lock, exactly as `flows.pipeline.evaluate` does in-process.

Entry points: `run_tracked` (one tracked run now) and `serve` (a nightly schedule served by
this process). prefect.yaml deploys `evaluate_flow` to a process work pool instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait
from prefect.schedules import Cron
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
    PREFECT_LOGGING_LEVEL,
    PREFECT_SERVER_ANALYTICS_ENABLED,
    PREFECT_SERVER_EPHEMERAL_ENABLED,
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
    temporary_settings,
)

from flows import config
from flows.gating import floors_from, gate_run
from flows.pipeline import (
    EvaluationOptions,
    PartitionParts,
    RunParts,
    commit_runs,
    evaluate_partition,
    finish_run,
    load_manifests,
    refused,
    refused_run,
    report_files,
    reused_run,
    run_cutoffs,
    stage_run,
)
from flows.warehouse import Warehouse
from transforms.engine import THREADS_ENV
from transforms.ingest import StagedRun, read_staged
from transforms.manifest import load_manifest
from transforms.report import headline_table
from transforms.report_render import gate_table, render_markdown

FLOW_NAME = "retrieval-eval"
DEPLOYMENT_NAME = "nightly"
REPORT_ARTIFACT = "retrieval-eval-report"
HEADLINE_ARTIFACT = "retrieval-eval-headline"
FOLDER_ARTIFACT = "retrieval-eval-report-folder"
GATE_ARTIFACT = "retrieval-eval-gate"

DASK_WORKERS = 2
# Each Dask worker process runs one task at a time with one engine thread: the machine's
# cores are shared between workers, not oversubscribed by each worker's DuckDB and Polars.
DASK_WORKER_ENV = {THREADS_ENV: "1", "POLARS_MAX_THREADS": "1"}
THREAD_WORKERS = 2
EPHEMERAL_STARTUP_TIMEOUT_S = 90
QUIET_LOGGERS = ("prefect", "distributed")


@dataclass(frozen=True)
class FlowOutcome:
    """What one flow run loaded and, when a baseline was given, whether the gate passed."""

    run_ids: list[str]
    report_path: str
    gated_run_id: str | None = None
    gate_passed: bool | None = None


def is_io_error(task, task_run, state) -> bool:
    """Retry a task only when it failed on I/O (OSError); bad input fails at once."""
    try:
        state.result()
    except OSError:
        return True
    except Exception:
        return False
    return False


IO_RETRIES = {"retries": 2, "retry_delay_seconds": [1, 2], "retry_condition_fn": is_io_error}


@task(name="stage-run", task_run_name="stage-{run_dir}", cache_policy=NO_CACHE, **IO_RETRIES)
def stage_run_task(run_dir: str, warehouse: str, txn: str, options: EvaluationOptions) -> StagedRun:
    """Validate one run's cases file and stage it as partitions (one read of the file); an
    unchanged run (same content digest, cutoffs and code) is not read but reused."""
    return stage_run(load_manifest(Path(run_dir)), Warehouse(Path(warehouse)), txn, options)


@task(name="evaluate-partition", task_run_name="evaluate-{run_id}-{index}", cache_policy=NO_CACHE, **IO_RETRIES)
def evaluate_partition_task(
    staged_path: Path, run_id: str, ks: list[int], warehouse: str, txn: str, index: int
) -> PartitionParts:
    """Rankings, cases, case metrics and partial sums of one partition of a run."""
    return evaluate_partition(read_staged(staged_path), run_id, ks, Warehouse(Path(warehouse)), txn, index)


@task(name="finish-run", task_run_name="finish-{run_dir}", cache_policy=NO_CACHE, **IO_RETRIES)
def finish_run_task(
    run_dir: str, staged: StagedRun, partitions: list[PartitionParts], warehouse: str, txn: str,
    options: EvaluationOptions,
) -> RunParts:
    """Aggregates merged from the partitions' partial sums, the `runs` row and rejects."""
    return finish_run(load_manifest(Path(run_dir)), staged, partitions, Warehouse(Path(warehouse)), txn, options)


@task(name="refuse-run", task_run_name="refuse-{staged.run_id}", cache_policy=NO_CACHE)
def refused_run_task(staged: StagedRun, warehouse: str, txn: str) -> RunParts:
    return refused_run(staged, Warehouse(Path(warehouse)), txn)


@task(name="commit-runs", cache_policy=NO_CACHE)
def commit_task(warehouse: str, results: list[RunParts]) -> None:
    """One catalog transaction makes every run's parts visible together."""
    commit_runs(Warehouse(Path(warehouse)), results)


@task(name="report", cache_policy=NO_CACHE)
def report_task(
    warehouse: str,
    run_ids: list[str],
    report_dir: str,
    charts: bool = True,
    baseline: str | None = None,
    kb: str | None = None,
) -> str:
    """report.md (and charts) in `report_dir`, and the report as Prefect artifacts."""
    folder = Path(report_dir).absolute()
    report = report_files(
        Warehouse(Path(warehouse)),
        run_ids,
        folder,
        Path(kb) if kb else None,
        charts=charts,
        baseline=Path(baseline) if baseline else None,
    )
    # The UI cannot show the report folder's images: the artifact keeps the tables only.
    create_markdown_artifact(
        markdown=render_markdown(report, with_images=False),
        key=REPORT_ARTIFACT,
        description="Retrieval evaluation report (tables; charts are in the report folder)",
    )
    create_table_artifact(
        table=headline_table(report).to_dicts(),
        key=HEADLINE_ARTIFACT,
        description="Headline figures of every run, slice `all`",
    )
    create_link_artifact(
        link=folder.as_uri(),
        link_text=str(folder),
        key=FOLDER_ARTIFACT,
        description="Folder with report.md and its charts",
    )
    return str(folder / "report.md")


@task(name="gate", cache_policy=NO_CACHE)
def gate_task(
    warehouse: str,
    run_id: str,
    baseline: str,
    tolerance: float = config.TOLERANCE,
    locale_tolerance: float = config.LOCALE_TOLERANCE,
    floors: dict[str, float] | None = None,
) -> bool:
    """The regression gate of `run_id` against the baseline snapshot; True when it passes."""
    result = gate_run(
        Warehouse(Path(warehouse)),
        run_id,
        Path(baseline),
        tolerance=tolerance,
        locale_tolerance=locale_tolerance,
        floors=floors or {},
    )
    table = gate_table(result)
    header = [name or "status" for name in table.header]
    create_table_artifact(
        table=[dict(zip(header, row, strict=True)) for row in table.rows],
        key=GATE_ARTIFACT,
        description=(
            f"Gate of {result.run_id} against baseline {result.baseline_run_id} at k={result.k}: "
            + ("PASS" if result.passed else "FAIL — " + "; ".join(result.failures))
        ),
    )
    return result.passed


@flow(name=FLOW_NAME)
def evaluate_flow(
    runs: str = str(config.RUNS),
    kb: str = str(config.KB),
    warehouse: str = str(config.WAREHOUSE),
    report_dir: str = str(config.REPORT_DIR),
    k: int | None = None,
    ks: list[int] | None = None,
    allow_rejects: bool = False,
    baseline: str | None = None,
    tolerance: float = config.TOLERANCE,
    locale_tolerance: float = config.LOCALE_TOLERANCE,
    min_hit: float | None = None,
    min_recall: float | None = None,
    charts: bool = True,
    partition_items: int | None = None,
) -> FlowOutcome:
    """Evaluate every run under `runs`, commit them together, write the report, gate the latest."""
    manifests = load_manifests(Path(runs))  # every manifest is checked before anything is written
    store = Warehouse(Path(warehouse))
    options = EvaluationOptions(
        warehouse=Path(warehouse), k=k, ks=tuple(ks or ()), allow_rejects=allow_rejects,
        partition_items=partition_items,
    )
    with store.writing():
        txn = store.new_txn()
        root = str(store.root)
        staging = [stage_run_task.submit(str(m.run_dir), root, txn, options) for m in manifests]
        wait(staging)  # no task is still writing when the lock is released, even on failure
        # Every partition of every run is submitted before any is awaited, so one large run
        # and many small ones spread over the workers alike.
        pending = []
        for manifest, staged_future in zip(manifests, staging, strict=True):
            staged = staged_future.result()
            if not staged.loaded or staged.reused is not None:
                pending.append((manifest, staged, None))
                continue
            _, cutoffs = run_cutoffs(manifest, options)
            futures = [
                evaluate_partition_task.submit(path, staged.run_id, cutoffs, root, txn, index)
                for index, path in enumerate(staged.partitions)
            ]
            pending.append((manifest, staged, futures))
        wait([future for _, _, futures in pending for future in futures or []])
        results = [
            reused_run(staged)
            if staged.reused is not None
            else refused_run_task(staged, root, txn)
            if futures is None
            else finish_run_task(
                str(manifest.run_dir), staged, [f.result() for f in futures], root, txn, options
            )
            for manifest, staged, futures in pending
        ]
        commit_task(root, results)
    error = refused(results)
    if error is not None:
        raise error
    run_ids = [result.run_id for result in results]
    report_path = report_task(str(store.root), run_ids, report_dir, charts, baseline, kb)
    if baseline is None or not manifests:
        return FlowOutcome(run_ids, report_path)
    latest = max(manifests, key=lambda m: m.created_at).run_id
    floors = floors_from(min_hit, min_recall)
    passed = gate_task(str(store.root), latest, baseline, tolerance, locale_tolerance, floors)
    return FlowOutcome(run_ids, report_path, latest, passed)


@contextmanager
def quiet_settings() -> Iterator[None]:
    """No telemetry, no heartbeat thread, warnings only; a patient temporary-server start."""
    defaults: dict[Any, Any] = {PREFECT_LOGGING_LEVEL: "WARNING"}
    if "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" not in os.environ:
        defaults[PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS] = EPHEMERAL_STARTUP_TIMEOUT_S
    # Prefect configures its loggers once, at import: the setting alone does not lower them.
    loggers = [] if "PREFECT_LOGGING_LEVEL" in os.environ else [logging.getLogger(n) for n in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    with temporary_settings(
        updates={PREFECT_SERVER_ANALYTICS_ENABLED: False, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None},
        set_defaults=defaults,
    ):
        for logger in loggers:
            logger.setLevel(logging.WARNING)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


def make_task_runner(task_runner: str = "thread", dask_address: str | None = None, api_url: str | None = None):
    """Threads in this process, a local Dask cluster, or the Dask scheduler at `dask_address`.

    Local Dask workers are separate processes: they get `api_url` so that their task runs
    report to the same Prefect server as the flow (without it each would start its own
    temporary server), and one DuckDB and one Polars thread each. Workers of a cluster at
    `dask_address` must have PREFECT_API_URL and the thread caps in their own environment.
    """
    if task_runner not in ("thread", "dask"):
        raise ValueError(f"unknown task runner {task_runner!r} (expected 'thread' or 'dask')")
    if dask_address is not None:
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(address=dask_address)
    if task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        return DaskTaskRunner(cluster_kwargs=dask_cluster_kwargs(api_url))
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=THREAD_WORKERS)


def dask_cluster_kwargs(api_url: str | None = None) -> dict[str, Any]:
    """LocalCluster arguments: process workers, one thread each, with their environment."""
    env = dict(DASK_WORKER_ENV)
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    env["PREFECT_LOGGING_LEVEL"] = os.environ.get("PREFECT_LOGGING_LEVEL", "WARNING")
    env["DASK_LOGGING__DISTRIBUTED"] = os.environ.get("DASK_LOGGING__DISTRIBUTED", "warning")
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return {"n_workers": DASK_WORKERS, "threads_per_worker": 1, "processes": True, "env": env}


def ensure_api_url() -> str | None:
    """The Prefect API this process reports to, starting the temporary server if there is none.

    Same server the client would start on first use (one per process), started here so
    that its address can be handed to Dask worker processes.
    """
    api_url = PREFECT_API_URL.value()
    if api_url or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return api_url
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start(timeout=PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    return server.api_url


@dataclass(frozen=True)
class GateSettings:
    """The gate a flow run applies to its newest run; none without a baseline."""

    baseline: Path | str | None = None
    tolerance: float = config.TOLERANCE
    locale_tolerance: float = config.LOCALE_TOLERANCE
    floors: dict[str, float] = field(default_factory=dict)


def flow_parameters(options: EvaluationOptions, gate: GateSettings, charts: bool = True) -> dict[str, Any]:
    """The flow's parameters for `options` (JSON-friendly: paths as strings, ks as a list)."""
    return {
        "runs": str(options.runs),
        "kb": str(options.kb),
        "warehouse": str(options.warehouse),
        "report_dir": str(options.report_dir),
        "k": options.k,
        "ks": list(options.ks) or None,
        "allow_rejects": options.allow_rejects,
        "baseline": None if gate.baseline is None else str(gate.baseline),
        "tolerance": gate.tolerance,
        "locale_tolerance": gate.locale_tolerance,
        "min_hit": gate.floors.get("hit_at_k"),
        "min_recall": gate.floors.get("recall_at_k"),
        "charts": charts,
        "partition_items": options.partition_items,
    }


@contextmanager
def configured_flow(task_runner: str, dask_address: str | None, *, start_server: bool) -> Iterator[Any]:
    """evaluate_flow on the chosen task runner, with quiet settings; with `start_server`, the
    temporary server is started first so that worker processes can be pointed at it."""
    with quiet_settings():
        api_url = ensure_api_url() if start_server else None
        runner = make_task_runner(task_runner, dask_address, api_url)
        with temporary_settings(updates={PREFECT_API_URL: api_url} if api_url else {}):
            yield evaluate_flow.with_options(task_runner=runner)


def run_tracked(
    options: EvaluationOptions,
    task_runner: str = "thread",
    dask_address: str | None = None,
    gate: GateSettings | None = None,
    *,
    charts: bool = True,
    return_state: bool = False,
):
    """Run the flow once, tracked by Prefect (the temporary server unless PREFECT_API_URL is set).

    Returns the FlowOutcome, or the final state with `return_state=True`. Errors of the
    pipeline (InputError and its kin) are raised as they are, as in the in-process mode.
    """
    local_dask = task_runner == "dask" and dask_address is None
    with configured_flow(task_runner, dask_address, start_server=local_dask) as evaluate:
        return evaluate(**flow_parameters(options, gate or GateSettings(), charts), return_state=return_state)


def serve(
    cron: str = config.NIGHTLY_CRON,
    options: EvaluationOptions | None = None,
    task_runner: str = "thread",
    dask_address: str | None = None,
    gate: GateSettings | None = None,
    timezone: str = "UTC",
) -> None:
    """Serve the `nightly` deployment from this process until interrupted.

    Against PREFECT_API_URL when set (a `prefect server start` keeps the schedule and the
    history); otherwise against a temporary server that lives only as long as this process.
    """
    with configured_flow(task_runner, dask_address, start_server=True) as evaluate:
        evaluate.serve(
            name=DEPLOYMENT_NAME,
            schedules=[Cron(cron, timezone=timezone)],
            parameters=flow_parameters(options or EvaluationOptions(), gate or GateSettings()),
        )


if __name__ == "__main__":
    serve()
