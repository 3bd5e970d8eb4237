"""Paired comparison of runs (SPEC 8, 11 and 13): every run against a reference on the cases
both scored, per slice and metric, with the paired interval, the test's p-value, the adjusted
p-value over the family compared, significance, and wins / ties / losses. The gate, the
compare command and the report's "what changed" all read this one model; the statistics are
transforms/paired_stats.py."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import polars as pl

from . import letter_display, paired_stats
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


PAIR_COLUMNS = ["a", "b", "p_value", "p_adjusted", "significant"]
CORRECTION_NAMES = {"holm": "Holm", "bh": "Benjamini–Hochberg", "none": "no correction"}


def p_family(correction: str, size: int, noun: str = "", tail: str = "") -> str:
    """The family an adjusted p-value was corrected over, in words: e.g. "Holm over the 12
    gated lines" (`noun` names what was counted, in the singular, and `tail` what follows it),
    or without `noun` the short form a chart's legend has room for ("Holm over 12")."""
    counted = f"{size} {noun}{'' if size == 1 else 's'}{tail}"
    if correction == "none":
        return f"not adjusted ({counted})" if noun else "not adjusted"
    return f"{CORRECTION_NAMES[correction]} over the {counted}" if noun else f"{CORRECTION_NAMES[correction]} over {size}"


def adjusted_by(correction: str, family: str) -> str:
    """How a p-value of `family` (p_family's words) reads after "p": "adjusted by Holm over
    …", or "not adjusted (…)"."""
    return family if correction == "none" else f"adjusted by {family}"


def pairwise(case_metrics: pl.DataFrame, metric: str, *, test: str = "randomization", correction: str = "holm",
             alpha: float = 0.05) -> pl.DataFrame:
    """Every pair of runs of `case_metrics` (one k) compared on `metric` over the cases both
    scored: one row per pair (PAIR_COLUMNS; a before b in run id order), the correction over
    the pairs."""
    runs = sorted(case_metrics["run_id"].unique())
    rows = []
    for first, second in combinations(runs, 2):
        both = case_metrics.filter(pl.col("run_id") == first).select("case_id", pl.col(metric).alias("a")).join(
            case_metrics.filter(pl.col("run_id") == second).select("case_id", pl.col(metric).alias("b")), on="case_id")
        p = paired_stats.compare(both["a"].to_numpy(), both["b"].to_numpy(), test=test).p_value
        rows.append({"a": first, "b": second, "p_value": p})
    frame = pl.DataFrame(rows, schema={"a": pl.String, "b": pl.String, "p_value": pl.Float64})
    p_adjusted = adjusted(frame["p_value"].to_numpy(), correction)
    return frame.with_columns(pl.Series("p_adjusted", p_adjusted, dtype=pl.Float64),
                              pl.Series("significant", p_adjusted < alpha, dtype=pl.Boolean)).select(PAIR_COLUMNS)


def tied_groups(case_metrics: pl.DataFrame, metric: str, pairs: pl.DataFrame) -> list[list[str]]:
    """The compact letter display (transforms/letter_display.py) of the runs by their mean of
    `metric`, under the significant rows of `pairs` (from `pairwise`)."""
    means = {run: float(case_metrics.filter(pl.col("run_id") == run)[metric].mean() or 0.0)
             for run in case_metrics["run_id"].unique()}
    significant = [frozenset((r["a"], r["b"])) for r in pairs.filter(pl.col("significant")).iter_rows(named=True)]
    return letter_display.tied_groups(means, significant)
