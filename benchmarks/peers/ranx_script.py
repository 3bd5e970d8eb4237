"""Peer: Polars reads the file, ranx computes hit_rate@10, recall@10 and ndcg@10.

    python benchmarks/peers/ranx_script.py CASES_JSONL

Same conventions as pytrec_eval_script.py: card = parent_id (else id), first occurrence
kept, unlabelled cases left out. ranx compiles its kernels with numba on first use and
caches them (NUMBA_CACHE_DIR, else ranx's __pycache__); with an empty cache that took
30-40 s on the 2-core benchmark machine. It is part of what a first evaluation with ranx
costs (a fresh environment, a CI job), so benchmarks/run.py times it both ways.
Prints the mean of each metric over the labelled cases.
"""

from __future__ import annotations

import sys

import polars as pl
from ranx import Qrels, Run, evaluate

K = 10
METRICS = [f"hit_rate@{K}", f"recall@{K}", f"ndcg@{K}"]
NAMES = {f"hit_rate@{K}": "hit@10", f"recall@{K}": "recall@10", f"ndcg@{K}": "ndcg@10"}


def main(path: str) -> None:
    frame = pl.read_ndjson(
        path,
        schema={
            "case_id": pl.String,
            "must_cite_one_of": pl.List(pl.String),
            "retrieved_context": pl.List(
                pl.Struct({"id": pl.String, "parent_id": pl.String, "score": pl.Float64})
            ),
        },
    ).filter(pl.col("must_cite_one_of").list.len() > 0)
    qrels_dict: dict[str, dict[str, int]] = {}
    run_dict: dict[str, dict[str, float]] = {}
    for case_id, gold, retrieved in frame.iter_rows():
        qrels_dict[case_id] = {card: 1 for card in gold}
        ranking: dict[str, float] = {}
        for item in retrieved or []:
            card = item["parent_id"] or item["id"]
            if card not in ranking:
                ranking[card] = item["score"]
        run_dict[case_id] = ranking
    scores = evaluate(Qrels(qrels_dict), Run(run_dict), METRICS, make_comparable=True)
    for metric, name in NAMES.items():
        print(f"{name} {scores[metric]:.6f}")
    print(f"cases {len(qrels_dict)}")


if __name__ == "__main__":
    main(sys.argv[1])
