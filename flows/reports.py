"""The report of a warehouse, read and written: the model (transforms/report.py) read through
views over the runs it needs — every run's `runs` row and aggregates (the runs table and the
trend), the case metrics of the newest two (the detail) — then report.md, report.html and
their charts written together, once every read has succeeded."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from .. import sql
from ..transforms.baseline import baseline_reference
from ..transforms.charts import draw_charts
from ..transforms.report import Report, RunReport, build_report, run_reports
from ..transforms.report_render import render_html, render_markdown
from .baseline_file import read_baseline
from .engine import connect
from .kb import load_kb, unknown_gold_counts
from .views import add_views, naming_damage
from .warehouse import State, Warehouse

DETAILED_RUNS = 2  # the newest run and the one before it


@dataclass(frozen=True)
class ReportOptions:
    warehouse: Path
    report_dir: Path
    kb: Path | None = None
    charts: bool = True
    baseline: Path | None = None


@dataclass(frozen=True)
class WrittenReport:
    report: Report
    files: list[Path]

    @property
    def markdown(self) -> Path:
        return self.files[0]

    @property
    def html(self) -> Path:
        return self.files[1]


def _read_runs(con, warehouse: Warehouse, state: State) -> tuple[pl.DataFrame, list[RunReport]]:
    add_views(con, warehouse, state, tables=("runs", "aggregates"))
    with naming_damage(warehouse, state):
        runs = con.sql(sql.load("report_runs")).pl()
        aggregates = con.sql("select * from aggregates").pl()
    return runs, run_reports(runs, aggregates)


def _read_detail(con, warehouse: Warehouse, state: State, runs: pl.DataFrame, shown: list[RunReport],
                 kb_loaded: bool) -> Report:
    detailed = [run.run_id for run in shown[-DETAILED_RUNS:]]
    add_views(con, warehouse, state, detailed, tables=("cases", "case_metrics"))
    with naming_damage(warehouse, state):
        case_metrics = con.sql(sql.load("headline_case_metrics"), params={"ids": detailed}).pl()
        unknown = unknown_gold_counts(con, detailed) if kb_loaded else None
    return build_report(runs, shown, case_metrics, unknown)


def write_report(options: ReportOptions, state: State) -> WrittenReport:
    """Read the report of `state` and write it to `options.report_dir`: the charts are drawn
    on a thread while the per-case detail is read (pygal's drawing is Python, the queries
    leave the interpreter free); nothing is written unless every read succeeds."""
    warehouse = Warehouse(options.warehouse)
    baseline = baseline_reference(read_baseline(options.baseline)) if options.baseline else None
    with connect() as con, ThreadPoolExecutor(max_workers=1) as drawer:
        if options.kb is not None:
            load_kb(con, options.kb)
        runs, shown = _read_runs(con, warehouse, state)
        drawn = drawer.submit(draw_charts, shown, baseline) if options.charts else None
        report = _read_detail(con, warehouse, state, runs, shown, options.kb is not None)
        images = drawn.result() if drawn is not None else {}
    return write_files(report, options.report_dir, images)


def write_files(report: Report, report_dir: Path, images: dict[str, tuple[str, bytes]]) -> WrittenReport:
    """The charts, report.md and report.html (its charts inlined) in `report_dir`."""
    report_dir.mkdir(parents=True, exist_ok=True)
    for file_name, svg in images.values():
        (report_dir / file_name).write_bytes(svg)
    report = replace(report, charts={name: file_name for name, (file_name, _) in images.items()})
    markdown, html = report_dir / "report.md", report_dir / "report.html"
    markdown.write_text(render_markdown(report), encoding="utf-8")
    html.write_text(render_html(report, {file_name: svg for file_name, svg in images.values()}), encoding="utf-8")
    return WrittenReport(report, [markdown, html])
