"""The main job, written once (SPEC 5 `run`):

    read the baseline → lock → plan every run → ingest, evaluate and finish each → one commit
    → report → gate

An executor runs the steps: `InProcess` here (one streaming read per run, its batches
evaluated as they are parsed, nothing staged on disk), or Prefect tasks on a thread pool or a
Dask cluster (flows/job/prefect_flows.py `PrefectSteps`, which stages each run as Parquet
partitions so that each is a task). Everything else — the order, the commit, what a refusal
means, which run is gated — is this file's, for both.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ...transforms.errors import InputError, RejectedRecords, RejectTally, rejects_query
from ..inputs import config
from ..inputs.baseline_file import Baseline, read_baseline
from ..inputs.kb import KnowledgeBase, kb_record, read_kb
from ..inputs.options import BY_NAME, OPTIONS, input_location
from ..outputs.warehouse_gate import GateOptions, GateOutcome, gate_options, gate_run, refuse_ungateable
from ..outputs.reports import ReportOptions, WrittenReport, write_report
from ..sources.strict_read import Prefetch
from ..sources.ingest import BATCH_ITEMS, StagedBatch
from ..sources.source import RunIngest, RunSource, source_format
from ..sources.stored_file import StoredFile
from ..storage.duckdb_connection import connect
from ..storage.errors import StoreError
from ..storage.locations import Location
from ..storage.output_files import output_target
from ..warehouse.catalog import prepare_catalog, refresh_catalog
from ..warehouse.summary import refresh_summary, summary_files
from ..warehouse.warehouse import State, Warehouse, scratch_dir
from ..warehouse.legacy_catalog import adopt_legacy_catalog
from .run_steps import Outcome, Refused, TxnRef, score_batch, finish_run, reuse_run
from .plan import RunPlan, plan_runs
from .progress import Progress


@dataclass(frozen=True)
class JobOptions:
    runs: Path | str = config.RUNS  # a local path, or a URI (flows/inputs/options.py `input_location`)
    source: str = "native"  # the format of `runs` (flows/sources/source.py `source_format`)
    kb: Path | str | None = None  # None: the default KB when there is one (a KB that was given must exist)
    warehouse: Path | str = config.WAREHOUSE  # a folder, or a bucket's URI as given
    report_dir: Path | Location = config.REPORT_DIR  # a local folder or a URI's (flows/storage/output_files.py)
    k: int | None = None
    ks: tuple[int, ...] = ()
    relevance_level: int = 1
    allow_rejects: bool = False
    batch_items: int | None = None  # retrieved items per batch or partition
    charts: bool = True
    gate: GateOptions | None = None  # gate the newest run against a baseline
    trec_run: Path | str | None = None  # with qrels: one TREC run file in place of RUNS (SPEC 12): `source` trec
    qrels: Path | str | None = None  # the gold of a source that keeps it apart
    run_id: str | None = None  # a source's run id (default: its input's file name)


def _path(value: Any) -> Path | str | None:
    return None if value is None else input_location(value)


def job_options(values: Mapping[str, Any]) -> JobOptions:
    """The job's options from values by name: a command's arguments or a flow run's
    parameters (a name not given, or a runs root given as None, takes its default)."""
    given = {**{option.name: option.default for option in OPTIONS}, **values}
    return JobOptions(
        runs=input_location(given["runs"] if given["runs"] is not None else BY_NAME["runs"].default),
        source=given["source"],
        qrels=_path(given["qrels"]),
        run_id=given["run_id"],
        kb=_path(given["kb"]),
        warehouse=input_location(given["warehouse"]),
        report_dir=output_target(given["report_dir"]),
        k=given["k"],
        ks=tuple(given["ks"] or ()),
        relevance_level=given["relevance_level"],
        allow_rejects=given["allow_rejects"],
        batch_items=given["batch_items"],
        charts=given["charts"],
        gate=gate_options(given),
    )


def flow_parameters(options: JobOptions) -> dict[str, Any]:
    """The flow's parameters of `options`, one per option (JSON values: paths as strings, ks as
    a list); `job_options` of them gives `options` again."""
    gate = options.gate or GateOptions(baseline=None, warehouse=options.warehouse)  # type: ignore[arg-type]
    return {
        "runs": str(options.runs),
        "source": options.source,
        "qrels": None if options.qrels is None else str(options.qrels),
        "run_id": options.run_id,
        "kb": None if options.kb is None else str(options.kb),
        "warehouse": str(options.warehouse),
        "report_dir": str(options.report_dir),
        "k": options.k,
        "ks": list(options.ks) or None,
        "relevance_level": options.relevance_level,
        "allow_rejects": options.allow_rejects,
        "baseline": None if gate.baseline is None else str(gate.baseline),
        "tolerance": gate.tolerance,
        "locale_tolerance": gate.locale_tolerance,
        "min_hit": gate.floors.get("hit_at_k"),
        "min_recall": gate.floors.get("recall_at_k"),
        "allow_missing_cases": gate.allow_missing_cases,
        "decision": gate.decision,
        "alpha": gate.alpha,
        "charts": options.charts,
        "batch_items": options.batch_items,
    }


@dataclass(frozen=True)
class JobResult:
    outcomes: list[Outcome]
    state: State
    report: WrittenReport
    gate: GateOutcome | None = None

    @property
    def run_ids(self) -> list[str]:
        return [outcome.run_id for outcome in self.outcomes]


class Steps(Protocol):
    """What an executor does with each step; `Any` is its own handle (a value, or a future)."""

    def ingest(self, plan: RunPlan, txn: TxnRef) -> Any: ...
    def batches(self, ingest: Any) -> Iterable[Any]: ...
    def score(self, plan: RunPlan, batch: Any, txn: TxnRef) -> Any: ...
    def finish(self, plan: RunPlan, ingest: Any, evaluated: list[Any], txn: TxnRef) -> Outcome: ...
    def report(self, state: State, options: ReportOptions) -> WrittenReport: ...
    def gate(self, state: State, run_id: str, options: GateOptions, baseline: Baseline,
             kb: KnowledgeBase | None) -> GateOutcome: ...
    def publish(self, report: WrittenReport, gate: GateOutcome | None) -> None: ...
    def settle(self, handles: list[Any]) -> None: ...


def resolve_kb(kb: Path | str | None) -> Path | str | None:
    """The KB to check gold ids against (a local path or a URI): a given one must exist
    (SPEC 6); without one, the default when it is there."""
    if kb is None:
        return config.KB if config.KB.is_file() else None
    if not StoredFile.at(kb).exists():
        raise InputError(f"{kb}: no such knowledge base file (--kb)")
    return kb


def resolved_kb(kb: Path | str | None) -> KnowledgeBase | None:
    """The KB `resolve_kb` names, read and judged card by card (None when there is none)."""
    path = resolve_kb(kb)
    return None if path is None else read_kb(path, given=kb is not None)


def given_kb(kb: Path | str | None) -> KnowledgeBase | None:
    """The KB given with --kb to a command that reads runs (`gate`), read and judged; None when
    none was given: each run is then judged against its own (flows/inputs/kb.py `run_kb`)."""
    return None if kb is None else resolved_kb(kb)


def checked_kb(options: JobOptions) -> KnowledgeBase | None:
    """The job's KB, read and judged card by card before any work (a bad one is refused,
    exit 2, with the warehouse untouched); the report and the gate use what was read. TREC
    docnos and other tools' documents are not cards: the default KB is for run folders, a KB
    given is checked."""
    if (options.trec_run is not None or options.source != "native") and options.kb is None:
        return None
    return resolved_kb(options.kb)


def sources(options: JobOptions, committed: Mapping[str, dict] | None = None) -> list[RunSource]:
    """The runs to evaluate, each checked before anything is written (SPEC 6), through their
    format's reader (flows/sources/source.py): a TREC run file with its qrels (`--trec-run`),
    or RUNS read as `source` (run folders, or another tool's input with its qrels; SPEC 15).
    A run without a k of its own gets config.TREC_TOP_K."""
    if options.trec_run is not None:
        return source_format("trec")(options.trec_run, qrels=options.qrels, run_id=options.run_id,
                                     top_k=config.TREC_TOP_K)
    return source_format(options.source)(options.runs, qrels=options.qrels, run_id=options.run_id,
                                         top_k=config.TREC_TOP_K, committed=committed)


def newest_run_id(folders: list[RunSource]) -> str:
    """The run a job gates: the newest by its manifest's created_at instant, then by run id."""
    return max(folders, key=lambda folder: (folder.manifest.created_at_utc, folder.run_id)).run_id


def run_job(options: JobOptions, steps: Steps, warehouse: Warehouse | None = None) -> JobResult:
    """The job (this module's docstring). `warehouse`: the one at options.warehouse, when the
    caller opened it already (its state then read again from where it was read)."""
    warehouse = warehouse or Warehouse(options.warehouse)
    folders = sources(options, warehouse.committed_sources())
    baseline = read_baseline(options.gate.baseline) if options.gate else None  # a bad one stops the job here
    kb = checked_kb(options)
    if not warehouse.remote and not warehouse.exists() and warehouse.catalog_path.exists():
        adopt_legacy_catalog(warehouse)  # a warehouse written before the log: its runs are kept
    progress = Progress(len(folders))
    prepare_catalog(warehouse)
    # The catalog is made on a thread of its own once the commit is in, while the report is
    # written: neither reads the other (the catalog is for people; SPEC 10).
    with Beside("catalog") as catalog:
        with warehouse.transaction() as txn:
            gated = newest_run_id(folders)
            plans = plan_runs(folders, txn.state, warehouse, newest=gated, k=options.k, ks=options.ks,
                              relevance_level=options.relevance_level, allow_rejects=options.allow_rejects,
                              kb=kb_record(kb))
            newest = next(plan for plan in plans if plan.run_id == gated)
            if baseline is not None:  # before any work: the newest run must be gateable against it
                refuse_ungateable(baseline, newest.run_id, newest.ks, newest.relevance_level)
            todo = [plan for plan in plans if plan.reuse is None]
            # the only runs whose folders get parts: those evaluated, and those whose KB changed
            writes = frozenset(plan.run_id for plan in plans if plan.reuse is None or plan.kb_changed)
            txn.plan(writes)
            ref = TxnRef(warehouse.root, txn.id, writes, str(options.warehouse))
            ingests = {plan.run_id: steps.ingest(plan, ref) for plan in todo}
            evaluated: dict[str, list[Any]] = {}
            try:
                for number, plan in enumerate(todo, start=1):
                    progress.start_run(number, plan.run_id, plan.folder.cases_size())
                    batches = steps.batches(ingests[plan.run_id])
                    evaluated[plan.run_id] = handles = []
                    try:
                        for batch in progress.batches(batches):
                            handles.append(steps.score(plan, batch, ref))
                    finally:
                        if hasattr(batches, "close"):  # a read stopped by an error stops its threads now
                            batches.close()
                    progress.end_run()
                outcomes = [
                    reuse_run(plan, ref) if plan.reuse else steps.finish(plan, ingests[plan.run_id], evaluated[plan.run_id], ref)
                    for plan in plans
                ]
            except BaseException:
                # One step failed (or the command was interrupted) while others may still be
                # writing parts: the transaction is rolled back only once none is, so that no part
                # outlives it.
                steps.settle([*ingests.values(), *(handle for handles in evaluated.values() for handle in handles)])
                raise
            commits = {o.run_id: o.commit for o in outcomes if o.commit is not None}
            state = txn.commit(commits) if commits else txn.state
            if commits or summary_files(warehouse, state) is None:
                refresh_summary(warehouse, txn.state, state)
            catalog.start(refresh_catalog, warehouse, state)
        refused = [outcome for outcome in outcomes if isinstance(outcome, Refused)]
        if refused:
            run_ids = [o.run_id for o in refused]
            warehouse_option = None if options.warehouse == config.WAREHOUSE else str(options.warehouse)
            raise RejectedRecords(", ".join(run_ids), sum((o.rejects for o in refused), RejectTally()),
                                  where_all=rejects_query(run_ids, warehouse_option))
        try:
            report = steps.report(state, ReportOptions(options.warehouse, options.report_dir, kb, options.charts, baseline))
        except (OSError, StoreError) as error:  # a full disk, a read-only folder, a bucket: said with what stands
            where = f"{error.filename}: " if getattr(error, "filename", None) else ""
            raise InputError(f"{where}{getattr(error, 'strerror', None) or error}; the report was not written, but the warehouse is "
                             f"committed ({len(commits)} run(s) written now): fix this and run again (unchanged runs "
                             "are not read again)") from None
        gate = None
        if options.gate is not None:
            gate = steps.gate(state, newest.run_id, options.gate, baseline, kb)
        steps.publish(report, gate)
        return JobResult(outcomes, state, report, gate)


class Beside:
    """One call made on a thread of its own beside the rest of a block (the catalog, beside the
    report). The thread is joined on the way out of the block, whatever happens; the call's
    error is raised then when the block ended well, and said as a warning line when the block
    ends with an error of its own (which is the one raised)."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._call: Future | None = None

    def start(self, fn: Callable[..., Any], *args: Any) -> None:
        self._call = self._pool.submit(fn, *args)

    def __enter__(self) -> Beside:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        self._pool.shutdown(wait=True)
        failure = self._call.exception() if self._call is not None else None
        if failure is None:
            return
        if error is None:
            raise failure
        print(f"retrieval-eval: warning: {failure}", file=sys.stderr)


class InProcess:
    """The steps in this process: each run's file read once, its batches staged as they are
    parsed and each scored on a thread of its own while the next is staged, on one DuckDB
    connection, which the report then reads with."""

    def __init__(self, prefetch: Prefetch | None = None, batch_items: int | None = None) -> None:
        self.prefetch = prefetch or Prefetch(None)
        self.batch_items = batch_items or BATCH_ITEMS
        self.con = connect()
        self._scorer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="score")
        self._scoring: Future | None = None

    def ingest(self, plan: RunPlan, txn: TxnRef) -> RunIngest:
        return plan.folder.ingest(txn_scratch(txn, plan.run_id), allow_rejects=plan.allow_rejects,
                                  relevance_level=plan.relevance_level, batch_items=self.batch_items,
                                  committed_digest=plan.committed_digest, prefetch=self.prefetch)

    def batches(self, ingest: RunIngest) -> Iterable[StagedBatch]:
        return ingest.batches()

    def score(self, plan: RunPlan, batch: StagedBatch, txn: TxnRef) -> Future:
        """The batch scored on a thread of its own while the next one is parsed and staged here
        (one at a time: a batch waits for the one before, so at most two are held)."""
        if self._scoring is not None:
            self._scoring.result()
        self._scoring = self._scorer.submit(score_batch, plan, batch.frame, batch.attempt, batch.index, txn, self.con)
        return self._scoring

    def finish(self, plan: RunPlan, ingest: RunIngest, evaluated: list[Future], txn: TxnRef) -> Outcome:
        return finish_run(plan, ingest.account, [future.result() for future in evaluated], txn)

    def report(self, state: State, options: ReportOptions) -> WrittenReport:
        self.prefetch.close()  # a read no ingest took (its run stood) stops parsing now
        return write_report(options, state, self.con)  # the batches' connection: they are all scored

    def gate(self, state: State, run_id: str, options: GateOptions, baseline: Baseline,
             kb: KnowledgeBase | None) -> GateOutcome:
        return gate_run(state, run_id, options, baseline, kb)

    def publish(self, report: WrittenReport, gate: GateOutcome | None) -> None:
        """Nothing to publish in this process: the report files are the output."""

    def settle(self, handles: list[Any]) -> None:
        """Wait for the batch being scored (its parts are then all written, or it failed)."""
        wait([handle for handle in handles if isinstance(handle, Future)])

    def close(self) -> None:
        self.prefetch.close()
        self._scorer.shutdown(wait=True)
        self.con.close()


def txn_scratch(txn: TxnRef, run_id: str) -> Path:
    return scratch_dir(txn.root, txn.id, run_id)
