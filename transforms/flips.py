"""Cases whose hit changed between two runs (SPEC 8 and 13)."""

from __future__ import annotations

import polars as pl

HIT_TO_MISS, MISS_TO_HIT = "hit → miss", "miss → hit"


def hit_changes(before: pl.DataFrame, after: pl.DataFrame) -> pl.DataFrame:
    """Cases in both frames (case_id, locale, category, hit_at_k at one k each) whose hit
    changed: case_id, locale, category (from `before`) and change, sorted by change, case."""
    return (
        before.select("case_id", "locale", "category", "hit_at_k")
        .join(after.select("case_id", pl.col("hit_at_k").alias("hit_after")), on="case_id")
        .filter(pl.col("hit_at_k") != pl.col("hit_after"))
        .select(
            "case_id",
            "locale",
            "category",
            pl.when(pl.col("hit_after") > pl.col("hit_at_k"))
            .then(pl.lit(MISS_TO_HIT))
            .otherwise(pl.lit(HIT_TO_MISS))
            .alias("change"),
        )
        .sort("change", "case_id")
    )
