"""Every flipped case carries a reason, the first that applies in SPEC 8's order, seen from
its miss: gold_changed, gold_not_in_kb, empty_retrieval, not_retrieved, below_k."""

from __future__ import annotations

import polars as pl
import pytest
from retrieval_eval.transforms.flips import REASONS, flipped_cases, reasons_by_slice

COLUMNS = {"case_id": pl.String, "locale": pl.String, "category": pl.String, "hit_at_k": pl.Float64,
           "first_relevant_rank": pl.Int64, "gold": pl.List(pl.String), "n_retrieved": pl.Int64}


def side(*rows) -> pl.DataFrame:
    return pl.DataFrame([dict(zip(COLUMNS, row, strict=True)) for row in rows], schema=COLUMNS)


HIT = ("c", "en", "golden", 1.0, 1, ["A"], 5)


@pytest.mark.parametrize("after, unknown, reason, rank_after", [
    # gold A → B and now a miss: the gold changed, whatever else is true
    (("c", "en", "golden", 0.0, None, ["B"], 0), None, "gold_changed", None),
    # gold A unchanged, A no longer a KB card
    (("c", "en", "golden", 0.0, None, ["A"], 5), {"A"}, "gold_not_in_kb", None),
    # nothing retrieved at all
    (("c", "en", "golden", 0.0, None, ["A"], 0), set(), "empty_retrieval", None),
    # retrieved 5 items, none of them A
    (("c", "en", "golden", 0.0, None, ["A"], 5), set(), "not_retrieved", None),
    # A retrieved at rank 7, beyond k
    (("c", "en", "golden", 0.0, 7, ["A"], 9), set(), "below_k", 7),
])
def test_each_reason_on_a_crafted_case(after, unknown, reason, rank_after):
    [flip] = flipped_cases(side(HIT), side(after), unknown).to_dicts()
    assert flip == {"case_id": "c", "locale": "en", "category": "golden", "from": "hit", "to": "miss",
                    "reason": reason, "rank_before": 1, "rank_after": rank_after}


def test_a_miss_to_hit_flip_is_explained_by_its_earlier_miss():
    before = side(("c", "en", "golden", 0.0, 6, ["A"], 9))
    [flip] = flipped_cases(before, side(HIT), set()).to_dicts()
    assert (flip["from"], flip["to"], flip["reason"], flip["rank_before"]) == ("miss", "hit", "below_k", 6)


def test_unchanged_cases_and_cases_in_one_run_only_do_not_flip():
    before = side(HIT, ("gone", "en", "golden", 1.0, 1, ["A"], 5))
    after = side(HIT, ("new", "en", "golden", 0.0, None, ["A"], 5))
    assert flipped_cases(before, after, None).height == 0


def test_without_a_kb_or_a_gold_list_those_reasons_are_not_claimed():
    # A format-1 baseline kept no gold ids: gold_changed cannot be told; no KB: nor gold_not_in_kb.
    before = side(HIT).with_columns(pl.lit(None, dtype=pl.List(pl.String)).alias("gold"))
    [flip] = flipped_cases(before, side(("c", "en", "golden", 0.0, None, ["B"], 5)), None).to_dicts()
    assert flip["reason"] == "not_retrieved"


def test_reasons_are_counted_per_slice():
    before = side(*[(f"c{i}", loc, "golden", 1.0, 1, ["A"], 5) for i, loc in enumerate(["en", "en", "pt-BR"])])
    after = side(("c0", "en", "golden", 0.0, None, ["A"], 0), ("c1", "en", "golden", 0.0, 6, ["A"], 9),
                 ("c2", "pt-BR", "golden", 0.0, 6, ["A"], 9))
    counts = reasons_by_slice(flipped_cases(before, after, set()))
    as_dict = {(r["slice"], r["slice_value"], r["reason"]): r["n"] for r in counts.iter_rows(named=True)}
    assert as_dict == {("all", "all", "empty_retrieval"): 1, ("all", "all", "below_k"): 2,
                       ("locale", "en", "empty_retrieval"): 1, ("locale", "en", "below_k"): 1,
                       ("locale", "pt-BR", "below_k"): 1, ("category", "golden", "empty_retrieval"): 1,
                       ("category", "golden", "below_k"): 2}
    assert set(counts["reason"]) <= set(REASONS)
