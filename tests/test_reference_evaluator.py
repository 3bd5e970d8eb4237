"""Agreement with trec_eval (pytrec-eval-terrier) on a few thousand random cases.

trec_eval ranks by score, then doc id, and keeps one of duplicate ids; to compare with
list-order ranking the cases here have unique card ids and strictly decreasing scores.
The trec_eval names come from the metric declarations (transforms/metrics.py): success_k =
hit_at_k, recall_k = recall_at_k, ndcg_cut_k = ndcg_at_k, P_k = precision_at_k; our
reciprocal rank is cut at k, which trec_eval's recip_rank is not, so it is left out here.
"""

from __future__ import annotations

import random

import polars as pl
import pytrec_eval
from builders import score
from retrieval_eval.transforms.metrics import METRICS

KS = (1, 3, 5, 10)
N_CASES = 3000
TREC_NAMES = {
    metric.trec_eval.removesuffix("_{k}"): metric.name for metric in METRICS if metric.name != "reciprocal_rank_at_k"
}


def random_cases(rng: random.Random) -> list[dict]:
    cases = []
    for i in range(N_CASES):
        pool = [f"doc-{j}" for j in rng.sample(range(60), 30)]
        depth = rng.randint(1, 15)
        retrieved = pool[:depth]
        gold = rng.sample(pool, rng.randint(1, 5))  # some gold never retrieved
        score = 100.0
        items = []
        for doc in retrieved:
            score -= rng.uniform(0.01, 1.0)
            items.append({"id": doc, "score": round(score, 6)})
        cases.append({"case_id": f"q{i}", "locale": "en", "category": "golden",
                      "must_cite_one_of": gold, "retrieved_context": items})
    return cases


def test_agrees_with_trec_eval_on_random_cases():
    cases = random_cases(random.Random(20261130))
    ours = score(cases, k=KS[0], ks=KS).view("case_metrics")

    qrels = {c["case_id"]: {doc: 1 for doc in c["must_cite_one_of"]} for c in cases}
    run = {c["case_id"]: {item["id"]: item["score"] for item in c["retrieved_context"]} for c in cases}
    measures = {f"{name}.{','.join(map(str, KS))}" for name in TREC_NAMES}
    reference = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)

    rows = [
        {"case_id": qid, "k": k, "metric": ours_name, "reference": values[f"{trec_name}_{k}"]}
        for qid, values in reference.items()
        for k in KS
        for trec_name, ours_name in TREC_NAMES.items()
    ]
    expected = pl.DataFrame(rows)
    got = ours.unpivot(index=["case_id", "k"], on=list(TREC_NAMES.values()), variable_name="metric")
    joined = expected.join(got, on=["case_id", "k", "metric"], how="left")
    assert joined.height == N_CASES * len(KS) * len(TREC_NAMES)
    assert joined["value"].null_count() == 0
    worst = joined.with_columns((pl.col("value") - pl.col("reference")).abs().alias("diff")).sort("diff").tail(1)
    assert worst["diff"][0] <= 1e-9, worst.to_dicts()
    # The fixture is not degenerate: both hits and misses occur at every k.
    hits = joined.filter(pl.col("metric") == "hit_at_k").group_by("k").agg(pl.col("value").mean())
    assert hits["value"].is_between(0.05, 0.95).all()
