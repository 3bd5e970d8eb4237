"""One test per metric rule of SPEC 2, each on a tiny fixture whose expected values are
worked out by hand in the comments beside them. The rules are properties of the pure steps
(staging, rankings, sql/case_metrics.sql, aggregates), scored in memory; the rule that the
manifest sets the headline k and --k overrides it is the job's, run for real."""

from __future__ import annotations

import math

import polars as pl
import pytest
from builders import Evaluated, case, chunk, evaluate, job_options, write_run
from retrieval_eval.transforms.report import run_warnings


def log2(x: float) -> float:
    return math.log(x, 2)


def test_rule_2_1_card_identity_is_parent_id_else_id(scored_cases):
    # Cards: A (parent of A::00), B (no parent_id), C::00 (empty parent_id → its own id).
    retrieved = [chunk("A::00", "A"), chunk("B"), chunk("C::00", "")]
    wh = scored_cases([
        case("by-parent", retrieved, ["A"]),      # A is the card at rank 1
        case("by-own-id", retrieved, ["C::00"]),  # C::00 is the card at rank 3
        case("chunk-id-is-not-the-card", retrieved, ["A::00"]),  # A::00's card is A: no hit
    ])
    assert wh.metrics("by-parent", 4)["first_relevant_rank"] == 1
    assert wh.metrics("by-own-id", 4)["first_relevant_rank"] == 3
    assert wh.metrics("chunk-id-is-not-the-card", 4)["hit_at_k"] == 0.0
    cards = wh.view("retrieved").filter(pl.col("case_id") == "by-parent").sort("rank")["card_id"].to_list()
    assert cards == ["A", "B", "C::00"]


def test_rule_2_2_rank_is_list_position_not_score(scored_cases):
    # Scores rise down the list; the list order still ranks G first, so RR = 1/1.
    retrieved = [chunk("G::00", "G", 0.1), chunk("X::00", "X", 0.5), chunk("Y::00", "Y", 0.9)]
    wh = scored_cases([case("c", retrieved, ["G"])], ks=[1])
    row = wh.metrics("c", 1)
    assert row["hit_at_k"] == 1.0
    assert row["reciprocal_rank_at_k"] == 1.0


def test_rule_2_3_siblings_are_deduplicated_before_the_cutoff(scored_cases):
    # SPEC example: [A::00, A::01, B::00, X::00], gold {X} → distinct cards A, B, X: X at rank 3.
    retrieved = [chunk("A::00", "A"), chunk("A::01", "A"), chunk("B::00", "B"), chunk("X::00", "X")]
    wh = scored_cases([case("c", retrieved, ["X"])], ks=[2, 3])
    assert wh.metrics("c", 2)["hit_at_k"] == 0.0  # first 2 distinct cards: A, B
    assert wh.metrics("c", 3)["hit_at_k"] == 1.0
    assert wh.metrics("c", 4)["first_relevant_rank"] == 3
    assert wh.metrics("c", 4)["reciprocal_rank_at_k"] == pytest.approx(1 / 3)
    ranks = wh.view("retrieved").sort("rank")["card_rank"].to_list()
    assert ranks == [1, None, 2, 3]  # the sibling A::01 has no card rank


def test_cases_keep_their_first_distinct_cards_in_rank_order(scored_cases):
    # 60 distinct cards c00..c59, each as two sibling chunks, gold c55 at distinct rank 56: the
    # case keeps c00..c49 (TOP_CARDS = 50, transforms/rankings.py) in rank order, and n_cards
    # counts all 60. A case keeps its cards down to the headline k (4) or to its first gold
    # card, whichever is deeper: ten cards with gold at rank 7 keep 7, with no gold retrieved 4.
    retrieved = [chunk(f"c{i:02d}::{part}", f"c{i:02d}") for i in range(60) for part in (0, 1)]
    ten = [chunk(f"c{i:02d}") for i in range(10)]
    wh = scored_cases([case("deep", retrieved, ["c55"]), case("short", [chunk("b::1", "b"), chunk("a")], ["a"]),
                         case("gold-at-7", ten, ["c06"]), case("gold-missed", ten, ["x"]),
                         case("gold-at-2", ten, ["c01", "c08"])], k=4)
    rows = {row["case_id"]: row for row in wh.view("cases").iter_rows(named=True)}
    assert rows["deep"]["top_cards"] == [f"c{i:02d}" for i in range(50)] and rows["deep"]["n_cards"] == 60
    assert rows["short"]["top_cards"] == ["b", "a"] and rows["short"]["n_cards"] == 2
    assert rows["gold-at-7"]["top_cards"] == [f"c{i:02d}" for i in range(7)] and rows["gold-at-7"]["n_cards"] == 10
    assert rows["gold-missed"]["top_cards"] == [f"c{i:02d}" for i in range(4)]
    assert rows["gold-at-2"]["top_cards"] == [f"c{i:02d}" for i in range(4)]


def test_a_graded_case_keeps_its_listed_cards_scores_and_a_binary_case_none(scored_cases):
    # The explorer shows retrieval scores beside a graded case's grades: each listed card's
    # first chunk's score (A::01's 0.8 is a later sibling), null where the item had none; a
    # binary case keeps none (top_scores null), in a batch with graded cases and without.
    graded = case("graded", [chunk("A::00", "A", 0.9), chunk("A::01", "A", 0.8), chunk("B"), chunk("C", score=0.5)],
                  relevance={"C": 2})
    binary = case("binary", [chunk("A", score=0.7)], ["A"])
    mixed = {r["case_id"]: r["top_scores"] for r in scored_cases([graded, binary], k=2).view("cases").iter_rows(named=True)}
    assert mixed == {"graded": [0.9, None, 0.5], "binary": None}  # down to the first relevant card, rank 3
    alone = scored_cases([binary], k=2).view("cases")
    assert alone["top_scores"].to_list() == [None]


def test_rule_2_4_relevant_ids_override_must_cite_and_gold_is_deduplicated(scored_cases):
    retrieved = [chunk("A::00", "A"), chunk("B::00", "B")]
    wh = scored_cases([
        # relevant_ids {B} overrides must_cite {Z}: hit at rank 2.
        case("override", retrieved, ["Z"], relevant_ids=["B"]),
        # relevant_ids null → must_cite_one_of {A}.
        case("null-relevant", retrieved, ["A"], relevant_ids=None),
        # gold [A, A, B] de-duplicates to {A, B}: recall@4 = 2 / 2.
        case("dup-gold", retrieved, ["A", "A", "B"]),
    ])
    assert wh.metrics("override", 4)["first_relevant_rank"] == 2
    assert wh.metrics("null-relevant", 4)["first_relevant_rank"] == 1
    dup = wh.metrics("dup-gold", 4)
    assert dup["n_gold"] == 2 and dup["recall_at_k"] == 1.0


@pytest.mark.parametrize("gold_field", [{}, {"must_cite_one_of": None}, {"must_cite_one_of": []},
                                        {"must_cite_one_of": ["A"], "relevant_ids": []}])
def test_rule_2_4_empty_gold_contributes_no_rows(scored_cases, gold_field):
    retrieved = [chunk("A::00", "A")]
    wh = scored_cases([case("labelled", retrieved, ["A"]), case("unlabelled", retrieved, **gold_field)])
    metrics = wh.view("case_metrics")
    assert metrics["case_id"].unique().to_list() == ["labelled"]
    assert wh.view("runs")["n_labelled"].to_list() == [1]
    # The slice mean is over the labelled case only: 1.0, not 0.5 and not 1.0 over n=2.
    hit_all = wh.view("aggregates").filter((pl.col("slice") == "all") & (pl.col("metric") == "hit_at_k"))
    assert hit_all["mean"].to_list() == [1.0] and hit_all["n"].to_list() == [1]


def test_rule_2_5_labelled_case_with_empty_retrieval_scores_zero_and_counts(scored_cases):
    wh = scored_cases([
        case("empty", [], ["A"]),
        case("adversarial-with-gold", [chunk("A::00", "A")], ["A"], category="adversarial"),
    ])
    empty = wh.metrics("empty", 4)
    assert [empty[m] for m in ("hit_at_k", "recall_at_k", "ndcg_at_k", "precision_at_k", "reciprocal_rank_at_k")] == [0.0] * 5
    assert empty["first_relevant_rank"] is None
    assert wh.metrics("adversarial-with-gold", 4)["hit_at_k"] == 1.0
    hit_all = wh.view("aggregates").filter((pl.col("slice") == "all") & (pl.col("metric") == "hit_at_k"))
    assert hit_all.row(0, named=True)["n"] == 2 and hit_all.row(0, named=True)["mean"] == 0.5


def test_rule_2_6_metric_formulas_by_hand(scored_cases):
    # gold {A, B, C}; list A, X, B, Y (all distinct cards) at k = 4:
    #   hits = 2 (A at 1, B at 3)      hit = 1      recall = 2/3      precision = 2/4
    #   DCG  = 1/log2(2) + 1/log2(4) = 1 + 0.5 = 1.5
    #   IDCG = 1/log2(2) + 1/log2(3) + 1/log2(4) = 2.130930
    #   nDCG = 1.5 / 2.130930 = 0.703918      RR = 1/1
    retrieved = [chunk("A::00", "A"), chunk("X::00", "X"), chunk("B::00", "B"), chunk("Y::00", "Y")]
    wh = scored_cases([case("c", retrieved, ["A", "B", "C"])])
    row = wh.metrics("c", 4)
    assert row["hit_at_k"] == 1.0
    assert row["recall_at_k"] == pytest.approx(2 / 3, abs=1e-12)
    assert row["precision_at_k"] == pytest.approx(0.5, abs=1e-12)
    assert row["ndcg_at_k"] == pytest.approx(1.5 / (1 + 1 / log2(3) + 0.5), abs=1e-12)
    assert row["ndcg_at_k"] == pytest.approx(0.703918, abs=1e-6)
    assert row["reciprocal_rank_at_k"] == 1.0
    assert row["first_relevant_rank"] == 1


def test_rule_2_6_precision_divides_by_k_even_when_fewer_were_retrieved(scored_cases):
    # One card retrieved, and it is gold: P@4 = 1/4 (trec_eval P_k), not 1/1.
    wh = scored_cases([case("c", [chunk("A::00", "A")], ["A"])])
    assert wh.metrics("c", 4)["precision_at_k"] == 0.25


def test_rule_2_6_ndcg_ideal_is_cut_at_k_so_never_above_one(scored_cases):
    # 5 gold cards, k = 2, both top cards gold: DCG = IDCG = 1 + 1/log2(3) → nDCG = 1.0.
    retrieved = [chunk(f"{c}::00", c) for c in "ABCDE"]
    wh = scored_cases([case("c", retrieved, list("ABCDE"))], ks=[2])
    assert wh.metrics("c", 2)["ndcg_at_k"] == pytest.approx(1.0, abs=1e-12)
    assert wh.metrics("c", 2)["recall_at_k"] == pytest.approx(2 / 5)


def test_rule_2_6_reciprocal_rank_is_zero_beyond_k_but_first_rank_is_kept(scored_cases):
    retrieved = [chunk(f"{c}::00", c) for c in "XYZG"]
    wh = scored_cases([case("c", retrieved, ["G"])], ks=[2])
    row = wh.metrics("c", 2)
    assert row["reciprocal_rank_at_k"] == 0.0
    assert row["first_relevant_rank"] == 4  # "at which k does this case enter": the whole list


def test_rule_2_7_headline_k_from_manifest_and_sweep_adds_rows(tmp_path):
    retrieved = [chunk(f"{c}::00", c) for c in "XG"]
    write_run(tmp_path / "runs", "run-a", [case("c", retrieved, ["G"])], top_k=3)
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh", ks=(1, 5)))
    wh = Evaluated(tmp_path / "wh")
    assert sorted(wh.view("case_metrics")["k"].to_list()) == [1, 3, 5]
    assert wh.view("runs")["headline_k"].to_list() == [3]


def test_rule_2_7_k_flag_overrides_manifest(tmp_path):
    write_run(tmp_path / "runs", "run-a", [case("c", [chunk("G::00", "G")], ["G"])], top_k=3)
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh", k=2))
    wh = Evaluated(tmp_path / "wh")
    assert wh.view("case_metrics")["k"].to_list() == [2]
    assert wh.view("runs")["headline_k"].to_list() == [2]


def test_rule_2_7_k_beyond_captured_depth_is_computed_and_warned(scored_cases):
    # 2 distinct cards captured; k = 10 is computed on them (hit at rank 2) and flagged.
    retrieved = [chunk("X::00", "X"), chunk("G::00", "G")]
    wh = scored_cases([case("c", retrieved, ["G"])], ks=[10])
    row = wh.metrics("c", 10)
    assert row["hit_at_k"] == 1.0 and row["k_beyond_depth"] is True
    assert row["precision_at_k"] == pytest.approx(0.1)
    warnings = run_warnings(wh.view("runs").row(0, named=True), wh.view("cases").filter(pl.col("n_gold") > 0))
    assert any("k=10 is beyond the deepest capture" in w and "cannot show" in w for w in warnings)


def test_rule_2_7_cases_shallower_than_any_k_of_the_sweep_are_warned(scored_cases):
    # Case a captured 2 distinct cards (its sibling chunk X::01 is not a card of its own), b 6:
    # at k=1 none is shallow; at k=4 (the headline) and k=5 a is; the run's deepest is 6.
    wh = scored_cases([
        case("a", [chunk("X::00", "X"), chunk("X::01", "X"), chunk("G::00", "G")], ["G"]),
        case("b", [chunk(f"C{i}::00", f"C{i}") for i in range(6)], ["G"]),
    ], ks=[1, 5])
    warnings = run_warnings(wh.view("runs").row(0, named=True), wh.view("cases").filter(pl.col("n_gold") > 0))
    assert [w for w in warnings if "captured fewer than" in w] == [
        "Labelled cases that captured fewer than k distinct cards (sibling chunks or short lists), of 2: "
        "k=4: 1, k=5: 1; they are scored on what was captured."]


def test_rule_2_8_slice_means_with_n_and_wilson_interval(scored_cases):
    # en: hits 1, 0; es-419: hit 1; one unlabelled case. all: mean 2/3, n = 3.
    # Wilson 95% for 2/3 (z = 1.959964): centre (p + z²/2n)/(1 + z²/n) = 0.57313,
    # half-width z·sqrt(p(1-p)/n + z²/4n²)/(1 + z²/n) = 0.36543 → [0.2077, 0.9385]
    # (the textbook value for 2 successes in 3).
    wh = scored_cases([
        case("en-1", [chunk("A::00", "A")], ["A"], locale="en"),
        case("en-2", [chunk("B::00", "B")], ["A"], locale="en", category="adversarial"),
        case("es-1", [chunk("A::00", "A")], ["A"], locale="es-419"),
        case("es-unlabelled", [chunk("A::00", "A")], None, locale="es-419"),
    ])
    agg = wh.view("aggregates").filter(pl.col("metric") == "hit_at_k")
    def get(slice_, value):
        return agg.filter((pl.col("slice") == slice_) & (pl.col("slice_value") == value)).row(0, named=True)
    everything = get("all", "all")
    assert everything["mean"] == pytest.approx(2 / 3) and everything["n"] == 3
    assert everything["ci_low"] == pytest.approx(0.2077, abs=1e-4)
    assert everything["ci_high"] == pytest.approx(0.9385, abs=1e-4)
    assert get("locale", "en")["mean"] == 0.5 and get("locale", "en")["n"] == 2
    assert get("locale", "es-419")["n"] == 1
    assert get("category", "adversarial")["mean"] == 0.0
    assert get("locale_category", "en/golden")["n"] == 1
    assert set(agg["slice"].unique()) == {"all", "category", "locale", "locale_category"}


def test_rule_2_9_vacuous_run_is_flagged(scored_cases):
    wh = scored_cases([case("a", [], ["A"]), case("b", [], ["B"]), case("u", [chunk("A::00", "A")])])
    assert wh.view("runs")["vacuous"].to_list() == [True]
    warnings = run_warnings(wh.view("runs").row(0, named=True), wh.view("cases").filter(pl.col("n_gold") > 0))
    assert any(w.startswith("VACUOUS RUN") for w in warnings)


def test_rule_2_9_a_run_with_some_retrieval_is_not_vacuous(scored_cases):
    wh = scored_cases([case("a", [], ["A"]), case("b", [chunk("X::00", "X")], ["B"])])
    assert wh.view("runs")["vacuous"].to_list() == [False]
