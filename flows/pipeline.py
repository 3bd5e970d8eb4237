"""The main job in-process: per run, one streaming read of its cases file hands staged
cases over in batches → per batch (rankings, cases, case metrics, partial sums) → finish
(aggregates, runs row); then one catalog commit, then the report.

Each step is one function of transforms/ (or one model of sql/); flows/prefect_flows.py
runs the same steps as Prefect tasks, with each batch of staged cases written as a Parquet
partition so that each partition can be its own task.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import duckdb
import polars as pl

from flows import config
from flows.progress import Progress
from flows.warehouse import Warehouse
from transforms import engine
from transforms.aggregates import aggregates, merge_partials, slice_partials
from transforms.baseline import baseline_reference, read_snapshot
from transforms.case_file import discard
from transforms.case_metrics import case_metrics, cutoffs
from transforms.charts import draw_charts
from transforms.errors import InputError, Reject, RejectedRecords
from transforms.ingest import (
    StagedRun,
    Streamed,
    facts_beside,
    ingest,
    repeated_case_ids,
    stage_partitions,
    stream_staged,
    write_rejects,
)
from transforms.kb_check import effective_gold_not_in_kb, load_kb
from transforms.manifest import Manifest, find_run_dirs, load_manifest
from transforms.rankings import case_rows, retrieved_items
from transforms.report import Report, RunReport, build_report, run_reports
from transforms.report_render import render_html, render_markdown
from transforms.run_summary import evaluation_key, run_summary


@dataclass(frozen=True)
class EvaluationOptions:
    runs: Path = config.RUNS
    kb: Path = config.KB
    warehouse: Path = config.WAREHOUSE
    report_dir: Path = config.REPORT_DIR
    k: int | None = None
    ks: tuple[int, ...] = ()
    allow_rejects: bool = False
    partition_items: int | None = None  # retrieved items per batch or partition; None: BATCH_ITEMS, PARTITION_ITEMS


@dataclass(frozen=True)
class RunParts:
    """The files one run's evaluation wrote, not yet visible in the catalog."""

    run_id: str
    parts: dict[str, list[Path]]
    rejects: list[Reject] = field(default_factory=list)
    loaded: bool = True


@dataclass(frozen=True)
class PartitionParts:
    """The files one partition of a run wrote: three tables and its partial sums."""

    cases: Path
    retrieved: Path
    case_metrics: Path
    partials: Path


def load_manifests(runs: Path) -> list[Manifest]:
    """Every manifest is checked before anything is written (SPEC 6)."""
    return [load_manifest(run_dir) for run_dir in find_run_dirs(runs)]


def run_cutoffs(manifest: Manifest, options: EvaluationOptions) -> tuple[int, list[int]]:
    """The headline k (--k, else the manifest's retrieval_top_k) and every k to compute."""
    headline_k = options.k or manifest.retrieval_top_k
    return headline_k, cutoffs(headline_k, options.ks)


T = TypeVar("T")
Committed = tuple[str | None, dict[str, list[Path]]]  # a run's evaluation key and files (Warehouse.committed)


def _reusable(manifest: Manifest, options: EvaluationOptions, committed: Committed):
    """A test of a digest: does the warehouse hold this run evaluated from the same bytes,
    cutoffs, reject mode and code? Returns (test, the committed parts)."""
    headline_k, ks = run_cutoffs(manifest, options)
    committed_key, parts = committed

    def reusable(digest: str) -> bool:
        return committed_key == evaluation_key(digest, headline_k, ks, options.allow_rejects)

    return reusable, parts


def _ingest_run(
    manifest: Manifest,
    warehouse: Warehouse,
    txn: str,
    options: EvaluationOptions,
    committed: Committed,
    fast_pass: Callable[[Path, int, threading.Event], Streamed[T] | None],
) -> tuple[str, tuple[Streamed[T] | None, list[Reject]] | None, dict[str, list[Path]]]:
    """One run's ingest, either way: `fast_pass(path, block_bytes, stop)` over its cases
    file (with the line-by-line fallback of transforms/ingest.py), its digest computed
    beside it. Returns (digest, (result, rejects) or None when the committed run is reused,
    the committed parts)."""
    scratch = warehouse.scratch_dir(txn, manifest.run_id)
    reusable, committed_parts = _reusable(manifest, options, committed)
    try:
        digest, outcome = facts_beside(
            manifest,
            warehouse.digest_cache(manifest.run_id),
            lambda facts, stop: ingest(
                manifest.cases_file,
                scratch,
                str(manifest.cases_file),
                options.allow_rejects,
                lambda path, block_bytes: fast_pass(path, block_bytes, stop),
                facts,
            ),
            reusable,
        )
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        # Python's gzip reports a .gz cut short (EOFError) or damaged (zlib.error) with errors
        # that are not OSErrors, and neither they nor BadGzipFile name the file; whichever read
        # of the file meets the damage first raises it.
        raise InputError(f"{manifest.cases_file}: not a readable gzip file ({error})") from None
    if outcome is None:  # reused: a read of the file started ahead of the run is not needed
        discard(manifest.cases_file)
    return digest, outcome, committed_parts


def stage_run(manifest: Manifest, warehouse: Warehouse, txn: str, options: EvaluationOptions) -> StagedRun:
    """The scale-out ingest: validate one run's cases file and write its staged cases as
    Parquet partitions of about `options.partition_items` retrieved items (one task per
    partition follows)."""
    staged_dir = warehouse.scratch_dir(txn, manifest.run_id) / "staged"
    digest, outcome, committed_parts = _ingest_run(
        manifest,
        warehouse,
        txn,
        options,
        warehouse.committed(manifest.run_id),
        lambda path, block_bytes, stop: stage_partitions(path, staged_dir, block_bytes, stop, options.partition_items),
    )
    if outcome is None:
        return StagedRun(manifest.run_id, [], 0, digest, reused=committed_parts)
    result, rejects = outcome
    if result is None:
        return StagedRun(manifest.run_id, [], 0, digest, rejects, loaded=False)
    files, n_cases = result
    _check_not_empty(manifest, n_cases, rejects)
    return StagedRun(manifest.run_id, files, n_cases, digest, rejects)


def _check_not_empty(manifest: Manifest, n_cases: int, rejects: list[Reject]) -> None:
    if n_cases == 0 and not rejects:
        raise InputError(f"{manifest.cases_file}: holds no records")


def evaluate_partition(
    staged: pl.DataFrame,
    run_id: str,
    ks: list[int],
    warehouse: Warehouse,
    txn: str,
    index: int,
    con: duckdb.DuckDBPyConnection | None = None,
) -> PartitionParts:
    """Rankings, cases, case metrics and partial sums of one batch of staged cases; `con`
    computes the case metrics (each call opens its own connection when not given)."""
    parts = PartitionParts(
        cases=warehouse.new_part("cases", run_id, txn, index),
        retrieved=warehouse.new_part("retrieved", run_id, txn, index),
        case_metrics=warehouse.new_part("case_metrics", run_id, txn, index),
        partials=warehouse.scratch_dir(txn, run_id) / f"partials-{index:03d}.parquet",
    )
    retrieved = retrieved_items(staged, run_id)
    # Arrow writes the batch's largest file on one core, on a thread of its own, while
    # Polars and DuckDB make the rest (100k cases: 2.38 → 2.31 s median over 12 runs).
    with ThreadPoolExecutor(max_workers=1) as writer:
        written = writer.submit(
            engine.write_parquet,
            retrieved.drop("case_no"),
            parts.retrieved,
            compression="lz4",
            statistics=False,
            dictionary=["run_id", "case_id"],
        )
        cases = case_rows(staged, retrieved, run_id)
        engine.write_parquet(cases, parts.cases, compression="lz4")
        metrics = case_metrics(cases, ks, con)
        engine.write_parquet(metrics, parts.case_metrics)
        engine.write_parquet(slice_partials(metrics), parts.partials)
        written.result()
    warehouse.sync(parts.cases, parts.retrieved, parts.case_metrics)
    return parts


def finish_run(
    manifest: Manifest,
    staged: StagedRun,
    partitions: list[PartitionParts],
    warehouse: Warehouse,
    txn: str,
    options: EvaluationOptions,
) -> RunParts:
    """Aggregates merged from every partition's partial sums, the `runs` row and rejects."""
    run_id = manifest.run_id
    headline_k, ks = run_cutoffs(manifest, options)
    part = {table: warehouse.new_part(table, run_id, txn) for table in ("aggregates", "runs", "rejects")}
    write_rejects(run_id, staged.rejects, part["rejects"])
    engine.write_parquet(
        aggregates(merge_partials([pl.read_parquet(p.partials) for p in partitions])), part["aggregates"]
    )
    cases = [p.cases for p in partitions]
    key = evaluation_key(staged.digest, headline_k, ks, options.allow_rejects)
    engine.write_parquet(
        run_summary(manifest, cases, len(staged.rejects), headline_k, ks, staged.digest, key), part["runs"]
    )
    return RunParts(
        run_id,
        {
            "cases": cases,
            "retrieved": [p.retrieved for p in partitions],
            "case_metrics": [p.case_metrics for p in partitions],
            **{table: [path] for table, path in part.items()},
        },
        staged.rejects,
    )


def refused_run(staged: StagedRun, warehouse: Warehouse, txn: str) -> RunParts:
    """A run refused for rejected records: only its rejects are written (SPEC 6)."""
    path = warehouse.new_part("rejects", staged.run_id, txn)
    write_rejects(staged.run_id, staged.rejects, path)
    return RunParts(staged.run_id, {"rejects": [path]}, staged.rejects, loaded=False)


def reused_run(staged: StagedRun) -> RunParts:
    """An unchanged run: its committed files stay as they are."""
    return RunParts(staged.run_id, staged.reused or {})


def checked_stream(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    block_bytes: int,
    stop: threading.Event,
    evaluate_batch: Callable[[pl.DataFrame, int], PartitionParts],
    batch_items: int | None = None,
) -> Streamed[list[PartitionParts]] | None:
    """The in-process fast pass over `path`: its batches evaluated, or None when a record
    breaks a rule or a case_id repeats (the line-by-line pass then names them)."""
    streamed = stream_staged(path, block_bytes, evaluate_batch, stop, batch_items)
    if streamed is None or repeated_case_ids(con, [parts.cases for parts in streamed[0]]):
        return None
    return streamed


def evaluate_run(
    manifest: Manifest,
    warehouse: Warehouse,
    txn: str,
    options: EvaluationOptions,
    committed: Committed,
    progress: Progress | None = None,
) -> RunParts:
    """Every step of one run, in this process: one streaming read hands the staged cases to
    Polars in batches; nothing is staged on disk. `committed` is what the warehouse holds
    of the run."""
    run_id = manifest.run_id
    _, ks = run_cutoffs(manifest, options)

    metrics_con = engine.connect()  # one for every batch: opening one costs about 0.04 s

    def evaluate_batch(staged: pl.DataFrame, index: int) -> PartitionParts:
        if progress:
            progress.batch(index + 1, staged.height)
        return evaluate_partition(staged, run_id, ks, warehouse, txn, index, metrics_con)

    try:
        digest, outcome, committed_parts = _ingest_run(
            manifest,
            warehouse,
            txn,
            options,
            committed,
            lambda path, block_bytes, stop: checked_stream(
                metrics_con, path, block_bytes, stop, evaluate_batch, options.partition_items
            ),
        )
    finally:
        metrics_con.close()
    if outcome is None:
        return reused_run(StagedRun(run_id, [], 0, digest, reused=committed_parts))
    result, rejects = outcome
    staged = StagedRun(run_id, [], 0, digest, rejects, loaded=result is not None)
    if result is None:
        return refused_run(staged, warehouse, txn)
    partitions, n_cases = result
    _check_not_empty(manifest, n_cases, rejects)
    return finish_run(manifest, staged, partitions, warehouse, txn, options)


def commit_runs(warehouse: Warehouse, results: list[RunParts]) -> None:
    warehouse.commit(
        {(table, result.run_id): paths for result in results for table, paths in result.parts.items()}
    )


def refused(results: list[RunParts]) -> RejectedRecords | None:
    """The strict-mode refusal of every run that had rejected records, as one error."""
    bad = [result for result in results if not result.loaded]
    if not bad:
        return None
    return RejectedRecords(", ".join(r.run_id for r in bad), [x for r in bad for x in r.rejects])


def evaluate(options: EvaluationOptions) -> list[str]:
    """Run the main job in-process; returns the run ids now loaded in the warehouse."""
    manifests = load_manifests(options.runs)
    warehouse = Warehouse(options.warehouse)
    progress = Progress(len(manifests))
    with warehouse.writing():
        txn = warehouse.new_txn()
        committed = warehouse.committed_runs([manifest.run_id for manifest in manifests])
        results = []
        for index, manifest in enumerate(manifests, start=1):
            progress.start_run(index, manifest.run_id, manifest.cases_file.stat().st_size)
            results.append(evaluate_run(manifest, warehouse, txn, options, committed[manifest.run_id], progress))
            progress.end_run()
        commit_runs(warehouse, results)
    error = refused(results)
    if error is not None:
        raise error
    return [result.run_id for result in results]


def read_report(warehouse: Warehouse, run_ids: list[str], kb: Path | None = None) -> Report:
    """The report model of `run_ids`, read back through the catalog's views; with `kb`, gold
    ids that are not cards of the knowledge base are counted in each run's warnings."""
    con, kb_loaded = _report_reader(warehouse, kb)
    with con:
        runs, shown = _read_runs(con, run_ids)
        return _read_diagnostics(con, run_ids, runs, shown, kb_loaded)


def write_report(report: Report, report_dir: Path, charts: bool = True, baseline: Path | None = None) -> Report:
    """report.md and report.html with their charts in `report_dir`; returns the report
    with chart names set. A baseline snapshot adds its figures to the trend chart."""
    return _write_report(report, report_dir, _draw_charts(report.runs, baseline) if charts else {})


def report_files(
    warehouse: Warehouse,
    run_ids: list[str],
    report_dir: Path,
    kb: Path | None = None,
    charts: bool = True,
    baseline: Path | None = None,
) -> Report:
    """What `write_report(read_report(...))` writes, the way a run ends: the charts need only
    each run's figures, so they are drawn on a thread while the per-case diagnostics are read
    (pygal's import and drawing, 0.045 s of Python, beside DuckDB queries that leave the
    interpreter free). Nothing is written unless every read succeeds."""
    con, kb_loaded = _report_reader(warehouse, kb)
    with con, ThreadPoolExecutor(max_workers=1) as drawer:
        runs, shown = _read_runs(con, run_ids)
        drawn = drawer.submit(_draw_charts, shown, baseline) if charts else None
        report = _read_diagnostics(con, run_ids, runs, shown, kb_loaded)
        images = drawn.result() if drawn is not None else {}
    return _write_report(report, report_dir, images)


def _report_reader(warehouse: Warehouse, kb: Path | None) -> tuple[duckdb.DuckDBPyConnection, bool]:
    """A read-only connection to the catalog, holding the KB's cards when `kb` is a file
    (a bad KB stops here, before anything is drawn or written); and whether it does."""
    con = warehouse.connect()
    kb_loaded = kb is not None and kb.is_file()
    if kb_loaded:
        try:
            load_kb(con, kb)
        except BaseException:
            con.close()
            raise
    return con, kb_loaded


def _read_runs(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> tuple[pl.DataFrame, list[RunReport]]:
    """The `runs` rows of `run_ids` and each run's figures as shown."""
    params = {"ids": run_ids}
    runs = con.sql("select * from runs where list_contains($ids, run_id)", params=params).pl()
    aggregates = con.sql("select * from aggregates where list_contains($ids, run_id)", params=params).pl()
    return runs, run_reports(runs, aggregates)


def _read_diagnostics(
    con: duckdb.DuckDBPyConnection, run_ids: list[str], runs: pl.DataFrame, shown: list[RunReport], kb_loaded: bool
) -> Report:
    """The report model: the runs shown, with the diagnostics read from their case metrics
    (and the KB check when `con` holds the KB's cards)."""
    # The diagnostics read each run's headline k only: a k sweep does not grow the report.
    case_metrics = con.sql(
        "select case_metrics.* from case_metrics join runs using (run_id) "
        "where list_contains($ids, run_id) and case_metrics.k = runs.headline_k",
        params={"ids": run_ids},
    ).pl()
    unknown_gold = effective_gold_not_in_kb(con, run_ids) if kb_loaded else None
    return build_report(runs, shown, case_metrics, unknown_gold)


def _draw_charts(runs: list[RunReport], baseline: Path | None) -> dict[str, tuple[str, bytes]]:
    """The report's charts as SVG (a baseline snapshot adds its figures to the trend)."""
    return draw_charts(runs, baseline_reference(read_snapshot(baseline)) if baseline else None)


def _write_report(report: Report, report_dir: Path, images: dict[str, tuple[str, bytes]]) -> Report:
    """The charts, report.md and report.html (its charts inlined) in `report_dir`; returns the
    report with chart names set."""
    report_dir.mkdir(parents=True, exist_ok=True)
    for file_name, svg in images.values():
        (report_dir / file_name).write_bytes(svg)
    report = replace(report, charts={name: file_name for name, (file_name, _) in images.items()})
    (report_dir / "report.md").write_text(render_markdown(report), encoding="utf-8")
    svgs = {file_name: svg for file_name, svg in images.values()}
    (report_dir / "report.html").write_text(render_html(report, svgs), encoding="utf-8")
    return report
