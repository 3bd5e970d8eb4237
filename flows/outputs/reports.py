"""The report of a warehouse, read and written (SPEC 13): the model (transforms/report.py)
read through views over the runs it needs — every run's `runs` row and the aggregates it
shows (the runs table, the trend), the cases of the newest two runs (what changed, the detail,
the explorer) — then report.md, report.html and their charts written together, once every
read has succeeded. The cost follows the newest run, not the history (SPEC 9)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from importlib.resources import files
from pathlib import Path
from typing import TypeVar

import duckdb
import polars as pl

from ... import sql
from ...transforms.baseline import baseline_reference, rounded_as_snapshot
from ...transforms.charts_of_report import draw_charts
from ...transforms.report import (
    Report,
    baseline_set_aside,
    changes,
    comparison_notes,
    diagnostics,
    explorer_data,
    kb_warnings,
    report_notes,
    run_report,
    run_warnings,
    runs_table,
)
from ...transforms.report_render import render_html, render_markdown
from ..inputs.baseline_file import Baseline
from ..inputs.kb import KnowledgeBase, RunKb, kb_titles, load_kb, run_kb, unknown_gold, unknown_gold_counts
from ..sources.formats.identity import CONTENT_ID_PREFIX
from ..storage.duckdb_connection import connect
from ..storage.locations import Location
from ..storage.output_files import output_folder, shown_path, written_aside
from ..warehouse.summary import summary_files
from ..warehouse.views import add_views, naming_damage, with_later_columns
from ..warehouse.warehouse import State, Warehouse

In = TypeVar("In")
Out = TypeVar("Out")

DETAILED_RUNS = 2  # the newest run and the one before it
PAGES = ("report.md", "report.html")  # the report's pages, beside their charts


@dataclass(frozen=True)
class ReportOptions:
    warehouse: Path
    report_dir: Path | Location  # a local folder, or a folder on a store (flows/storage/output_files.py)
    # The job's KB, read and judged once (flows/inputs/kb.py): it stands for the newest run's own when
    # it is that file with those bytes, and wins over it when given with --kb.
    kb: KnowledgeBase | None = None
    charts: bool = True
    baseline: Baseline | None = None  # read once by the job (flows/inputs/baseline_file.py)


@dataclass(frozen=True)
class WrittenReport:
    """The report and where its pages are, as the user is told: local paths, or their URIs
    when the report folder is on a store."""

    report: Report
    files: list[Path | str]
    folder: Path | str  # absolute, or a URI

    @property
    def markdown(self) -> Path | str:
        return self.files[0]

    @property
    def html(self) -> Path | str:
        return self.files[1]

    @property
    def folder_link(self) -> str:
        """The report folder as a link: its URI on a store, or a local folder's file:// URL."""
        return self.folder if isinstance(self.folder, str) else self.folder.as_uri()


def explorer_assets() -> tuple[str, str]:
    """The case explorer's script and style, as installed with the package."""
    assets = files("retrieval_eval.transforms").joinpath("assets")
    return assets.joinpath("explorer.js").read_text(encoding="utf-8"), assets.joinpath("explorer.css").read_text(encoding="utf-8")


def read_report(con: duckdb.DuckDBPyConnection, warehouse: Warehouse, state: State, kb: KnowledgeBase | None,
                baseline: Baseline | None) -> Report:
    """The report model of every run in `state`; flips and gold are judged against the newest
    run's own KB (`report_kb`)."""
    summary = summary_read_now(con, warehouse, state)
    if summary is None:
        add_views(con, warehouse, state, tables=("runs", "aggregates"))
    else:
        for table, data in summary.items():
            con.register(f"summary_{table}", data)
            with_later_columns(con.table(f"summary_{table}"), table, mixed=False).create_view(table)
    with naming_damage(warehouse, state):
        runs = con.sql(sql.load("report_runs")).pl()
        aggregates = con.sql(sql.load("report_aggregates")).pl()
    detailed = runs["run_id"].to_list()[-DETAILED_RUNS:]
    rows = {row["run_id"]: row for row in runs.iter_rows(named=True)}
    # Both runs are read at the newest's headline k: what changed and the explorer compare them there.
    k = rows[detailed[-1]]["headline_k"] if detailed else 0
    judged = report_kb(state, rows, detailed, kb)
    kb = judged.kb
    if kb is not None:
        load_kb(con, kb)
    add_views(con, warehouse, state, detailed, tables=("cases", "case_metrics"))
    with naming_damage(warehouse, state):
        con.register("computed_case_metrics", computed_case_metrics(con, [r for r in detailed if k not in rows[r]["ks"]], k))
        cases = con.sql(sql.load("report_cases"), params={"ids": detailed, "k": k}).pl()
        unknown = unknown_gold_counts(con, detailed) if kb else None
    titles = kb_titles(kb) if kb else None
    kb_note = [judged.note] if judged.note and not judged.own else []
    reports = [
        run_report(rows[run_id], aggregates,
                   run_warnings(rows[run_id], cases.filter(pl.col("run_id") == run_id))
                   + kb_warnings(run_id, unknown, kb.uri if kb else "") + (kb_note if run_id == detailed[-1] else []))
        for run_id in detailed
    ]
    newest, previous = (reports[-1] if reports else None), (reports[-2] if len(reports) > 1 else None)
    if newest is None:
        return Report(runs_table(runs, aggregates), aggregates, None, None, None, *diagnostics(cases))
    newest_cases = cases.filter(pl.col("run_id") == newest.run_id)
    previous_cases = cases.filter(pl.col("run_id") == previous.run_id) if previous else None
    snapshot = baseline.snapshot if baseline is not None else None
    set_aside = None if snapshot is None else baseline_set_aside(snapshot, newest, rows[newest.run_id].get("relevance_level"))
    notes = comparison_notes(newest, previous, set_aside)
    # Which gold ids are not cards matters only to the flips of a comparison; a lone run has none.
    compared = [frame for frame in (previous_cases, baseline.cases if snapshot is not None and set_aside is None else None)
                if frame is not None]
    unknown_ids = unknown_gold(kb, [newest_cases, *compared]) if compared else None
    against_previous = None if previous_cases is None else changes(
        newest_cases, previous_cases, run_id=newest.run_id, reference=f"run {previous.run_id}",
        k=k, unknown_gold=unknown_ids, notes=notes)
    change = against_previous
    if snapshot is not None and set_aside is None:  # else the run before
        change = changes(rounded_as_snapshot(newest_cases), baseline.cases, run_id=newest.run_id,
                         reference=f"baseline {snapshot['run_id']}", k=k, unknown_gold=unknown_ids)
    shown_runs = [run_id for run_id in detailed[-2:] if rows[run_id].get("retrieved_by_content")]
    texts = card_texts(con, warehouse, state, shown_runs, [newest_cases, previous_cases]) if shown_runs else None
    explorer = explorer_data(newest_cases, previous_cases, against_previous.flips if against_previous else None,
                             titles, run_id=newest.run_id, previous_run_id=previous.run_id if previous else None, k=k,
                             texts=texts)
    return Report(runs_table(runs, aggregates), aggregates, newest, previous, change, *diagnostics(newest_cases),
                  explorer=explorer, uncompared=notes if change is None else (),
                  notes=report_notes(newest_cases["gold_source"]))


def summary_read_now(con: duckdb.DuckDBPyConnection, warehouse: Warehouse, state: State) -> dict | None:
    """The summary of `state` (summary.py), read into memory now: None when it was not made,
    or when it is gone before it was read (each writer keeps the summaries of the versions
    before and after its own commit only: one that commits next removes this one's). The
    report then reads the runs' parts instead."""
    paths = summary_files(warehouse, state)
    if paths is None:
        return None
    try:
        return {table: con.read_parquet(str(path)).to_arrow_table() for table, path in paths.items()}
    except duckdb.IOException:
        return None


def card_texts(con: duckdb.DuckDBPyConnection, warehouse: Warehouse, state: State, run_ids: list[str],
               sides: list[pl.DataFrame | None]) -> dict[str, str]:
    """The texts of the content-identified cards (SPEC 15) that the explorer lists of `sides`
    (the newest run's cases and the run before's), read from the `retrieved` rows of
    `run_ids`, the runs among them that have such cards."""
    named = pl.concat([side.get_column(column).explode() for side in sides if side is not None
                       for column in ("gold", "cards")])
    cards = named.filter(named.str.starts_with(CONTENT_ID_PREFIX)).unique().sort().to_list()
    if not cards:
        return {}
    add_views(con, warehouse, state, run_ids, tables=("retrieved",))
    with naming_damage(warehouse, state):
        found = con.execute(sql.load("report_card_texts"), {"ids": run_ids, "cards": cards}).fetchall()
    return dict(found)


def report_kb(state: State, rows: dict[str, dict], detailed: list[str], held: KnowledgeBase | None) -> RunKb:
    """The KB the report judges gold and flips against: the newest run's own (flows/inputs/kb.py
    `run_kb`; a KB given with --kb wins), its note a warning of the newest run when it is not."""
    if not detailed:
        return RunKb(None, None, True)
    newest = detailed[-1]
    return run_kb(newest, rows[newest], state.runs[newest].source, held)


def computed_case_metrics(con: duckdb.DuckDBPyConnection, run_ids: list[str], k: int) -> pl.DataFrame:
    """The case metrics at `k` of runs evaluated without that cutoff, computed from their
    `cases` rows by the model that made the stored ones (sql/case_metrics.sql); none (the
    stored rows' columns) when `run_ids` is empty."""
    if not run_ids:
        return con.table("case_metrics").limit(0).pl()
    of_runs = duckdb.ColumnExpression("run_id").isin(*(duckdb.ConstantExpression(r) for r in run_ids))
    return con.sql(sql.load("case_metrics"), params={"ks": [k]}).filter(of_runs).pl()


def write_report(options: ReportOptions, state: State, con: duckdb.DuckDBPyConnection | None = None) -> WrittenReport:
    """Read the report of `state` and write it to `options.report_dir`; nothing is written
    unless every read succeeds. `con`: a connection of the caller's that the report may make
    its views on (not one more to open), else one of its own."""
    warehouse = Warehouse(options.warehouse)
    baseline = options.baseline
    with nullcontext(con) if con is not None else connect() as reading:
        report = read_report(reading, warehouse, state, options.kb, baseline)
    reference = baseline_reference(baseline.snapshot) if baseline else None
    images = draw_charts(report, reference) if options.charts else {}
    with output_folder(options.report_dir, put_last=PAGES) as folder:
        report = write_files(report, folder, images)
    target = options.report_dir
    return WrittenReport(report, [shown_path(target, name) for name in PAGES],
                         target.absolute() if isinstance(target, Path) else str(target))


def write_files(report: Report, report_dir: Path, images: dict[str, tuple[str, bytes]]) -> Report:
    """The charts, report.md and report.html (charts and the case explorer inline) in the
    local folder `report_dir`; the report as written (with its charts' file names)."""
    for file_name, svg in images.values():
        (report_dir / file_name).write_bytes(svg)
    report = replace(report, charts={name: file_name for name, (file_name, _) in images.items()})
    markdown, html = (report_dir / name for name in PAGES)
    with written_aside(markdown) as handle:
        handle.write(render_markdown(report))
    script, style = explorer_assets()
    svgs = {file_name: svg for file_name, svg in images.values()}
    with written_aside(html) as handle:  # its explorer data is made while it is written
        handle.writelines(render_html(report, svgs, explorer_script=script, explorer_style=style, map_chunks=ordered_map))
    return report


def ordered_map(fn: Callable[[In], Out], items: Iterable[In], *, workers: int = 2) -> Iterator[Out]:
    """`map(fn, items)` on `workers` threads, in order, at most `workers` + 1 results made
    ahead of the one taken (the report's explorer JSON: Polars writes each chunk without the
    GIL while the one before is written to the file). Stopping early cancels what is queued."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ordered-map") as pool:
        pending: deque = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) > workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
