"""Benchmark of paired_stats on the compare command's workload: one reference run against
10 candidates, 100,000 cases, the project's 4 slices (all, locale, category,
locale/category: 30 slice values) and 5 metrics at k = 10, 100,000 flips per test.

Synthetic runs: each case has 1–8 gold documents; a run finds each within the top 10 with
probability 0.8 at a geometric rank, and a candidate keeps the reference's ranking for 70%
of the cases. From the ranks come binary hit, precision j/10, reciprocal rank 1/r, recall
j/n_gold and nDCG — the value sets the metrics really take.

    python benchmarks/stats_cost.py [--cases N] [--runs R] [--slice-values S] [--frame]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import polars as pl
import retrieval_eval.transforms.paired_stats as ps

K = 10
METRICS = ("hit_at_k", "precision_at_k", "reciprocal_rank_at_k", "recall_at_k", "ndcg_at_k")


def gold_ranks(rng: np.random.Generator, n_gold: np.ndarray) -> np.ndarray:
    """Per case the sorted, distinct ranks of its gold documents (large = not retrieved)."""
    width = int(n_gold.max())
    found = rng.random((n_gold.size, width)) < 0.8
    ranks = np.where(found, np.minimum(rng.geometric(0.35, (n_gold.size, width)), 30), 99)
    ranks = np.sort(np.where(np.arange(width) < n_gold[:, None], ranks, 999), axis=1)
    for j in range(1, width):  # two documents cannot share a rank
        ranks[:, j] = np.maximum(ranks[:, j], ranks[:, j - 1] + 1)
    return ranks


def metrics(ranks: np.ndarray, n_gold: np.ndarray) -> dict[str, np.ndarray]:
    top = ranks <= K
    found = top.sum(axis=1)
    gain = np.where(top, 1 / np.log2(np.minimum(ranks, K) + 1), 0).sum(axis=1)
    ideal = np.cumsum(1 / np.log2(np.arange(2, K + 2)))[np.minimum(n_gold, K) - 1]
    return {
        "hit_at_k": top.any(axis=1).astype(float),
        "precision_at_k": found / K,
        "reciprocal_rank_at_k": np.where(top[:, 0], 1 / ranks[:, 0], 0.0),
        "recall_at_k": found / n_gold,
        "ndcg_at_k": gain / ideal,
    }


def workload(cases: int, runs: int, seed: int = 1):
    """Values (metric → (runs + 1, cases), reference first) and the 30 slice masks."""
    rng = np.random.default_rng(seed)
    n_gold = rng.choice([1, 2, 3, 4, 5, 8], size=cases, p=[.45, .25, .15, .08, .05, .02])
    reference = gold_ranks(rng, n_gold)
    ranked = [reference] + [np.where(rng.random((cases, 1)) < 0.7, reference, gold_ranks(rng, n_gold))
                            for _ in range(runs)]
    values = {m: np.array([metrics(r, n_gold)[m] for r in ranked]) for m in METRICS}
    locale = rng.integers(0, 4, cases)
    category = rng.integers(0, 5, cases)
    names = ([("all", "all")] + [("locale", f"l{i}") for i in range(4)] + [("category", f"c{j}") for j in range(5)]
             + [("locale_category", f"l{i}/c{j}") for i in range(4) for j in range(5)])
    masks = np.array([np.ones(cases, bool)] + [locale == i for i in range(4)] + [category == j for j in range(5)]
                     + [(locale == i) & (category == j) for i in range(4) for j in range(5)])
    return values, masks, names


def timed(label: str, action):
    """Run `action`, print its wall and CPU seconds (CPU is steadier on a shared machine)."""
    start, cpu = time.perf_counter(), time.process_time()
    result = action()
    elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    print(f"{label:<64} {elapsed:7.2f} s wall {used:7.2f} s cpu")
    return result, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--frame", action="store_true", help="also time compare_frame on the long frame")
    parser.add_argument("--slice-values", type=int, default=30,
                        help="compare on the first N slice values (all, 4 locales, 5 categories, 20 cells)")
    args = parser.parse_args()
    values, masks, names = workload(args.cases, args.runs)
    masks, names = masks[: args.slice_values], names[: args.slice_values]
    tests = args.runs * len(METRICS) * len(masks)
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"{args.cases:,} cases, {args.runs} candidate runs, {len(masks)} slice values, "
          f"{len(METRICS)} metrics: {tests:,} tests of {ps.FLIPS:,} flips\n")

    total = 0.0
    for metric in METRICS:
        v = values[metric]
        _, elapsed = timed(f"compare_many  {metric} (p, 95% bootstrap interval, …)",
                           lambda: ps.compare_many(v[0], v[1:], masks))
        total += elapsed
    print(f"{'all rows, default (bootstrap interval up to 50,000 cases)':<64} {total:7.2f} s wall\n")

    tests_only = 0.0
    for metric in METRICS:
        v = values[metric]
        _, elapsed = timed(f"  p-values only   {metric}",
                           lambda: ps.compare_many(v[0], v[1:], masks, normal_above=0))
        tests_only += elapsed
    print(f"{'randomization tests alone (normal interval)':<64} {tests_only:7.2f} s wall\n")

    for metric in METRICS:
        d = values[metric][1] - values[metric][0]
        path = "exact lattice" if ps.exact_sign_flip_p_value(d) is not None else "simulated flips"
        timed(f"one test on all {args.cases:,} cases: {metric} ({path})", lambda: ps.randomization_p_value(d))

    if args.frame:
        v = values
        run_ids = ["reference"] + [f"run{i}" for i in range(args.runs)]
        case_ids = np.array([f"case{i:06d}" for i in range(args.cases)])
        slice_of = np.array([s for s, _ in names])
        value_of = np.array([sv for _, sv in names])
        mask_index, case_index = np.nonzero(masks)
        parts = []
        for r, run in enumerate(run_ids):
            for metric in METRICS:
                parts.append(pl.DataFrame({
                    "run_id": pl.Series([run] * case_index.size, dtype=pl.Categorical),
                    "case_id": pl.Series(case_ids[case_index], dtype=pl.Categorical),
                    "slice": pl.Series(slice_of[mask_index], dtype=pl.Categorical),
                    "slice_value": pl.Series(value_of[mask_index], dtype=pl.Categorical),
                    "metric": pl.Series([metric] * case_index.size, dtype=pl.Categorical),
                    "value": v[metric][r][case_index],
                }))
        frame = pl.concat(parts)
        print(f"\nlong frame: {frame.height:,} rows")
        out, _ = timed("compare_frame (whole long frame, all rows)",
                       lambda: ps.compare_frame(frame.with_columns(pl.col(pl.Categorical).cast(pl.String)),
                                                "reference"))
        print(out.filter(pl.col("slice") == "all").select("run_id", "metric", "n", "delta", "ci_low", "ci_high",
                                                         "p_value").head(5))


if __name__ == "__main__":
    main()
