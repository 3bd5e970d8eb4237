"""Per-case retrieval metrics at each cutoff k (SPEC 2), computed by sql/case_metrics.sql."""

from __future__ import annotations

from collections.abc import Iterable

import duckdb
import polars as pl

import sql
from transforms import engine
from transforms.errors import InputError

METRICS = ("hit_at_k", "recall_at_k", "ndcg_at_k", "precision_at_k", "reciprocal_rank_at_k")


def cutoffs(headline_k: int, sweep: Iterable[int] = ()) -> list[int]:
    """The union of the headline k and the sweep, ascending (SPEC 2.7)."""
    ks = sorted({headline_k, *sweep})
    if ks[0] < 1:
        raise InputError(f"k must be >= 1, got {ks[0]}")
    return ks


def case_metrics(cases: pl.DataFrame, ks: list[int], con: duckdb.DuckDBPyConnection | None = None) -> pl.DataFrame:
    """One row per (labelled case, k) of a run's `cases` rows, by sql/case_metrics.sql, on
    `con` (a connection of its own when not given)."""
    own = con is None
    con = engine.connect() if own else con
    try:
        con.register("cases", cases)
        return con.sql(sql.load("case_metrics"), params={"ks": ks}).pl()
    finally:
        if own:
            con.close()
        else:
            con.unregister("cases")


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
