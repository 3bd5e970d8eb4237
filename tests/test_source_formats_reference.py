"""Every format's cases, read from its fixture, scored by `retrieval_eval.evaluate` agree
with trec_eval (pytrec-eval-terrier) on the same qrels and run; and the golden figures of
the BEIR and ranx fixtures, computed by hand below.

The run given to trec_eval keeps each format's own scores where every item has one (BEIR
and ranx: so trec_eval's tie rule checks the readers' ranking) and otherwise scores items
by rank (n − rank), as ragas, MLflow and DeepEval store none. Gold is graded where the case
says `relevance`, else each gold card has grade 1. hit@10 is trec_eval's success_10.
pytrec_eval has no `-c`: a labelled case that retrieved nothing is not given to it, and
scores 0 on every metric here, as `trec_eval -c` counts it; every case pytrec_eval was given
must come back from it, and every labelled case, and no other, has a row of ours."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import pytrec_eval
import retrieval_eval
from retrieval_eval.flows.sources.formats import READERS

FIXTURES = Path(__file__).parent / "fixtures" / "sources"
K = 10
MEASURES = {"success_10": "hit_at_k", "recall_10": "recall_at_k", "ndcg_cut_10": "ndcg_at_k", "P_10": "precision_at_k"}
INPUTS = [
    ("beir", "beir/results.json", "beir/qrels.tsv"),
    ("ranx", "ranx/run.json", "ranx/qrels.json"),
    ("ranx", "ranx/run.trec", "ranx/qrels.trec"),
    ("ragas", "ragas/dataset.jsonl", None),
    ("ragas", "ragas/dataset.csv", None),
    ("mlflow", "mlflow/eval_results_table.json", None),
    ("deepeval", "deepeval/latest_test_run.json", None),
    ("openinference", "openinference/spans.jsonl", "openinference/qrels.jsonl"),
]


def cases_of(format_name: str, name: str, qrels: str | None) -> list[dict]:
    records = READERS[format_name](FIXTURES / name, qrels=FIXTURES / qrels if qrels else None)
    return [record.case for record in records if record.case is not None]


def per_case(cases: list[dict]) -> dict[str, dict[str, float]]:
    metrics = retrieval_eval.evaluate(cases, k=K).case_metrics.filter(k=K)
    return {row["case_id"]: row for row in metrics.iter_rows(named=True)}


def trec_qrels_and_run(cases: list[dict]) -> tuple[dict, dict, set[str]]:
    """The labelled cases as pytrec_eval's qrels and run, and the labelled cases that retrieved
    nothing (left out of both)."""
    qrels, run, retrieved_nothing = {}, {}, set()
    for case in cases:
        gold = case.get("relevance") or {card: 1 for card in case.get("relevant_ids") or case.get("must_cite_one_of") or []}
        items = case["retrieved_context"]
        if not gold:
            continue
        if not items:
            retrieved_nothing.add(case["case_id"])
            continue
        qrels[case["case_id"]] = gold
        own_scores = all("score" in item for item in items)
        run[case["case_id"]] = {item["id"]: float(item["score"] if own_scores else len(items) - rank)
                                for rank, item in enumerate(items)}
    return qrels, run, retrieved_nothing


@pytest.mark.parametrize(("format_name", "name", "qrels"), INPUTS, ids=[name for _, name, _ in INPUTS])
def test_each_format_agrees_with_trec_eval(format_name, name, qrels):
    cases = cases_of(format_name, name, qrels)
    qrels_dict, run, retrieved_nothing = trec_qrels_and_run(cases)
    assert run, "the fixture has labelled cases that retrieved something"
    reference = pytrec_eval.RelevanceEvaluator(qrels_dict, set(MEASURES)).evaluate(run)
    ours = per_case(cases)
    assert set(reference) == set(run)  # pytrec_eval scored every case it was given
    assert set(ours) == set(run) | retrieved_nothing  # a row for each labelled case, none for another
    for case_id, values in reference.items():
        for trec_name, our_name in MEASURES.items():
            assert ours[case_id][our_name] == pytest.approx(values[trec_name], abs=1e-9), (case_id, our_name)
    for case_id in retrieved_nothing:
        assert all(ours[case_id][name] == 0 for name in MEASURES.values()), case_id
        assert ours[case_id]["first_relevant_rank"] is None


def test_the_fixtures_hold_labelled_cases_that_retrieved_nothing():
    # beir q4, ranx q9 and openinference c3 are only in their qrels (what the test above covers).
    found = {name: trec_qrels_and_run(cases_of(format_name, name, qrels))[2] for format_name, name, qrels in INPUTS}
    assert found["beir/results.json"] == {"q4"} and found["ranx/run.json"] == found["ranx/run.trec"] == {"q9"}
    assert found["openinference/spans.jsonl"] == {"c3"}


def test_beir_golden_figures():
    ours = per_case(cases_of("beir", "beir/results.json", "beir/qrels.tsv"))
    # q1 ranks d1, d3, d2; gold d3 (grade 1) and d9 (grade 2, never retrieved):
    # DCG = 1/log2(3), IDCG = 2/log2(2) + 1/log2(3).
    assert ours["q1"]["hit_at_k"] == 1 and ours["q1"]["recall_at_k"] == 0.5
    assert ours["q1"]["first_relevant_rank"] == 2
    assert ours["q1"]["ndcg_at_k"] == pytest.approx((1 / math.log2(3)) / (2 + 1 / math.log2(3)))
    # q2 ranks d4, d5; gold d5 at rank 2.
    assert ours["q2"]["ndcg_at_k"] == pytest.approx(1 / math.log2(3))
    # q4 is only in the qrels: it retrieved nothing and scores 0; q3 is unjudged: no row.
    assert (ours["q4"]["hit_at_k"], ours["q4"]["recall_at_k"], ours["q4"]["ndcg_at_k"]) == (0, 0, 0)
    assert "q3" not in ours


def test_ranx_golden_figures():
    ours = per_case(cases_of("ranx", "ranx/run.json", "ranx/qrels.json"))
    # q1 ranks d3, d1, d2; grades d1 = 2, d2 = 1: DCG = 2/log2(3) + 1/log2(4), IDCG = 2 + 1/log2(3).
    assert ours["q1"]["ndcg_at_k"] == pytest.approx((2 / math.log2(3) + 0.5) / (2 + 1 / math.log2(3)))
    assert ours["q1"]["recall_at_k"] == 1 and ours["q1"]["first_relevant_rank"] == 2
    assert ours["q2"]["first_relevant_rank"] == 2  # d8 and d7 tie: d8 first
    assert ours["q9"]["hit_at_k"] == 0


def test_content_identified_gold_matches_its_chunk_and_a_text_no_chunk_has_is_a_miss():
    ours = per_case(cases_of("deepeval", "deepeval/latest_test_run.json", None))
    assert ours["test_case_0"]["first_relevant_rank"] == 2 and ours["test_case_0"]["hit_at_k"] == 1
    assert ours["row-3"]["hit_at_k"] == 0
