"""Invariants of the metrics on random rankings and gold sets (hypothesis), on the pure
steps: bounds, hit ≥ recall, hit ≥ nDCG, monotone in k, independent of record order."""

from __future__ import annotations

import random

import polars as pl
from builders import score
from hypothesis import given, settings
from hypothesis import strategies as st
from retrieval_eval.transforms.metrics import NAMES as METRICS

KS = (1, 2, 3, 5, 8)
HEADLINE_K = 4
CARDS = [f"card-{i}" for i in range(12)]

chunks = st.lists(
    st.tuples(st.sampled_from(CARDS), st.integers(0, 3), st.booleans()), max_size=12
)
random_case = st.tuples(chunks, st.lists(st.sampled_from(CARDS), max_size=4))


def as_record(index: int, retrieved, gold) -> dict:
    items = [
        {"id": f"{card}::{n:02d}", "parent_id": card} if with_parent else {"id": card}
        for card, n, with_parent in retrieved
    ]
    return {
        "case_id": f"case-{index}",
        "locale": random.Random(index).choice(["en", "es-419"]),
        "category": "golden",
        "must_cite_one_of": gold,
        "retrieved_context": items,
    }


def case_metrics_of(records: list[dict]) -> pl.DataFrame:
    return score(records, k=HEADLINE_K, ks=KS).view("case_metrics").sort("case_id", "k")


@settings(max_examples=400, deadline=None)
@given(cases=st.lists(random_case, min_size=1, max_size=25), seed=st.integers(0, 2**16))
def test_invariants_hold_on_random_rankings(cases, seed):
    records = [as_record(i, retrieved, gold) for i, (retrieved, gold) in enumerate(cases)]
    metrics = case_metrics_of(records)

    n_labelled = sum(1 for _, gold in cases if gold)
    assert metrics.height == n_labelled * len({HEADLINE_K, *KS})
    for metric in METRICS:
        assert metrics[metric].is_between(0.0, 1.0).all(), metric
    eps = 1e-12
    assert (metrics["hit_at_k"] + eps >= metrics["recall_at_k"]).all()
    assert (metrics["hit_at_k"] + eps >= metrics["ndcg_at_k"]).all()
    assert (metrics["hit_at_k"] + eps >= metrics["reciprocal_rank_at_k"]).all()
    steps = metrics.sort("case_id", "k").group_by("case_id", maintain_order=True).agg(
        pl.col("hit_at_k").diff().min().alias("hit_step"),
        pl.col("recall_at_k").diff().min().alias("recall_step"),
    )
    assert (steps["hit_step"].fill_null(0) >= 0).all()
    assert (steps["recall_step"].fill_null(0) >= 0).all()
    # hit@k is exactly "the first relevant rank is within k".
    entered = metrics["first_relevant_rank"].is_not_null() & (metrics["first_relevant_rank"] <= metrics["k"])
    assert (entered.cast(pl.Float64) == metrics["hit_at_k"]).all()

    shuffled = records[:]
    random.Random(seed).shuffle(shuffled)
    assert case_metrics_of(shuffled).equals(metrics)
