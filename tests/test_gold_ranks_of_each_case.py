"""The `cases` rows' rankings (transforms/rankings.py `case_rows`, SPEC 2.1–2.4): a case's
relevant ranks are its own gold cards' ranks among its de-duplicated cards, a card that is gold
in another case of the batch never counts, and ungraded gold has one ideal gain of 1 per gold
card, whether the batch holds graded cases (grades read case by case) or none (the shortcut
for a batch without grades). Expected rows worked out by hand beside each case."""

from __future__ import annotations

import polars as pl
from retrieval_eval.transforms.rankings import case_rows, retrieved_items
from retrieval_eval.transforms.staging import STAGED_SCHEMA

RANK_COLUMNS = ["case_id", "n_cards", "relevant_ranks", "graded_ranks", "ideal_gains", "top_cards"]


def item(chunk_id: str, parent_id: str | None, score: float) -> dict:
    return {"id": chunk_id, "parent_id": parent_id, "score": score}


def ungraded(case_id: str, gold: list[str], retrieved: list[dict]) -> dict:
    return {"case_id": case_id, "locale": "en", "category": "golden", "question": None,
            "gold_source": "must_cite_one_of", "gold": gold, "grades": [{"card_id": g, "grade": 1} for g in gold],
            "retrieved_context": retrieved}


UNGRADED = [
    # A::00 and A::01 are one card (rank 1), B rank 2, X rank 3 (SPEC 2.3's example): gold {A, X}.
    ungraded("siblings", ["A", "X"], [item("A::00", "A", 0.9), item("A::01", "A", 0.8), item("B::00", "B", 0.7),
                                      item("X::00", "X", 0.6)]),
    # X is gold in "siblings", not here: it is retrieved at rank 1 and is no hit.
    ungraded("another-case-gold", ["B"], [item("X::00", "X", 0.9), item("C", None, 0.8)]),
    # No parent_id (or an empty one): the item's own id is the card.
    ungraded("gold-not-retrieved", ["Z"], [item("C", "", 0.9), item("D", None, 0.8)]),
    ungraded("empty-retrieval", ["Q"], []),
    ungraded("unlabelled", [], [item("A::00", "A", 0.9)]),
]
UNGRADED_EXPECTED = [
    {"case_id": "siblings", "n_cards": 3, "relevant_ranks": [1, 3],
     "graded_ranks": [{"rank": 1, "grade": 1}, {"rank": 3, "grade": 1}], "ideal_gains": [1, 1],
     "top_cards": ["A", "B", "X"]},
    {"case_id": "another-case-gold", "n_cards": 2, "relevant_ranks": [], "graded_ranks": [], "ideal_gains": [1],
     "top_cards": ["X", "C"]},
    {"case_id": "gold-not-retrieved", "n_cards": 2, "relevant_ranks": [], "graded_ranks": [], "ideal_gains": [1],
     "top_cards": ["C", "D"]},
    {"case_id": "empty-retrieval", "n_cards": 0, "relevant_ranks": [], "graded_ranks": [], "ideal_gains": [1],
     "top_cards": []},
    {"case_id": "unlabelled", "n_cards": 1, "relevant_ranks": [], "graded_ranks": [], "ideal_gains": [],
     "top_cards": ["A"]},
]
# Graded: G2 (grade 1) at rank 1, G1 (grade 3) at rank 2; the ideal order puts 3 first.
GRADED = {"case_id": "graded", "locale": "en", "category": "golden", "question": None, "gold_source": "relevance",
          "gold": ["G1", "G2"], "grades": [{"card_id": "G1", "grade": 3}, {"card_id": "G2", "grade": 1}],
          "retrieved_context": [item("G2::00", "G2", 0.9), item("G1::00", "G1", 0.8)]}
GRADED_EXPECTED = {"case_id": "graded", "n_cards": 2, "relevant_ranks": [1, 2],
                   "graded_ranks": [{"rank": 1, "grade": 1}, {"rank": 2, "grade": 3}], "ideal_gains": [3, 1],
                   "top_cards": ["G2", "G1"]}


def ranked(records: list[dict]) -> list[dict]:
    staged = pl.DataFrame(records, schema=STAGED_SCHEMA)
    rows = case_rows(staged, retrieved_items(staged, "run"), "run", headline_k=10)
    return rows.select(RANK_COLUMNS).to_dicts()


def test_relevant_ranks_are_each_cases_own_gold_among_its_distinct_cards():
    assert ranked(UNGRADED) == UNGRADED_EXPECTED


def test_ungraded_cases_rank_the_same_in_a_batch_with_grades():
    assert ranked([GRADED, *UNGRADED]) == [GRADED_EXPECTED, *UNGRADED_EXPECTED]
