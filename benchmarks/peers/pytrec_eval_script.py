"""Peer: plain `json` per line + pytrec_eval (trec_eval) for hit, recall, nDCG and P at 10.

    python benchmarks/peers/pytrec_eval_script.py CASES_JSONL

What a team would write without retrieval-eval. To be comparable with `retrieval-eval run`:
card identity is parent_id (else id); a card's later sibling chunks are dropped, keeping
its first occurrence and score (scores strictly decrease, so trec_eval's sort by score
keeps list order); unlabelled cases (empty must_cite_one_of) are left out.
trec_eval success_10 = hit@10, recall_10 = recall@10, ndcg_cut_10 = nDCG@10, P_10 = P@10.
Prints the mean of each over the labelled cases.
"""

from __future__ import annotations

import json
import sys

import pytrec_eval

K = 10
MEASURES = {f"success.{K}", f"recall.{K}", f"ndcg_cut.{K}", f"P.{K}"}
NAMES = {f"success_{K}": "hit@10", f"recall_{K}": "recall@10", f"ndcg_cut_{K}": "ndcg@10", f"P_{K}": "P@10"}


def main(path: str) -> None:
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            case = json.loads(line)
            gold = case.get("must_cite_one_of") or []
            if not gold:
                continue
            qid = case["case_id"]
            qrels[qid] = {card: 1 for card in gold}
            ranking: dict[str, float] = {}
            for item in case.get("retrieved_context") or []:
                card = item.get("parent_id") or item["id"]
                if card not in ranking:
                    ranking[card] = float(item["score"])
            run[qid] = ranking
    results = pytrec_eval.RelevanceEvaluator(qrels, MEASURES).evaluate(run)
    n = len(qrels)
    for measure, name in NAMES.items():
        # trec_eval leaves out a query with an empty ranking; it scores 0 on every measure.
        total = sum(values[measure] for values in results.values())
        print(f"{name} {total / n:.6f}")
    print(f"cases {n}")


if __name__ == "__main__":
    main(sys.argv[1])
