"""The main job in-process: ingest → case metrics → aggregates → catalog → report.

Each step is one function of transforms/ (or one model of sql/) that reads and writes
files; flows/prefect_flows.py runs the very same steps as Prefect tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from flows import config
from flows.warehouse import Warehouse
from transforms.aggregates import aggregates, slice_partials
from transforms.case_metrics import cutoffs, write_case_metrics
from transforms.errors import Reject, RejectedRecords
from transforms.ingest import ingest_cases
from transforms.manifest import Manifest, find_run_dirs, load_manifest
from transforms.report import Report, build_report
from transforms.baseline import baseline_reference, read_snapshot
from transforms.report_render import render_html, render_markdown
from transforms.run_summary import run_summary


@dataclass(frozen=True)
class EvaluationOptions:
    runs: Path = config.RUNS
    warehouse: Path = config.WAREHOUSE
    report_dir: Path = config.REPORT_DIR
    k: int | None = None
    ks: tuple[int, ...] = ()
    allow_rejects: bool = False


@dataclass(frozen=True)
class RunParts:
    """The files one run's evaluation wrote, not yet visible in the catalog."""

    run_id: str
    parts: dict[str, Path]
    rejects: list[Reject] = field(default_factory=list)
    loaded: bool = True


def load_manifests(runs: Path) -> list[Manifest]:
    """Every manifest is checked before anything is written (SPEC 6)."""
    return [load_manifest(run_dir) for run_dir in find_run_dirs(runs)]


def evaluate_run(
    manifest: Manifest, warehouse: Warehouse, txn: str, options: EvaluationOptions
) -> RunParts:
    run_id = manifest.run_id
    part = {table: warehouse.new_part(table, run_id, txn) for table in ("cases", "retrieved", "rejects")}
    ingested = ingest_cases(
        manifest, part["cases"], part["retrieved"], part["rejects"], allow_rejects=options.allow_rejects
    )
    if not ingested.loaded:
        return RunParts(run_id, {"rejects": part["rejects"]}, ingested.rejects, loaded=False)
    headline_k = options.k or manifest.retrieval_top_k
    ks = cutoffs(headline_k, options.ks)
    part["case_metrics"] = warehouse.new_part("case_metrics", run_id, txn)
    write_case_metrics(part["cases"], ks, part["case_metrics"])
    part["aggregates"] = warehouse.new_part("aggregates", run_id, txn)
    write_aggregates(part["case_metrics"], part["aggregates"])
    part["runs"] = warehouse.new_part("runs", run_id, txn)
    run_summary(manifest, part["cases"], len(ingested.rejects), headline_k, ks).write_parquet(
        part["runs"]
    )
    return RunParts(run_id, part, ingested.rejects)


def write_aggregates(case_metrics_path: Path, out_path: Path) -> None:
    aggregates(slice_partials(pl.read_parquet(case_metrics_path))).write_parquet(
        out_path, compression="zstd"
    )


def commit_runs(warehouse: Warehouse, results: list[RunParts]) -> None:
    warehouse.commit(
        {(table, result.run_id): path for result in results for table, path in result.parts.items()}
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
    with warehouse.writing():
        txn = warehouse.new_txn()
        results = [evaluate_run(manifest, warehouse, txn, options) for manifest in manifests]
        commit_runs(warehouse, results)
    error = refused(results)
    if error is not None:
        raise error
    return [result.run_id for result in results]


def read_report(warehouse: Warehouse, run_ids: list[str]) -> Report:
    """The report model of `run_ids`, read back through the catalog's views."""
    params = {"ids": run_ids}
    with warehouse.connect() as con:
        runs = con.sql("select * from runs where list_contains($ids, run_id)", params=params).pl()
        aggregates = con.sql(
            "select * from aggregates where list_contains($ids, run_id)", params=params
        ).pl()
        case_metrics = con.sql(
            "select * from case_metrics where list_contains($ids, run_id)", params=params
        ).pl()
    return build_report(runs, aggregates, case_metrics)


def write_report(
    report: Report, report_dir: Path, charts: bool = True, baseline: Path | None = None
) -> Report:
    """report.md and report.html with their charts in `report_dir`; returns the report
    with chart names set. A baseline snapshot adds its figures to the trend chart."""
    report_dir.mkdir(parents=True, exist_ok=True)
    if charts:
        from transforms.charts import write_charts

        reference = baseline_reference(read_snapshot(baseline)) if baseline else None
        report = replace(report, charts=write_charts(report, report_dir, reference))
    (report_dir / "report.md").write_text(render_markdown(report), encoding="utf-8")
    images = {name: (report_dir / name).read_bytes() for name in report.charts.values()}
    (report_dir / "report.html").write_text(render_html(report, images), encoding="utf-8")
    return report
