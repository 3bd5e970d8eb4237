"""Paired comparison of runs (SPEC 8, 11 and 13): every run against a reference on the cases
both scored, per slice and metric, with the paired interval, the test's p-value, the adjusted
p-value over the family compared, significance, and wins / ties / losses. The gate, the
compare command and the report's "what changed" all read this one model; the statistics are
transforms/paired_stats.py."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import polars as pl

from . import paired_stats
from .aggregates import SLICE_VALUES

CORRECTIONS = ("holm", "bh", "none")
TESTS = paired_stats.TESTS
COMPARISON_COLUMNS = [
    "run_id", "slice", "slice_value", "metric", "n", "reference_mean", "mean", "delta", "ci_low", "ci_high",
    "p_value", "p_adjusted", "significant", "wins", "ties", "losses",
]


def adjusted(p_values: np.ndarray, correction: str) -> np.ndarray:
    """The p-values adjusted over their family (Holm's step-down, Benjamini–Hochberg, none)."""
    if correction == "holm":
        return paired_stats.holm(p_values)
    if correction == "bh":
        return paired_stats.benjamini_hochberg(p_values)
    if correction == "none":
        return np.asarray(p_values, dtype=np.float64)
    raise ValueError(f"unknown correction {correction!r} (expected one of {', '.join(CORRECTIONS)})")


def long_cases(case_metrics: pl.DataFrame, reference: str, metrics: list[str], slices: list[str]) -> pl.DataFrame:
    """Per (run, case, slice, metric) one value, each case sliced by the reference run's locale
    and category (a case is the same case in every run): the input of compare_frame."""
    attributes = case_metrics.filter(pl.col("run_id") == reference).select("case_id", "locale", "category")
    values = case_metrics.select("run_id", "case_id", *metrics).join(attributes, on="case_id", how="inner")
    sliced = pl.concat([
        values.with_columns(pl.lit(name).alias("slice"), SLICE_VALUES[name].alias("slice_value"))
        for name in slices
    ])
    return sliced.unpivot(index=["run_id", "case_id", "slice", "slice_value"], on=metrics,
                          variable_name="metric", value_name="value")


def compare_runs(case_metrics: pl.DataFrame, reference: str, *, metrics: list[str], slices: list[str],
                 test: str = "randomization", correction: str = "holm", alpha: float = 0.05) -> pl.DataFrame:
    """Every other run of `case_metrics` (one k: run_id, case_id, locale, category and the
    metric columns) against `reference`: one row per (run, slice, slice_value, metric)
    (COMPARISON_COLUMNS). The correction runs over every row returned."""
    long = long_cases(case_metrics, reference, metrics, slices)
    if long.filter(pl.col("run_id") != reference).height == 0:
        return pl.DataFrame(schema={c: pl.Float64 for c in COMPARISON_COLUMNS}).cast(
            {"run_id": pl.String, "slice": pl.String, "slice_value": pl.String, "metric": pl.String,
             "significant": pl.Boolean})
    frame = paired_stats.compare_frame(long, reference, test=test)
    p_adjusted = adjusted(frame["p_value"].to_numpy(), correction)
    return frame.with_columns(
        pl.Series("p_adjusted", p_adjusted),
        pl.Series("significant", p_adjusted < alpha),
    ).select(COMPARISON_COLUMNS)


def tied_groups(case_metrics: pl.DataFrame, metric: str, *, test: str = "randomization", correction: str = "holm",
                alpha: float = 0.05) -> list[list[str]]:
    """Groups of runs that no significant difference separates on `metric` over all cases:
    every pair of runs compared on the cases both scored, the correction over the pairs."""
    runs = sorted(case_metrics["run_id"].unique())
    means = {run: float(case_metrics.filter(pl.col("run_id") == run)[metric].mean() or 0.0) for run in runs}
    pairs, p_values = [], []
    for first, second in combinations(runs, 2):
        both = case_metrics.filter(pl.col("run_id") == first).select("case_id", pl.col(metric).alias("a")).join(
            case_metrics.filter(pl.col("run_id") == second).select("case_id", pl.col(metric).alias("b")), on="case_id")
        p_values.append(paired_stats.compare(both["a"].to_numpy(), both["b"].to_numpy(), test=test).p_value)
        pairs.append(frozenset((first, second)))
    significant = [pair for pair, p in zip(pairs, adjusted(np.array(p_values), correction), strict=True) if p < alpha]
    return paired_stats.tied_groups(means, significant) if runs else []


def minimum_detectable_drop(values: pl.Series, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest drop of a slice's mean that a two-sided test at `alpha` detects with
    `power`, for the n and the per-case spread of `values` (the reference's per-case values)."""
    clean = values.drop_nulls().to_numpy()
    return paired_stats.minimum_detectable_drop(paired_stats.baseline_sd(clean), len(clean), alpha=alpha, power=power)
