"""Cases whose hit changed between two runs, each with the reason it missed (SPEC 8 and 13).

A flip is looked at from its miss: the run after for hit → miss, the run before for
miss → hit. The reason is the first that applies, in this order:

- `gold_changed`: the case's gold cards differ between the two runs;
- `gold_not_in_kb`: a gold card of the missing side is not a card of the knowledge base;
- `empty_retrieval`: the missing side retrieved nothing at all;
- `not_retrieved`: no gold card anywhere in what it retrieved;
- `below_k`: a gold card was retrieved, first at rank r > k (r is the side's first_relevant_rank).
"""

from __future__ import annotations

import polars as pl

HIT_TO_MISS, MISS_TO_HIT = "hit → miss", "miss → hit"
HIT_MISS, MISS_HIT = "hit-miss", "miss-hit"  # the same, as the JSON outputs and the explorer write them
REASONS = ("gold_changed", "gold_not_in_kb", "empty_retrieval", "not_retrieved", "below_k")
SIDE_COLUMNS = ("hit_at_k", "first_relevant_rank", "gold", "n_retrieved")


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


def _side(frame: pl.DataFrame, suffix: str) -> pl.DataFrame:
    columns = [pl.col(c).alias(f"{c}_{suffix}") for c in SIDE_COLUMNS if c in frame.columns]
    missing = [pl.lit(None).alias(f"{c}_{suffix}") for c in SIDE_COLUMNS if c not in frame.columns]
    return frame.select("case_id", "locale", "category", *columns, *missing) if suffix == "before" else \
        frame.select("case_id", *columns, *missing)


def flipped_cases(before: pl.DataFrame, after: pl.DataFrame, unknown_gold: set[str] | None = None) -> pl.DataFrame:
    """One row per case in both runs whose hit changed, with its reason: case_id, locale,
    category, from, to, reason, rank_before, rank_after (first_relevant_rank on each side).

    `before` and `after` are per-case rows at one k: case_id, locale, category, hit_at_k,
    first_relevant_rank, gold (list of card ids; null when unknown, as in a format-1
    baseline) and n_retrieved (null when unknown); `unknown_gold` holds the card ids that
    are not KB cards (None: no KB was checked)."""
    unknown = pl.lit(sorted(unknown_gold or []), dtype=pl.List(pl.String))
    joined = _side(before, "before").join(_side(after, "after"), on="case_id").filter(
        pl.col("hit_at_k_before") != pl.col("hit_at_k_after")
    )
    to_miss = pl.col("hit_at_k_after") < pl.col("hit_at_k_before")

    def missing(column: str) -> pl.Expr:  # the column of the missing side
        return pl.when(to_miss).then(pl.col(f"{column}_after")).otherwise(pl.col(f"{column}_before"))

    gold_changed = (
        pl.col("gold_before").is_not_null()
        & pl.col("gold_after").is_not_null()
        & (pl.col("gold_before").list.sort() != pl.col("gold_after").list.sort())
    )
    reason = (
        pl.when(gold_changed).then(pl.lit("gold_changed"))
        .when(pl.lit(unknown_gold is not None) & missing("gold").list.set_intersection(unknown).list.len().gt(0))
        .then(pl.lit("gold_not_in_kb"))
        .when(missing("n_retrieved").fill_null(1) == 0).then(pl.lit("empty_retrieval"))
        .when(missing("first_relevant_rank").is_null()).then(pl.lit("not_retrieved"))
        .otherwise(pl.lit("below_k"))
    )
    return joined.select(
        "case_id",
        "locale",
        "category",
        pl.when(to_miss).then(pl.lit("hit")).otherwise(pl.lit("miss")).alias("from"),
        pl.when(to_miss).then(pl.lit("miss")).otherwise(pl.lit("hit")).alias("to"),
        reason.alias("reason"),
        pl.col("first_relevant_rank_before").cast(pl.Int64).alias("rank_before"),
        pl.col("first_relevant_rank_after").cast(pl.Int64).alias("rank_after"),
    ).sort("from", "case_id", descending=[False, False])


def reasons_by_slice(flips: pl.DataFrame) -> pl.DataFrame:
    """Hit → miss flips counted per reason in each slice (all, locale, category): slice,
    slice_value, reason, n."""
    to_miss = flips.filter(pl.col("to") == "miss")
    parts = [
        to_miss.group_by("reason").agg(pl.len().alias("n")).with_columns(
            pl.lit("all").alias("slice"), pl.lit("all").alias("slice_value"))
    ]
    for slice_ in ("locale", "category"):
        parts.append(to_miss.group_by(slice_, "reason").agg(pl.len().alias("n"))
                     .rename({slice_: "slice_value"}).with_columns(pl.lit(slice_).alias("slice")))
    order = pl.col("reason").replace_strict({r: i for i, r in enumerate(REASONS)}, return_dtype=pl.Int8)
    return (pl.concat([p.select("slice", "slice_value", "reason", pl.col("n").cast(pl.Int64)) for p in parts])
            .sort("slice", "slice_value", order))
