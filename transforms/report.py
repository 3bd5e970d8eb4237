"""The report model: one object built from the warehouse, rendered many ways
(terminal, markdown, JSON, Prefect artifacts) by transforms/report_render.py."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import polars as pl

from .flips import hit_changes
from .metrics import NAMES as METRICS

RECALL_CAVEAT = (
    "recall@k is a lower bound: gold is disjunctive (citing any one listed card satisfies a "
    "case), so a case can be fully served with recall below 1. hit@k is the headline figure."
)
LOCALE_CAVEAT = "Per-locale and per-category figures are indicative: read them with their n."
CI_NOTE = (
    "Intervals are 95% Wilson score intervals (conservative for metrics other than hit)."
)


@dataclass(frozen=True)
class RunReport:
    run_id: str
    created_at: str
    headline_k: int
    retrieval_top_k: int
    ks: list[int]
    n_cases: int
    n_labelled: int
    n_rejected: int
    vacuous: bool
    config: str
    headline: pl.DataFrame  # aggregates at the headline k, every slice
    sweep: pl.DataFrame  # aggregates of slice `all` at every k
    warnings: list[str] = field(default_factory=list)

    def figure(self, metric: str, slice_: str = "all", value: str = "all") -> dict | None:
        rows = self.headline.filter(
            (pl.col("metric") == metric) & (pl.col("slice") == slice_) & (pl.col("slice_value") == value)
        )
        return rows.row(0, named=True) if rows.height else None


@dataclass(frozen=True)
class Report:
    runs: list[RunReport]  # ordered by the instant of created_at
    never_hit: pl.DataFrame  # latest run: labelled cases with no gold card in the whole capture
    entry_ranks: pl.DataFrame  # latest run: first_relevant_rank distribution at the headline k
    changed: pl.DataFrame  # cases whose hit@k differs between the two most recent runs
    charts: dict[str, str] = field(default_factory=dict)  # chart name → file name in report dir
    notes: tuple[str, ...] = (RECALL_CAVEAT, LOCALE_CAVEAT, CI_NOTE)


def run_reports(runs: pl.DataFrame, aggregates: pl.DataFrame) -> list[RunReport]:
    """The runs shown, oldest first, with their figures (no warnings yet): all that the
    charts draw, from the `runs` and `aggregates` rows."""
    return [
        RunReport(
            run_id=run["run_id"],
            created_at=run["created_at"],
            headline_k=run["headline_k"],
            retrieval_top_k=run["retrieval_top_k"],
            ks=list(run["ks"]),
            n_cases=run["n_cases"],
            n_labelled=run["n_labelled"],
            n_rejected=run["n_rejected"],
            vacuous=run["vacuous"],
            config=run["config"],
            headline=aggregates.filter((pl.col("run_id") == run["run_id"]) & (pl.col("k") == run["headline_k"])),
            sweep=aggregates.filter((pl.col("run_id") == run["run_id"]) & (pl.col("slice") == "all")),
        )
        for run in runs.sort("created_at_utc", "run_id").iter_rows(named=True)
    ]


def build_report(
    runs: pl.DataFrame,
    shown: list[RunReport],
    case_metrics: pl.DataFrame,
    unknown_gold: pl.DataFrame | None = None,
) -> Report:
    """Assemble the report from the runs shown (`run_reports` of the same `runs` rows),
    their `case_metrics` rows, and the count of gold ids that are not KB cards (run_id,
    n_ids, n_cases) when checked."""
    rows = {run["run_id"]: run for run in runs.iter_rows(named=True)}
    run_reports = [
        replace(
            run,
            warnings=run_warnings(rows[run.run_id], case_metrics.filter(pl.col("run_id") == run.run_id))
            + kb_warnings(run.run_id, unknown_gold),
        )
        for run in shown
    ]
    latest = run_reports[-1] if run_reports else None
    latest_metrics = (
        case_metrics.filter(
            (pl.col("run_id") == latest.run_id) & (pl.col("k") == latest.headline_k)
        )
        if latest
        else case_metrics.clear()
    )
    never_hit = latest_metrics.filter(pl.col("first_relevant_rank").is_null()).select(
        "case_id", "locale", "category", "n_gold"
    ).sort("case_id")
    entry_ranks = (
        latest_metrics.group_by("first_relevant_rank")
        .agg(pl.len().alias("n_cases"))
        .sort("first_relevant_rank", nulls_last=True)
    )
    changed = changed_cases(case_metrics, run_reports[-2:]) if len(run_reports) > 1 else _no_changes()
    return Report(run_reports, never_hit, entry_ranks, changed)


def _no_changes() -> pl.DataFrame:
    return pl.DataFrame(schema={"case_id": pl.String, "locale": pl.String, "category": pl.String, "change": pl.String})


def changed_cases(case_metrics: pl.DataFrame, pair: list[RunReport]) -> pl.DataFrame:
    """Cases labelled in both runs whose hit at each run's headline k differs."""
    previous, latest = (
        case_metrics.filter((pl.col("run_id") == run.run_id) & (pl.col("k") == run.headline_k))
        for run in pair
    )
    return hit_changes(previous, latest)


def run_warnings(run: dict, case_metrics: pl.DataFrame) -> list[str]:
    """Loud flags of one run: vacuous (SPEC 2.9), nothing labelled, k beyond depth, rejects."""
    warnings = []
    if run["vacuous"]:
        warnings.append(
            f"VACUOUS RUN: none of its {run['n_labelled']} labelled cases retrieved anything "
            "(did the runner have a store?). Its figures are not a measurement of retrieval."
        )
    if run["n_labelled"] == 0:
        warnings.append("No labelled cases: nothing in this run can be scored.")
    for k in run["ks"]:
        if k > run["max_depth"]:
            warnings.append(
                f"k={k} is beyond the deepest capture of this run ({run['max_depth']} distinct "
                f"cards): the run cannot show k={k}; figures at k={k} are computed on what was captured."
            )
            continue
        shallow = case_metrics.filter((pl.col("k") == k) & pl.col("k_beyond_depth")).height
        if shallow and k == run["headline_k"]:
            warnings.append(
                f"k={k}: {shallow} of {run['n_labelled']} labelled cases captured fewer than {k} "
                "distinct cards (sibling chunks or short lists); they are scored on what was captured."
            )
    if run["n_rejected"]:
        warnings.append(
            f"{run['n_rejected']} record(s) were rejected and left out (see the `rejects` view)."
        )
    return warnings


def kb_warnings(run_id: str, unknown_gold: pl.DataFrame | None) -> list[str]:
    if unknown_gold is None:
        return []
    mine = unknown_gold.filter(pl.col("run_id") == run_id)
    if mine.height == 0:
        return []
    return [
        f"{mine['n_ids'][0]} gold id(s) in {mine['n_cases'][0]} case(s) are not cards of the "
        "knowledge base: those cases can never hit (see `retrieval-eval check-kb`)."
    ]


def headline_table(report: Report) -> pl.DataFrame:
    """Headline figures of every run on slice `all`: one row per run, one column per metric."""
    rows = []
    for run in report.runs:
        row = {"run_id": run.run_id, "k": run.headline_k, "n": 0}
        for metric in METRICS:
            figure = run.figure(metric)
            row[metric] = figure["mean"] if figure else None
            row["n"] = figure["n"] if figure else 0
        rows.append(row)
    return pl.DataFrame(rows)
