"""Card-level rankings of staged cases (SPEC 2.1–2.3), in Polars.

The staged cases carry each case's retrieved items as a list in rank order
(transforms/staging.py `stage`). Here they become one row per retrieved item with its card,
and each card's first occurrence gets its rank among distinct cards.

Chosen over DuckDB SQL for this step by measurement and by cost growth: first-occurrence
de-duplication of 2M retrieved items is a hash per case here, where the list-space version in
SQL (list_position of each card) is quadratic in the list length — a single record of 300k
items would take minutes. The hash per case is transforms/_card_ranks.c's (0.02 CPU-s for
those 2M items, where Polars' `is_first_distinct().over(case)` took 0.15 on 2 cores); Polars
computes the same ranks where the module was not compiled.
"""

from __future__ import annotations

import numpy as np
import polars as pl

try:
    from . import _card_ranks  # transforms/_card_ranks.c, built at install
except ImportError:  # not compiled here: Polars computes the card ranks (the same figures, more CPU)
    _card_ranks = None

CASES_COLUMNS = [
    "run_id", "case_id", "locale", "category", "question", "n_gold", "n_retrieved", "n_cards",
    "gold_source", "gold", "relevant_ranks", "graded_ranks", "ideal_gains", "top_cards", "top_scores",
]
# `top_cards` keeps a case's first distinct cards, in rank order, down to the headline k or to
# its first relevant card, whichever is deeper, and never below this rank: what the report's
# case explorer lists (a 1,000-deep TREC run would otherwise put every card of every topic in
# the page), kept with the case so the report need not regroup `retrieved`; `top_scores` holds
# the retrieval score of each (its first chunk's, null where the artifact gave none) for a
# graded case, whose explorer shows them beside the grades, and is null for the others.
TOP_CARDS = 50
RANKED_GRADE = pl.Struct({"rank": pl.Int32, "grade": pl.Int64})


def retrieved_items(staged: pl.DataFrame, run_id: str) -> pl.DataFrame:
    """One row per retrieved item (the `retrieved` table, plus case_no: the case's row in
    `staged`), in case order and list order.

    rank is the 1-based list position (2.2); card_id is parent_id when present and
    non-empty, else id (2.1); card_rank is the rank among distinct cards of the first item
    of each card, and null for later sibling chunks of a card already seen (2.3).
    """
    items = (
        staged.select(
            pl.int_range(pl.len(), dtype=pl.UInt32).alias("case_no"),
            "case_id",
            pl.int_ranges(1, pl.col("retrieved_context").list.len() + 1, dtype=pl.Int32).alias("rank"),
            "retrieved_context",
        )
        .explode("rank", "retrieved_context", empty_as_null=False)  # an empty list: no row
        .unnest("retrieved_context")
        .rename({"id": "chunk_id"})
    )
    card = (
        pl.when(pl.col("parent_id").is_not_null() & (pl.col("parent_id") != ""))
        .then(pl.col("parent_id"))
        .otherwise(pl.col("chunk_id"))
    )
    items = items.with_columns(card_id=card)
    return (
        items.with_columns(card_rank=first_card_ranks(items["rank"], items["card_id"]))
        .select(
            pl.lit(run_id).alias("run_id"),
            "case_id",
            "rank",
            "chunk_id",
            "parent_id",
            "card_id",
            "score",
            "card_rank",
            "case_no",
        )
    )


def first_card_ranks(rank: pl.Series, card_id: pl.Series, *, compiled: bool = True) -> pl.Series:
    """Each item's card rank (2.3) of items grouped by case in rank order (`rank` 1 starts a
    case): its rank among the case's distinct cards when it is the first item of its card, null
    for a later one. By transforms/_card_ranks.c when compiled (and `compiled`), else by Polars."""
    if _card_ranks is None or not compiled or card_id.null_count():
        first = pl.col("card_id").is_first_distinct().over(pl.col("rank").eq(1).cum_sum())
        # A running count of first occurrences, less its value just before each case's rank 1,
        # is the card rank within the case.
        seen = pl.col("first").cast(pl.Int32).cum_sum()
        before_case = pl.when(pl.col("rank") == 1).then(seen - pl.col("first").cast(pl.Int32)).forward_fill()
        return (pl.DataFrame({"rank": rank, "card_id": card_id}).with_columns(first=first)
                .select(pl.when(pl.col("first")).then(seen - before_case).alias("card_rank")).to_series())
    ranks = rank.cast(pl.Int32).rechunk().to_numpy()
    views = card_id.rechunk().to_arrow(compat_level=pl.CompatLevel.newest())  # Polars' own layout, no copy
    _, view_buffer, *data = views.buffers()
    out = np.empty(len(ranks), dtype=np.int32)
    _card_ranks.first_card_ranks(ranks, memoryview(view_buffer)[16 * views.offset:16 * (views.offset + len(views))],
                                 data, out)
    ranked = pl.Series("card_rank", out)
    return ranked.to_frame().select(pl.when(pl.col("card_rank") > 0).then(pl.col("card_rank"))).to_series()


def case_rows(staged: pl.DataFrame, retrieved: pl.DataFrame, run_id: str, headline_k: int) -> pl.DataFrame:
    """One row per case (the `cases` table) of `staged`, from `retrieved`, which is
    `retrieved_items(staged)`. Over the whole captured list, among distinct cards:
    top_cards, those in rank order down to `headline_k` or to the first relevant card,
    whichever is deeper, at most TOP_CARDS, and top_scores, their scores (graded cases only);
    relevant_ranks, the ascending ranks
    of the relevant (gold) cards; graded_ranks, {rank, grade} of every retrieved card with a
    grade above 0, by rank; ideal_gains, every
    grade above 0 of the case, descending (the ideal ranking nDCG divides by)."""
    graded_batch = bool((staged["gold_source"] == "relevance").any())
    # scores are kept for graded cases only, where the explorer shows them beside the grades
    firsts = (retrieved.select("case_no", "card_id", "card_rank", *(["score"] if graded_batch else []))
              .filter(pl.col("card_rank").is_not_null()))
    # `retrieved` (retrieved_items') rows are in case order and rank order, so within a case
    # the first occurrences come in card-rank order and the group keeps it (no sort: 16 ms a
    # batch of 500k items)
    scores = [pl.col("score").head(TOP_CARDS).alias("top_scores")] if graded_batch else []
    depth = firsts.group_by("case_no", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("n_cards"),
        pl.col("card_id").head(TOP_CARDS).alias("top_cards"),
        *scores,
    )
    shown = pl.max_horizontal(pl.lit(headline_k), pl.col("relevant_ranks").list.first().fill_null(0))
    numbered = staged.with_columns(pl.int_range(pl.len(), dtype=pl.UInt32).alias("case_no"))
    # Each first occurrence is looked up in its own case's gold list (gathered by case_no):
    # in card-rank order already, with no join of gold to cards and no sort after it.
    relevant = (
        firsts.with_columns(staged["gold"].gather(firsts["case_no"]))
        .filter(pl.col("card_id").is_in(pl.col("gold")))
        .group_by("case_no", maintain_order=True)
        .agg(pl.col("card_rank").alias("relevant_ranks"))
    )
    rows = numbered.join(relevant, on="case_no", how="left", maintain_order="left")
    if graded_batch:
        graded = (
            numbered.select("case_no", "grades")
            .explode("grades")
            .unnest("grades")
            .join(firsts, on=["case_no", "card_id"])
            .sort("case_no", "card_rank")
            .group_by("case_no", maintain_order=True)
            .agg(pl.struct(pl.col("card_rank").alias("rank"), "grade").alias("graded_ranks"))
        )
        rows = rows.join(graded, on="case_no", how="left", maintain_order="left")
        ideal_gains = pl.col("grades").list.eval(pl.element().struct.field("grade").sort(descending=True))
    else:  # every gold card has grade 1: the graded ranks are the relevant ranks, the ideal gains all 1
        rows = rows.with_columns(
            pl.col("relevant_ranks")
            .list.eval(pl.struct(pl.element().alias("rank"), pl.lit(1, pl.Int64).alias("grade")))
            .alias("graded_ranks")
        )
        ideal_gains = pl.lit(1, pl.Int64).repeat_by(pl.col("grades").list.len())
    return (
        rows.join(depth, on="case_no", how="left", maintain_order="left")
        .select(
            pl.lit(run_id).alias("run_id"),
            "case_id",
            "locale",
            "category",
            "question",
            pl.col("gold").list.len().cast(pl.Int64).alias("n_gold"),
            pl.col("retrieved_context").list.len().cast(pl.Int64).alias("n_retrieved"),
            pl.col("n_cards").fill_null(0),
            "gold_source",
            "gold",
            pl.col("relevant_ranks").fill_null(pl.lit([], dtype=pl.List(pl.Int32))),
            pl.col("graded_ranks").fill_null(pl.lit([], dtype=pl.List(RANKED_GRADE))),
            ideal_gains.alias("ideal_gains"),
            pl.col("top_cards").fill_null(pl.lit([], dtype=pl.List(pl.String))).list.head(shown),
            pl.when(pl.col("gold_source") == "relevance")
            .then(pl.col("top_scores").fill_null(pl.lit([], dtype=pl.List(pl.Float64))).list.head(shown))
            .alias("top_scores")
            if graded_batch else pl.lit(None, dtype=pl.List(pl.Float64)).alias("top_scores"),
        )
    )
