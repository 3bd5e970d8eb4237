"""Graded relevance (SPEC 12): a case's `relevance` {card_id: grade} is its gold; cards with
grade >= the relevance level are relevant for hit, recall, precision and RR, and nDCG takes
gain = grade over the ideal ranking of every graded card (trec_eval ndcg_cut). Hand-computed
fixtures through the real job and through `retrieval_eval.evaluate`, agreement with trec_eval
(pytrec-eval-terrier) on random graded cases, and binary data left as it was."""

from __future__ import annotations

import json
import math
import random

import polars as pl
import pytest
import pytrec_eval
import retrieval_eval
from builders import (
    SAMPLE_BASELINE,
    SAMPLE_RUNS,
    Evaluated,
    case,
    chunk,
    cli,
    evaluate,
    job_options,
    write_run,
)
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.flows.warehouse.warehouse_check import audit_warehouse
from retrieval_eval.transforms.metrics import METRICS

LOG2_3 = math.log2(3)
METRIC_NAMES = [m.name for m in METRICS]


def graded(case_id: str, retrieved: list[str], relevance: dict[str, int], **extra) -> dict:
    return case(case_id, [chunk(card) for card in retrieved], relevance=relevance, **extra)


# The fixtures: (case, its expected rows). Values for each (relevance level, k) as
# (hit, recall, nDCG, precision, RR, first_relevant_rank).
FIXTURE_CASES = [
    # A:3, B:1; list B, X, A. Level 1: gold {A, B}; level 2: gold {A}. Gains never change:
    #   DCG@3 = 1/log2(2) + 3/log2(4) = 1 + 1.5 = 2.5; IDCG@3 = 3/log2(2) + 1/log2(3) = 3.6309
    #   nDCG@3 = 2.5 / 3.6309 = 0.6885;  nDCG@1 = 1 / 3 = 0.3333
    graded("two-grades", ["B", "X", "A"], {"A": 3, "B": 1}),
    # A:0, B:2, C:1; list A, C, B. A is judged and not relevant: no gain, never a hit.
    #   DCG@1 = 0; DCG@3 = 0 + 1/log2(3) + 2/log2(4) = 0.6309 + 1 = 1.6309
    #   IDCG@1 = 2; IDCG@3 = 2 + 1/log2(3) = 2.6309 (only two grades above 0)
    #   nDCG@3 = 1.6309 / 2.6309 = 0.6199. Level 2: gold {B}, at rank 3.
    graded("zero-grade", ["A", "C", "B"], {"A": 0, "B": 2, "C": 1}),
    # Only grade 0: no relevant card, no metric rows at any level (SPEC 2.4).
    graded("nothing-relevant", ["A"], {"A": 0}),
    # Grade 1 alone: relevant at level 1; at level 2 the case has no relevant card, so no rows.
    #   nDCG@3: X, Y, then C (gain 1) at rank 3: (1/log2(4)) / 1 = 0.5
    graded("grade-one", ["X", "Y", "C"], {"C": 1}),
    # Ungraded gold has gain 1 and the same figures at every level: Q at rank 2.
    #   nDCG@k≥2 = (1/log2(3)) / 1 = 0.6309
    case("binary", [chunk("Z"), chunk("Q")], ["Q"]),
]
EXPECTED = {
    (1, "two-grades", 1): (1.0, 1 / 2, 1 / 3, 1.0, 1.0, 1),
    (1, "two-grades", 3): (1.0, 1.0, 2.5 / (3 + 1 / LOG2_3), 2 / 3, 1.0, 1),
    (2, "two-grades", 1): (0.0, 0.0, 1 / 3, 0.0, 0.0, 3),
    (2, "two-grades", 3): (1.0, 1.0, 2.5 / (3 + 1 / LOG2_3), 1 / 3, 1 / 3, 3),
    (1, "zero-grade", 1): (0.0, 0.0, 0.0, 0.0, 0.0, 2),
    (1, "zero-grade", 3): (1.0, 1.0, (1 / LOG2_3 + 1) / (2 + 1 / LOG2_3), 2 / 3, 1 / 2, 2),
    (2, "zero-grade", 1): (0.0, 0.0, 0.0, 0.0, 0.0, 3),
    (2, "zero-grade", 3): (1.0, 1.0, (1 / LOG2_3 + 1) / (2 + 1 / LOG2_3), 1 / 3, 1 / 3, 3),
    (1, "grade-one", 1): (0.0, 0.0, 0.0, 0.0, 0.0, 3),
    (1, "grade-one", 3): (1.0, 1.0, 0.5, 1 / 3, 1 / 3, 3),
    (1, "binary", 1): (0.0, 0.0, 0.0, 0.0, 0.0, 2),
    (1, "binary", 3): (1.0, 1.0, 1 / LOG2_3, 1 / 3, 1 / 2, 2),
    (2, "binary", 1): (0.0, 0.0, 0.0, 0.0, 0.0, 2),
    (2, "binary", 3): (1.0, 1.0, 1 / LOG2_3, 1 / 3, 1 / 2, 2),
}
FIELDS = ["hit_at_k", "recall_at_k", "ndcg_at_k", "precision_at_k", "reciprocal_rank_at_k", "first_relevant_rank"]


def assert_fixture_rows(case_metrics: pl.DataFrame, level: int) -> None:
    expected = {(c, k): values for (lvl, c, k), values in EXPECTED.items() if lvl == level}
    got = {(row["case_id"], row["k"]): tuple(row[f] for f in FIELDS) for row in case_metrics.iter_rows(named=True)}
    assert set(got) == set(expected)  # nothing-relevant never has rows; grade-one none at level 2
    for key, values in expected.items():
        assert got[key] == pytest.approx(values, abs=1e-12), key


# At level 2, two-grades has nDCG@1 = 1/3 without a hit (B's gain 1 is below the level), as
# trec_eval's ndcg_cut and success_1 have it; sql/audits/metric_order.sql holds hit >= nDCG
# only at level 1, so the level-2 warehouse must pass the audits too.
@pytest.mark.parametrize("level", [1, 2])
def test_hand_computed_fixtures_through_the_job(tmp_path, level):
    write_run(tmp_path / "runs", "graded", FIXTURE_CASES, top_k=3)
    evaluate(job_options(tmp_path / "runs", tmp_path / "warehouse", ks=(1,), relevance_level=level))
    warehouse = Evaluated(tmp_path / "warehouse")
    assert_fixture_rows(warehouse.view("case_metrics"), level)
    cases = {row["case_id"]: row for row in warehouse.view("cases").iter_rows(named=True)}
    assert cases["nothing-relevant"]["n_gold"] == 0 and cases["two-grades"]["gold_source"] == "relevance"
    assert cases["two-grades"]["ideal_gains"] == [3, 1] and cases["zero-grade"]["ideal_gains"] == [2, 1]
    assert warehouse.view("runs")["relevance_level"].to_list() == [level]
    assert audit_warehouse(Warehouse(tmp_path / "warehouse")) == []


@pytest.mark.parametrize("level", [1, 2])
def test_hand_computed_fixtures_through_the_python_api(level):
    result = retrieval_eval.evaluate(FIXTURE_CASES, k=3, ks=(1,), relevance_level=level)
    assert_fixture_rows(result.case_metrics, level)


def test_relevance_level_flag_of_the_command(tmp_path):
    write_run(tmp_path / "runs", "graded", FIXTURE_CASES, top_k=3)
    result = cli("run", str(tmp_path / "runs"), "--relevance-level", "2", "--warehouse", str(tmp_path / "warehouse"),
                 "--report-dir", str(tmp_path / "report"), "--quiet")
    assert result.returncode == 0, result.stderr
    metrics = Evaluated(tmp_path / "warehouse").view("case_metrics").filter(pl.col("case_id") == "two-grades")
    # Level 2: RR 1/3 (A at rank 3) where level 1 has 1 (B at rank 1); nDCG's gains unchanged.
    assert metrics.select("reciprocal_rank_at_k", "ndcg_at_k").row(0) == pytest.approx((1 / 3, 2.5 / (3 + 1 / LOG2_3)))


def test_relevance_level_moves_the_binary_metrics_but_not_ndcg():
    level_1 = retrieval_eval.evaluate(FIXTURE_CASES, k=3, ks=(1, 2)).case_metrics
    level_2 = retrieval_eval.evaluate(FIXTURE_CASES, k=3, ks=(1, 2), relevance_level=2).case_metrics
    both = level_1.join(level_2, on=["case_id", "k"], suffix="_2")  # grade-one has no rows at level 2
    assert both["ndcg_at_k"].to_list() == both["ndcg_at_k_2"].to_list()
    moved = both.filter(pl.col("case_id").is_in(["two-grades", "zero-grade"]))
    for name in ("precision_at_k", "reciprocal_rank_at_k", "first_relevant_rank"):
        assert (moved[name] != moved[f"{name}_2"]).any(), name
    assert (moved["recall_at_k"] != moved["recall_at_k_2"]).any() and (moved["hit_at_k"] != moved["hit_at_k_2"]).any()


def test_binary_data_gives_todays_figures(tmp_path):
    """The committed baseline (format 1, made before graded relevance) holds the sample's
    per-case figures at k = 4 to 10 places; binary data at any relevance level gives them."""
    snapshot = json.loads(SAMPLE_BASELINE.read_text())
    run_id = snapshot["run_id"]
    for level in (1, 2):
        result = retrieval_eval.evaluate(SAMPLE_RUNS / run_id / "cases.jsonl", k=snapshot["k"], relevance_level=level)
        rows = {row["case_id"]: row for row in result.case_metrics.iter_rows(named=True)}
        assert set(rows) == set(snapshot["cases"])
        for case_id, figures in snapshot["cases"].items():
            for name in (*METRIC_NAMES, "n_gold", "first_relevant_rank"):
                assert rows[case_id][name] == pytest.approx(figures[name], abs=1e-9), (level, case_id, name)


# ---------------------------------------------------------------- against trec_eval

KS = (1, 3, 5, 10)
TREC_NAMES = {"success": "hit_at_k", "recall": "recall_at_k", "P": "precision_at_k", "ndcg_cut": "ndcg_at_k"}


def random_graded_cases(rng: random.Random, n: int) -> list[dict]:
    """Graded cases with scores that tie (list order is the ranking, scores never re-sort
    it), zero grades, graded cards never retrieved, and cases with no relevant card."""
    cases = []
    for i in range(n):
        pool = [f"doc-{j}" for j in rng.sample(range(60), 30)]
        retrieved = pool[: rng.randint(1, 15)]
        judged = rng.sample(pool, rng.randint(1, 8))
        nothing_relevant = i % 13 == 0
        relevance = {doc: 0 if nothing_relevant else rng.choice([0, 0, 1, 2, 3]) for doc in judged}
        items = [{"id": doc, "score": rng.choice([0.5, 0.7, 0.9])} for doc in retrieved]
        cases.append({"case_id": f"q{i}", "locale": "en", "category": "golden", "relevance": relevance,
                      "retrieved_context": items})
    return cases


@pytest.mark.parametrize("level", [1, 2])
def test_graded_metrics_agree_with_trec_eval_on_random_cases(level):
    cases = random_graded_cases(random.Random(20261201 + level), 3000)
    ours = retrieval_eval.evaluate(cases, k=KS[0], ks=KS, relevance_level=level).case_metrics
    qrels = {c["case_id"]: c["relevance"] for c in cases}
    # trec_eval ranks by score: unique docs with strictly falling scores give it our list order.
    run = {c["case_id"]: {item["id"]: float(100 - rank) for rank, item in enumerate(c["retrieved_context"])} for c in cases}
    measures = {f"{name}.{','.join(map(str, KS))}" for name in TREC_NAMES}
    reference = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=level).evaluate(run)
    # A case without a card at or above the level has no rows in ours (trec_eval scores it 0).
    labelled = {q for q, grades in qrels.items() if max(grades.values()) >= level}
    assert set(ours["case_id"]) == labelled and len(labelled) < len(cases)
    rows = {(r["case_id"], r["k"]): r for r in ours.iter_rows(named=True)}
    worst = 0.0
    for qid in labelled:
        for k in KS:
            for trec_name, name in TREC_NAMES.items():
                worst = max(worst, abs(rows[(qid, k)][name] - reference[qid][f"{trec_name}_{k}"]))
    assert worst <= 1e-9
    for k in KS:  # trec_eval's recip_rank has no cutoff: -M k gives it the first k
        cut = {q: dict(list(docs.items())[:k]) for q, docs in run.items()}
        rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}, relevance_level=level).evaluate(cut)
        for qid in labelled:
            assert rows[(qid, k)]["reciprocal_rank_at_k"] == pytest.approx(rr[qid]["recip_rank"], abs=1e-9)
    # Not degenerate: graded gains below 1.0 and above 0 at every k, hits and misses.
    ndcg = ours.filter(pl.col("k") == 5)["ndcg_at_k"]
    assert ((ndcg > 0) & (ndcg < 1)).mean() > 0.3 and 0.05 < ours.filter(pl.col("k") == 3)["hit_at_k"].mean() < 0.95
