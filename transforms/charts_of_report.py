"""The report's charts: its model handed to transforms/charts.py as the plain data each chart
draws. Every chart is small (a phone shows it at full size) and drawn the same twice."""

from __future__ import annotations

import polars as pl

from .charts import (
    MAX_SLICE_RUNS,
    MAX_SWEEP_RUNS,
    SWEEP_METRICS,
    delta_chart,
    slice_chart,
    sweep_panels,
    trend_chart,
)
from .comparison import p_family
from .metrics import LABELS
from .report import Report

CHART_TITLES = {
    "changes": "What changed, with paired 95% intervals",
    "trend": "Headline figures across runs",
    "locales": "hit@k per locale with 95% intervals",
    "categories": "hit@k per category with 95% intervals",
    "sweep-hit_at_k": "hit@k against k",
    "sweep-recall_at_k": "recall@k against k",
    "sweep-ndcg_at_k": "nDCG@k against k",
}


def _sweeps(report: Report) -> list[dict]:
    """The newest runs that have a sweep (more than one k), oldest first."""
    runs = report.runs.filter(pl.col("run_id").is_in(
        report.aggregates.group_by("run_id").agg(pl.col("k").n_unique().alias("n_ks"))
        .filter(pl.col("n_ks") > 1)["run_id"].implode()
    )).tail(MAX_SWEEP_RUNS)
    on_all = report.aggregates.filter(pl.col("slice") == "all")
    return [
        {
            "run_id": run["run_id"],
            "headline_k": run["headline_k"],
            "points": {
                metric: [(row["k"], row["mean"]) for row in on_all.filter(
                    (pl.col("run_id") == run["run_id"]) & (pl.col("metric") == metric)).sort("k").iter_rows(named=True)]
                for metric in SWEEP_METRICS
            },
        }
        for run in runs.iter_rows(named=True)
    ]


def _slice_rows(report: Report, slice_: str) -> list[dict]:
    runs = report.runs.tail(MAX_SLICE_RUNS)
    at_headline = report.aggregates.join(runs.select("run_id", "headline_k"), on="run_id").filter(
        (pl.col("k") == pl.col("headline_k")) & (pl.col("slice") == slice_) & (pl.col("metric") == "hit_at_k"))
    order = {run_id: i for i, run_id in enumerate(runs["run_id"])}
    rows = []
    for value in sorted(at_headline["slice_value"].unique()):
        figures = sorted(at_headline.filter(pl.col("slice_value") == value).iter_rows(named=True),
                         key=lambda r: order[r["run_id"]])
        rows.append({"slice_value": value, "runs": [
            {key: figure[key] for key in ("run_id", "mean", "ci_low", "ci_high", "n")} for figure in figures]})
    return rows


def _change_rows(report: Report) -> list[dict]:
    if report.changes is None:
        return []
    lines = report.changes.lines.filter(pl.col("slice") != "category")
    return [
        {"label": f"{'all' if row['slice'] == 'all' else row['slice_value']} · {LABELS[row['metric']]}@{report.changes.k}",
         "delta": row["delta"], "ci_low": row["ci_low"], "ci_high": row["ci_high"], "significant": row["significant"]}
        for row in lines.sort("slice", "slice_value", "metric").iter_rows(named=True)
    ]


def draw_charts(report: Report, baseline: dict[str, float] | None = None) -> dict[str, tuple[str, bytes]]:
    """Every chart of the report: chart name → (file name, SVG bytes)."""
    if report.newest is None:
        return {}
    charts: dict[str, bytes] = {}
    change_rows = _change_rows(report)
    if change_rows:
        # the newest run's id is on the page beside the chart; in the title it would not fit 360 px
        charts["changes"] = delta_chart(change_rows, f"Newest run against {report.changes.reference}",
                                        f"p < {report.changes.alpha}, "
                                        + p_family("holm", report.changes.lines.height))
    series = {metric: report.runs[metric].to_list() for metric in SWEEP_METRICS}
    charts["trend"] = trend_chart(report.runs["run_id"].to_list(), series, baseline)
    charts["locales"] = slice_chart("locale", _slice_rows(report, "locale"))
    charts["categories"] = slice_chart("category", _slice_rows(report, "category"))
    sweeps = _sweeps(report)
    if sweeps:
        charts.update(dict(sweep_panels(sweeps)))
    return {name: (f"{name}.svg", svg) for name, svg in charts.items()}
