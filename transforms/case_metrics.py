"""Per-case retrieval metrics at each cutoff k (SPEC 2), computed by sql/case_metrics.sql."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

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


def write_case_metrics(cases_path: Path, ks: list[int], out_path: Path) -> int:
    """One row per (labelled case, k) from a run's `cases` Parquet; returns the row count."""
    con = engine.connect()
    con.execute("create temp table cases as select * from read_parquet($path)", {"path": str(cases_path)})
    relation = con.sql(sql.load("case_metrics"), params={"ks": ks})
    relation.write_parquet(str(out_path), compression="zstd")
    n_rows = con.execute("select count(*) from read_parquet($path)", {"path": str(out_path)}).fetchone()[0]
    con.close()
    return n_rows


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
