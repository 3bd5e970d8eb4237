"""Per-slice aggregates of case_metrics (SPEC 2.8), merged from partial sums.

A partition of cases yields partial sums (n, sum) per (run, k, slice, metric); partials of
any partitioning add up to the same totals, so scale-out never averages averages. The sums
are of integers (each value in units of 2^-60, FIXED_POINT): exact, so every order of
addition — Polars' threads, any partitioning, Dask — gives the same bits.
The interval is the Wilson score interval at 95%: exact in spirit for hit_at_k (a
proportion) and conservative for the other metrics, which lie in [0, 1] and so have
variance at most mean·(1 − mean) — the Bernoulli variance Wilson assumes. Closed form,
deterministic, defined for n = 1 and never collapsing to a point at 0 or 1.
"""

from __future__ import annotations

import polars as pl

from .metrics import NAMES as METRICS

Z_95 = 1.959963984540054
# A metric value in [0, 1] as an integer of 2^-60 units (exact for values from 2^-8 up; below,
# at most 2^-60 off): 1M cases sum to under 2^80, well inside Int128.
FIXED_POINT = 2**60
KEYS = ["run_id", "k", "slice", "slice_value", "metric"]
# A case's value in each slice, from its locale and category; the order is the report's.
SLICE_VALUES = {
    "all": pl.lit("all"),
    "category": pl.col("category"),
    "locale": pl.col("locale"),
    "locale_category": pl.concat_str(pl.col("locale"), pl.lit("/"), pl.col("category")),
}
SLICES = tuple(SLICE_VALUES)


def slice_rows(frame: pl.DataFrame, slice_: str, value: str) -> pl.DataFrame:
    """The rows of `frame` in one value of a slice. Filtered lazily: eager Polars 2.1 fails
    ("filter predicate length of 2") on a frame of 16,384 rows or more when the predicate
    reads no column, as slice `all`'s literal does."""
    return frame.lazy().filter(SLICE_VALUES[slice_] == value).collect()


def slice_partials(case_metrics: pl.DataFrame) -> pl.DataFrame:
    """Partial sums (n, sum) per (run_id, k, slice, slice_value, metric) of some cases.

    Cases are first summed into (run, k, locale, category) cells, the finest slice; every
    other slice is a sum of cells. Memory stays proportional to the cases, not to cases ×
    slices × metrics.
    """
    cells = case_metrics.group_by("run_id", "k", "locale", "category").agg(
        *[pl.col(m).count().alias(f"n__{m}") for m in METRICS],
        *[(pl.col(m) * FIXED_POINT).cast(pl.Int128).sum().alias(f"sum__{m}") for m in METRICS],
    )
    sums = [c for c in cells.columns if c.startswith(("n__", "sum__"))]
    per_slice = pl.concat(
        [
            cells.group_by("run_id", "k", value.alias("slice_value"))
            .agg(pl.col(sums).sum())
            .with_columns(pl.lit(name).alias("slice"))
            for name, value in SLICE_VALUES.items()
        ],
        how="vertical_relaxed",
    )
    return pl.concat(
        [
            per_slice.select(
                "run_id",
                "k",
                "slice",
                "slice_value",
                pl.lit(metric).alias("metric"),
                pl.col(f"n__{metric}").cast(pl.UInt32).alias("n"),
                pl.col(f"sum__{metric}").alias("sum"),
            )
            for metric in METRICS
        ]
    )


def merge_partials(partials: list[pl.DataFrame]) -> pl.DataFrame:
    """Add up partial sums from any partitioning of the same cases."""
    return pl.concat(partials).group_by(KEYS).agg(pl.col("n").sum(), pl.col("sum").sum())


def aggregates(partials: pl.DataFrame) -> pl.DataFrame:
    """The `aggregates` table: mean, n and a 95% Wilson interval per slice and metric."""
    n = pl.col("n").cast(pl.Float64)
    p = pl.col("sum").cast(pl.Float64) / FIXED_POINT / n
    z2 = Z_95 * Z_95
    denominator = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denominator
    half = Z_95 * ((p * (1 - p)).clip(lower_bound=0) / n + z2 / (4 * n * n)).sqrt() / denominator
    slice_order = pl.col("slice").replace_strict(
        {name: i for i, name in enumerate(SLICES)}, return_dtype=pl.Int8
    )
    metric_order = pl.col("metric").replace_strict(
        {name: i for i, name in enumerate(METRICS)}, return_dtype=pl.Int8
    )
    return (
        partials.with_columns(
            mean=p,
            ci_low=(center - half).clip(0.0, 1.0),
            ci_high=(center + half).clip(0.0, 1.0),
        )
        .sort(["run_id", "k", slice_order, "slice_value", metric_order])
        .select(*KEYS, "mean", "n", "ci_low", "ci_high")
    )
