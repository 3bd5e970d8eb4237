"""Shared fixtures: run folders written from case dicts, and the real pipeline over them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from flows.pipeline import EvaluationOptions, evaluate
from flows.warehouse import Warehouse

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RUNS = REPO / "data" / "runs"
SAMPLE_KB = REPO / "data" / "kb" / "cards.jsonl"


def chunk(chunk_id: str, parent_id: str | None = None, score: float | None = None) -> dict:
    item: dict = {"id": chunk_id}
    if parent_id is not None:
        item["parent_id"] = parent_id
    if score is not None:
        item["score"] = score
    return item


def case(case_id: str, retrieved: list, gold=None, *, locale="en", category="golden", **extra) -> dict:
    record = {"case_id": case_id, "locale": locale, "category": category, "retrieved_context": retrieved}
    if gold is not None:
        record["must_cite_one_of"] = gold
    record.update(extra)
    return record


def write_run(
    runs_root: Path,
    run_id: str,
    cases: list[dict] | None = None,
    *,
    top_k: int = 4,
    lines: list[str] | None = None,
    created_at: str = "2026-11-01T02:00:00Z",
) -> Path:
    """A run folder with a manifest and a cases.jsonl made of `cases` (or raw `lines`)."""
    run_dir = runs_root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"run_id": run_id, "created_at": created_at, "retrieval_top_k": top_k, "config": {}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    if lines is None:
        lines = [json.dumps(c, ensure_ascii=False) for c in cases or []]
    (run_dir / "cases.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return run_dir


class Evaluated:
    """The warehouse after the real main job has run over some run folders."""

    def __init__(self, warehouse: Path):
        self.warehouse = Warehouse(warehouse)

    def view(self, name: str) -> pl.DataFrame:
        with self.warehouse.connect() as con:
            return con.table(name).pl()

    def metrics(self, case_id: str, k: int) -> dict:
        rows = self.view("case_metrics").filter((pl.col("case_id") == case_id) & (pl.col("k") == k))
        assert rows.height == 1, f"expected one row for {case_id} at k={k}, got {rows.height}"
        return rows.row(0, named=True)


@pytest.fixture
def evaluate_cases(tmp_path):
    """Run the main job over `cases` (one run) and return the warehouse to read."""

    def run(cases: list[dict], *, ks=(), k=None, top_k=4, run_id="run-a", allow_rejects=False) -> Evaluated:
        runs = tmp_path / "runs"
        write_run(runs, run_id, cases, top_k=top_k)
        options = EvaluationOptions(
            runs=runs / run_id, warehouse=tmp_path / "warehouse", k=k, ks=tuple(ks), allow_rejects=allow_rejects
        )
        evaluate(options)
        return Evaluated(tmp_path / "warehouse")

    return run


@pytest.fixture
def sample_copy(tmp_path) -> Path:
    """A private copy of the committed sample runs and KB."""
    target = tmp_path / "data"
    shutil.copytree(SAMPLE_RUNS, target / "runs")
    (target / "kb").mkdir()
    shutil.copy(SAMPLE_KB, target / "kb" / "cards.jsonl")
    return target
