"""Defaults of every path and threshold, in one place (SPEC 5 and 8)."""

from __future__ import annotations

from pathlib import Path

RUNS = Path("data/runs")
KB = Path("data/kb/cards.jsonl")
WAREHOUSE = Path("data/warehouse")
REPORT_DIR = Path("data/reports")
BASELINE = Path("data/baselines/baseline.json")

TOLERANCE = 0.05
LOCALE_TOLERANCE = 0.08

NIGHTLY_CRON = "0 2 * * *"  # the served deployment's schedule (UTC)

RETENTION_DAYS = 7.0  # superseded files are kept this long (SPEC 10)
TREC_TOP_K = 10  # headline k of `run --trec-run` without --k: trec_eval's usual cutoff (P_10, ndcg_cut_10)
