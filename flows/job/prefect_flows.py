"""The main job as a Prefect flow: flows/job/job.py's `run_job`, its steps run as Prefect tasks
(`PrefectSteps`) on a thread pool or a Dask cluster, with the report and the gate published
as artifacts of the flow run. A failed gate ends the flow run Failed, after its artifacts.

Entry points: `run_tracked` (one tracked run now) and `serve` (the nightly schedule served by
this process). prefect.yaml deploys `job_flow` to a process work pool instead.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import Future as ConcurrentFuture
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl
from prefect import flow, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.deployments.runner import EntrypointType
from prefect.futures import PrefectFuture, wait
from prefect.schedules import Cron
from prefect.states import Completed, Failed

from ...transforms.gate_render import gate_table, render_gate_markdown, render_gate_verdict
from ...transforms.metrics import NAMES
from ...transforms.report_render import render_markdown
from ..inputs import config
from ..inputs.baseline_file import Baseline, read_baseline
from ..inputs.kb import KnowledgeBase
from ..inputs.options import flow_docstring, flow_signature
from ..outputs.warehouse_gate import GateOptions, GateOutcome, gate_run
from ..outputs.reports import ReportOptions, WrittenReport, write_report
from ..sources.ingest import PARTITION_ITEMS, IngestAccount
from ..sources.stored_file import is_uri
from ..storage.duckdb_connection import THREADS_ENV
from ..warehouse.part_files import write_parquet
from ..warehouse.warehouse import State, scratch_dir
from .byte_range_steps import ByteRange, RangeResult, byte_ranges, evaluate_range, evaluate_whole_run, ranged_account
from .run_steps import BatchParts, Outcome, TxnRef, score_batch, finish_run
from .job import JobOptions, checked_kb, flow_parameters, job_options, run_job
from .plan import RunPlan
from .worker_paths import check_worker_paths
from .prefect_settings import (
    CRASH_AFTER_S,
    ENVIRONMENT,
    HEARTBEAT_S,
    GateFailed,
    api_for_run,
    check_workers,
    configured,
    crash_stale_runs,
    ensure_crash_automation,
    plain_run_logs,
    say,
    where_runs_are,
)

FLOW_NAME = "retrieval-eval"
DEPLOYMENT_NAME = "nightly"
REPORT_ARTIFACT = "retrieval-eval-report"
HEADLINE_ARTIFACT = "retrieval-eval-headline"
FOLDER_ARTIFACT = "retrieval-eval-report-folder"
GATE_ARTIFACT = "retrieval-eval-gate"

DASK_WORKERS = 2
# Each Dask worker process runs one task at a time with one engine thread: the machine's
# cores are shared between workers, not oversubscribed by each worker's DuckDB and Polars.
DASK_WORKER_ENV = {THREADS_ENV: "1", "POLARS_MAX_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "DO_NOT_TRACK": "1"}
THREAD_WORKERS = 2


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


@dataclass(frozen=True)
class StagedFile:
    attempt: int
    index: int
    path: Path


@dataclass(frozen=True)
class StagedRun:
    """One run's staged partitions (of the attempt that counts) and the account of its records."""

    account: IngestAccount
    files: list[StagedFile] = field(default_factory=list)


@task(name="stage-run", task_run_name="stage-{plan.folder.manifest.run_id}", cache_policy=NO_CACHE, **IO_RETRIES)
def stage_task(plan: RunPlan, txn: TxnRef, batch_items: int) -> StagedRun:
    """Validate one run's cases file and write its staged cases as Parquet partitions, each
    under a fresh name (a staging computed again writes new files, never over read ones)."""
    scratch = scratch_dir(txn.root, txn.id, plan.run_id)
    ingest = plan.folder.ingest(scratch, allow_rejects=plan.allow_rejects, relevance_level=plan.relevance_level,
                                batch_items=batch_items, committed_digest=plan.committed_digest)
    files = []
    for batch in ingest.batches():
        path = scratch / f"staged-{batch.attempt}-{batch.index:04d}-{uuid.uuid4().hex[:8]}.parquet"
        write_parquet(batch.frame, path, txn.root, compression="lz4")
        files.append(StagedFile(batch.attempt, batch.index, path))
    account = ingest.account
    return StagedRun(account, [f for f in files if f.attempt == account.attempt and not account.refused])


@task(name="evaluate-partition", task_run_name="evaluate-{plan.folder.manifest.run_id}-{staged.index}",
      cache_policy=NO_CACHE, **IO_RETRIES)
def score_task(plan: RunPlan, staged: StagedFile, txn: TxnRef) -> BatchParts:
    return score_batch(plan, pl.read_parquet(staged.path), staged.attempt, staged.index, txn)


@task(name="finish-run", task_run_name="finish-{plan.folder.manifest.run_id}", cache_policy=NO_CACHE, **IO_RETRIES)
def finish_task(plan: RunPlan, account: IngestAccount, batches: list[BatchParts], txn: TxnRef) -> Outcome:
    return finish_run(plan, account, batches, txn)


@task(name="digest-cases", task_run_name="digest-{plan.folder.manifest.run_id}", cache_policy=NO_CACHE, **IO_RETRIES)
def digest_task(plan: RunPlan) -> str:
    return plan.folder.digest()


@task(name="evaluate-range", task_run_name="evaluate-{plan.folder.manifest.run_id}-{byte_range.number}",
      cache_policy=NO_CACHE, **IO_RETRIES)
def range_task(plan: RunPlan, byte_range: ByteRange, txn: TxnRef, batch_items: int) -> RangeResult:
    return evaluate_range(plan, byte_range, txn, batch_items)


@task(name="evaluate-run", task_run_name="evaluate-{plan.folder.manifest.run_id}", cache_policy=NO_CACHE, **IO_RETRIES)
def whole_run_task(plan: RunPlan, txn: TxnRef, batch_items: int) -> Outcome:
    return evaluate_whole_run(plan, txn, batch_items)


@task(name="report", cache_policy=NO_CACHE)
def report_task(state: State, options: ReportOptions) -> WrittenReport:
    return write_report(options, state)


@task(name="gate", cache_policy=NO_CACHE)
def gate_task(state: State, run_id: str, options: GateOptions, baseline: Baseline,
              kb: KnowledgeBase | None) -> GateOutcome:
    return gate_run(state, run_id, options, baseline, kb)


class PrefectSteps:
    """The job's steps as Prefect tasks: a run is staged as partitions (one task), each
    partition evaluated (one task each, every partition of every run submitted before any is
    awaited), then finished (one task)."""

    def __init__(self, batch_items: int | None = None) -> None:
        self.batch_items = batch_items or PARTITION_ITEMS

    def ingest(self, plan: RunPlan, txn: TxnRef) -> PrefectFuture:
        return stage_task.submit(plan, txn, self.batch_items)

    def batches(self, ingest: PrefectFuture) -> list[StagedFile]:
        return ingest.result().files

    def score(self, plan: RunPlan, batch: StagedFile, txn: TxnRef) -> PrefectFuture:
        return score_task.submit(plan, batch, txn)

    def finish(self, plan: RunPlan, ingest: PrefectFuture, evaluated: list[PrefectFuture], txn: TxnRef) -> Outcome:
        wait(evaluated)  # no task is still writing when the job goes on, even when one failed
        return finish_task(plan, ingest.result().account, [future.result() for future in evaluated], txn)

    def report(self, state: State, options: ReportOptions) -> WrittenReport:
        return report_task(state, options)

    def gate(self, state: State, run_id: str, options: GateOptions, baseline: Baseline,
             kb: KnowledgeBase | None) -> GateOutcome:
        return gate_task(state, run_id, options, baseline, kb)

    def settle(self, handles: list[PrefectFuture]) -> None:
        """Tasks queued on this process's threads are cancelled (they never start); the ones
        running, and any on Dask (whose cancel does not stop a running task), are waited for."""
        running = []
        for handle in handles:
            wrapped = getattr(handle, "wrapped_future", None)
            if not (isinstance(wrapped, ConcurrentFuture) and wrapped.cancel()):
                running.append(handle)
        wait(running)

    def publish(self, report: WrittenReport, gate: GateOutcome | None) -> None:
        # The UI cannot show the report folder's images: the artifact keeps the tables only.
        create_markdown_artifact(markdown=render_markdown(report.report, with_images=False), key=REPORT_ARTIFACT,
                                 description="Retrieval evaluation report (tables; charts are in the report folder)")
        create_table_artifact(table=report.report.runs.select("run_id", "headline_k", *NAMES, "n").to_dicts(), key=HEADLINE_ARTIFACT,
                              description="Headline figures of every run, slice `all`")
        create_link_artifact(link=report.folder_link, link_text=str(report.folder), key=FOLDER_ARTIFACT,
                             description="Folder with report.md, report.html and their charts")
        if gate is not None:
            table = gate_table(gate)
            header = [name or "status" for name in table.header]
            create_table_artifact(
                table=[dict(zip(header, row, strict=True)) for row in table.rows], key=GATE_ARTIFACT,
                description=render_gate_verdict(gate).strip(),
            )
            create_markdown_artifact(markdown=render_gate_markdown(gate), key=GATE_ARTIFACT + "-summary",
                                     description="The gate, for a CI job summary or a pull-request comment")


@dataclass(frozen=True)
class RangedRun:
    """One run's tasks on workers that share no disk: its byte ranges and the digest of its
    cases file, or (`whole`) the one task that evaluates it whole."""

    ranges: list[ByteRange]
    digest: PrefectFuture | None = None
    whole: PrefectFuture | None = None

    def futures(self) -> list[PrefectFuture]:
        return [future for future in (self.digest, self.whole) if future is not None]


class StoreSteps(PrefectSteps):
    """The steps for a warehouse in a bucket (flows/job/byte_range_steps.py): nothing goes
    through the driver's disk, so the workers of `--dask-address` need share none with it.
    Each byte range of a run is a task that reads it from the store and puts its parts; the
    run is finished here from the values they return (or, when the ranges together are not
    one clean read, evaluated again whole by one task)."""

    def ingest(self, plan: RunPlan, txn: TxnRef) -> RangedRun:
        ranges = byte_ranges(plan, self.batch_items)
        if len(ranges) == 1:
            return RangedRun([], whole=whole_run_task.submit(plan, txn, self.batch_items))
        return RangedRun(ranges, digest=digest_task.submit(plan))

    def batches(self, ingest: RangedRun) -> list[ByteRange]:
        return ingest.ranges

    def score(self, plan: RunPlan, batch: ByteRange, txn: TxnRef) -> PrefectFuture:
        return range_task.submit(plan, batch, txn, self.batch_items)

    def finish(self, plan: RunPlan, ingest: RangedRun, evaluated: list[PrefectFuture], txn: TxnRef) -> Outcome:
        wait([*evaluated, *ingest.futures()])  # nothing is still writing when the job goes on
        if ingest.whole is not None:
            return ingest.whole.result()
        ranged = ranged_account(plan, [future.result() for future in evaluated], ingest.digest.result())
        if ranged is None:
            return whole_run_task.submit(plan, txn, self.batch_items).result()
        account, batches = ranged
        return finish_task(plan, account, batches, txn)

    def settle(self, handles: list[Any]) -> None:
        super().settle([future for handle in handles
                        for future in (handle.futures() if isinstance(handle, RangedRun) else [handle])])


def job_flow(**parameters: Any):
    """Evaluate every run under `runs`, commit them together, write the report, gate the newest.
    Paths are made absolute here, before any task leaves for a worker."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY

    from prefect.runtime import flow_run

    plain_run_logs()
    say(f"flow run {flow_run.name} ({flow_run.id})")
    if PREFECT_FLOWS_HEARTBEAT_FREQUENCY.value():  # a served or deployed run: its death must be seen
        ensure_crash_automation(update=False)
    options = with_absolute_paths(job_options(parameters))
    steps = StoreSteps if is_uri(str(options.warehouse)) else PrefectSteps
    result = run_job(options, steps(options.batch_items))
    if result.gate is not None and not result.gate.passed:
        message = "gate failed: " + "; ".join(result.gate.failures)
        return Failed(message=message, data=GateFailed(message, result))
    return Completed(data=result)


# The flow's parameters are the options of flows/inputs/options.py, one keyword each, typed and with
# its default: Prefect reads them from this signature (the deployment's schema, validation).
# The flow keeps the function's name: a served deployment loads it by module path and name.
job_flow.__signature__ = flow_signature()  # type: ignore[attr-defined]
job_flow.__doc__ = flow_docstring(job_flow.__doc__ or "")
job_flow = flow(name=FLOW_NAME)(job_flow)


def with_absolute_paths(options: JobOptions) -> JobOptions:
    """`options` with every path absolute (a Dask worker's working directory is not ours)."""
    absolute = {}
    if isinstance(options.report_dir, Path):  # else a URI's location
        absolute["report_dir"] = options.report_dir.absolute()
    for name in ("runs", "kb", "warehouse"):  # a URI is kept as given
        value = getattr(options, name)
        absolute[name] = value.absolute() if isinstance(value, Path) else value
    baseline = options.gate and options.gate.baseline
    gate = options.gate and replace(options.gate, warehouse=absolute["warehouse"],
                                    baseline=baseline.absolute() if isinstance(baseline, Path) else baseline)
    return replace(options, **absolute, gate=gate)


def make_task_runner(task_runner: str = "thread", dask_address: str | None = None, api_url: str | None = None,
                     options: JobOptions | None = None):
    """Threads in this process, a local Dask cluster, or the Dask scheduler at `dask_address`
    (whose workers must report to `api_url` and see the local paths of `options` as this
    machine does: both checked before any task is submitted)."""
    if task_runner not in ("thread", "dask"):
        raise ValueError(f"unknown task runner {task_runner!r} (expected 'thread' or 'dask')")
    if dask_address is None and task_runner == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=THREAD_WORKERS)
    from prefect_dask import DaskTaskRunner  # deferred: the dask extra is optional

    if dask_address is not None:
        from distributed import Client  # deferred: the dask extra is optional

        with Client(dask_address, timeout=30) as client:
            check_workers(client, api_url)
            if options is not None:
                check_worker_paths(client, options, dask_address)
        return DaskTaskRunner(address=dask_address)
    return DaskTaskRunner(cluster_kwargs=dask_cluster_kwargs(api_url))


@contextmanager
def worker_spawn_environment(task_runner: str, dask_address: str | None, api_url: str | None) -> Iterator[None]:
    """The environment a local Dask cluster's workers start with, set before they spawn (Prefect
    and distributed configure their logging at import). distributed's nanny copies it into this
    process's own environment to spawn a worker and leaves it there (distributed/nanny.py), so
    it is taken back afterwards: a later run in the same process (a notebook, a test) must not
    inherit this run's temporary API address (nor the nanny's other variables)."""
    if task_runner != "dask" or dask_address is not None:
        yield
        return
    import dask  # deferred: the dask extra is optional

    saved = dict(os.environ)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": dask_worker_env(api_url)}):
            yield
    finally:
        for name in os.environ.keys() - saved.keys():
            del os.environ[name]
        os.environ.update(saved)


def dask_worker_env(api_url: str | None) -> dict[str, str]:
    env = dict(DASK_WORKER_ENV)
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    # As quiet as the driver (flows/job/prefect_settings.py `configured`): nothing from Prefect
    # unless the user chose a level, so a failed task is the command's one line, not two.
    env["PREFECT_LOGGING_LEVEL"] = os.environ.get("PREFECT_LOGGING_LEVEL", "CRITICAL")
    if "PREFECT_LOGGING_LEVEL" not in os.environ:
        # Prefect's queue services log at the top level, not under `prefect`: a worker that ends
        # with events still queued would say so on the command's stderr.
        env["PREFECT_LOGGING_ROOT_LEVEL"] = "CRITICAL"
    # A worker's own errors are infrastructure's: a failed task reaches the driver, and a lost
    # worker is the nanny's (in the driver) to say. At the end of a good run a worker can still
    # log a heartbeat the closing scheduler no longer answered, with its traceback.
    # (The driver's own "error" level, set by the command, is not a user's choice.)
    chosen = os.environ.get("DASK_LOGGING__DISTRIBUTED")
    env["DASK_LOGGING__DISTRIBUTED"] = chosen if chosen not in (None, ENVIRONMENT["DASK_LOGGING__DISTRIBUTED"]) else "critical"
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def dask_cluster_kwargs(api_url: str | None = None) -> dict[str, Any]:
    """LocalCluster arguments: process workers, one thread each, reporting to `api_url`."""
    return {"n_workers": DASK_WORKERS, "threads_per_worker": 1, "processes": True, "env": dask_worker_env(api_url),
            "silence_logs": logging.ERROR}


class LostApi(Exception):
    """The Prefect API stopped answering while the flow ran."""


def refuse_bad_inputs(options: JobOptions) -> None:
    """Exit 2 on a bad or missing --kb or a bad baseline before a Prefect server starts (some
    seconds, the temporary one); the flow run reads both again, in its job."""
    checked_kb(options)
    if options.gate is not None:
        read_baseline(options.gate.baseline)


def run_tracked(options: JobOptions, task_runner: str = "thread", dask_address: str | None = None,
                *, return_state: bool = False):
    """Run the flow once, tracked by Prefect (the temporary server unless PREFECT_API_URL is
    set). Returns the JobResult (a failed gate included: the caller exits 1 on it), or the
    final state with `return_state=True`; errors of the job (InputError and its kin) are
    raised as they are, as in the in-process mode. Losing the API mid-run raises LostApi
    within seconds (one retry per request, a bounded events client)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    refuse_bad_inputs(options)
    given_api = PREFECT_API_URL.value()
    with configured(), api_for_run(dask_address=dask_address) as api_url:
        runner = make_task_runner(task_runner, dask_address, api_url, options)
        try:
            with worker_spawn_environment(task_runner, dask_address, api_url):
                state = job_flow.with_options(task_runner=runner)(**flow_parameters(options), return_state=True)
        except (httpx.TransportError, RuntimeError) as error:
            if isinstance(error, RuntimeError) and "reach API" not in str(error):
                raise
            raise LostApi(f"lost the Prefect API at {api_url or 'the temporary server'} mid-run "
                          f"({type(error).__name__}: {error})") from None
    say(where_runs_are(given_api, state.state_details.flow_run_id))
    if return_state:
        return state
    result = state.result(raise_on_failure=False)
    if isinstance(result, GateFailed):
        return result.result  # the caller exits 1 on it
    if isinstance(result, BaseException):
        raise result
    return result


def nightly_deployment(cron: str, options: JobOptions, task_runner=None, timezone: str = "UTC"):
    """The `nightly` deployment `serve` serves: the flow on `cron`, with the flow parameters of
    `options` (every option of flows/inputs/options.py), one run at a time."""
    flow_to_serve = job_flow if task_runner is None else job_flow.with_options(task_runner=task_runner)
    return flow_to_serve.to_deployment(
        name=DEPLOYMENT_NAME,
        schedules=[Cron(cron, timezone=timezone)],
        parameters=flow_parameters(with_absolute_paths(options)),
        concurrency_limit=1,
        # Each run loads the flow in a process of its own: by module, as the package is installed.
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


def serve(cron: str = config.NIGHTLY_CRON, options: JobOptions | None = None, task_runner: str = "thread",
          dask_address: str | None = None, timezone: str = "UTC", crash_after_s: float = CRASH_AFTER_S) -> None:
    """Serve the `nightly` deployment from this process until interrupted (against
    PREFECT_API_URL when set; otherwise a `prefect server start` of its own, whose scheduler
    makes the cron's runs, that lives as long as this process).

    Its flow runs send heartbeats, and an automation marks a run Crashed when they stop for
    `crash_after_s` (its process was killed); runs that a dead server process left Running are
    marked Crashed now, so that the deployment's concurrency slot is free for the next night."""
    from prefect import serve as serve_deployments

    options = options or JobOptions()
    refuse_bad_inputs(options)
    os.environ["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] = str(HEARTBEAT_S)  # the served runs' processes inherit it
    with configured(served=True), api_for_run(dask_address=dask_address, services=True) as api_url:
        runner = make_task_runner(task_runner, dask_address, api_url, options)
        deployment = nightly_deployment(cron, options, runner, timezone)
        crash_stale_runs(deployment.apply())
        ensure_crash_automation(crash_after_s)
        print(f"serving the nightly deployment ({cron}) on the Prefect API at {api_url}; Ctrl-C to stop",
              file=sys.stderr)
        with worker_spawn_environment(task_runner, dask_address, api_url):
            serve_deployments(deployment, print_starting_message=False)
