"""Per-case retrieval metrics at each cutoff k (SPEC 2), computed by sql/case_metrics.sql,
and the composed evaluation of one batch of staged cases: rankings → cases → case metrics →
partial sums. The job (flows/job/job.py) and the Python API (flows/commands/api.py) both call these."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import duckdb
import polars as pl

from .. import sql
from .aggregates import slice_partials
from .errors import InputError
from .metrics import MAX_K
from .rankings import case_rows
from .run_summary import IDENTITY_COUNTS


def cutoffs(headline_k: int, sweep: Iterable[int] = ()) -> list[int]:
    """The union of the headline k and the sweep, ascending (SPEC 2.7)."""
    ks = sorted({headline_k, *sweep})
    if ks[0] < 1 or ks[-1] > MAX_K:
        raise InputError(f"k must be an integer in [1, {MAX_K}], got {ks[0] if ks[0] < 1 else ks[-1]}")
    return ks


# The `cases` columns sql/case_metrics.sql reads: DuckDB is handed these alone, not the
# explorer's lists (top_cards, gold), which it would otherwise convert with every batch.
METRIC_INPUTS = ["run_id", "case_id", "locale", "category", "n_gold", "n_cards", "relevant_ranks", "graded_ranks",
                 "ideal_gains"]


def case_metrics(cases: pl.DataFrame, ks: list[int], con: duckdb.DuckDBPyConnection | None = None) -> pl.DataFrame:
    """One row per (labelled case, k) of a run's `cases` rows, by sql/case_metrics.sql, on
    `con` (an in-memory connection of its own when not given)."""
    own = con is None
    con = duckdb.connect() if own else con
    try:
        con.register("cases", cases.select(METRIC_INPUTS))
        return con.sql(sql.load("case_metrics"), params={"ks": ks}).pl()
    finally:
        if own:
            con.close()
        else:
            con.unregister("cases")


@dataclass(frozen=True)
class ScoredCases:
    """What one batch of staged cases becomes, beside its `retrieved` rows: its `cases` rows,
    their `case_metrics` rows, the partial sums of its aggregates and its counts."""

    cases: pl.DataFrame
    case_metrics: pl.DataFrame
    partials: pl.DataFrame
    counts: dict[str, int]


def scored_cases(
    staged: pl.DataFrame,
    retrieved: pl.DataFrame,
    run_id: str,
    headline_k: int,
    ks: list[int],
    con: duckdb.DuckDBPyConnection | None = None,
) -> ScoredCases:
    """The `cases` rows of staged cases (their `retrieved` rows made by
    transforms/rankings.py `retrieved_items`), their metrics at each k of `ks` (the headline
    k among them) and partial sums."""
    cases = case_rows(staged, retrieved, run_id, headline_k)
    metrics = case_metrics(cases, ks, con)
    return ScoredCases(cases, metrics, slice_partials(metrics), {**case_counts(cases), **identity_counts(staged)})


def case_counts(cases: pl.DataFrame) -> dict[str, int]:
    """The counts of `cases` rows the `runs` row adds up over batches."""
    labelled = pl.col("n_gold") > 0
    row = cases.select(
        pl.len().alias("n_cases"),
        labelled.sum().alias("n_labelled"),
        (labelled & (pl.col("n_retrieved") > 0)).sum().alias("n_labelled_with_retrieval"),
        pl.col("n_cards").max().fill_null(0).alias("max_depth"),
    ).row(0, named=True)
    return {name: int(value or 0) for name, value in row.items()}


def identity_counts(staged: pl.DataFrame) -> dict[str, int]:
    """The identity counts (transforms/run_summary.py IDENTITY_COUNTS) of staged cases that carry
    them (another tool's run, SPEC 15), summed; none for cases that do not."""
    present = [name for name in IDENTITY_COUNTS if name in staged.columns]
    if not present:
        return {}
    row = staged.select(pl.col(name).sum() for name in present).row(0, named=True)
    return {name: int(value or 0) for name, value in row.items()}
