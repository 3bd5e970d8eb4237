"""Builders the tests share: case records, run folders, the real job over them, and the pure
evaluation steps over records in memory."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
from retrieval_eval.flows.job.job import InProcess, JobOptions, JobResult, run_job
from retrieval_eval.flows.warehouse.committed import read_state
from retrieval_eval.flows.warehouse.views import open_reader
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.transforms.aggregates import aggregates, merge_partials
from retrieval_eval.transforms.case_metrics import cutoffs, scored_cases
from retrieval_eval.transforms.case_schema import CLEAN_CASES_SCHEMA
from retrieval_eval.transforms.manifest import Manifest
from retrieval_eval.transforms.rankings import retrieved_items
from retrieval_eval.transforms.records import judge_line
from retrieval_eval.transforms.run_summary import run_summary
from retrieval_eval.transforms.staging import stage

REPO = Path(__file__).resolve().parent.parent
SAMPLE_RUNS = REPO / "data" / "runs"
SAMPLE_KB = REPO / "data" / "kb" / "cards.jsonl"
SAMPLE_BASELINE = REPO / "data" / "baselines" / "baseline.json"
SAMPLE_RUN_IDS = sorted(p.name for p in SAMPLE_RUNS.iterdir() if (p / "manifest.json").is_file())


def copy_sample(root: Path) -> Path:
    """The committed sample runs and KB laid out under `root` as in the repository."""
    import shutil

    shutil.copytree(SAMPLE_RUNS, root / "data" / "runs")
    (root / "data" / "kb").mkdir()
    shutil.copy(SAMPLE_KB, root / "data" / "kb" / "cards.jsonl")
    return root


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


def write_run(runs_root: Path, run_id: str, cases: list[dict] | None = None, *, top_k: int = 4,
              lines: list[str] | None = None, created_at: str = "2026-11-01T02:00:00Z", gz: bool = False) -> Path:
    """A run folder with a manifest and a cases.jsonl made of `cases` (or raw `lines`)."""
    run_dir = runs_root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"run_id": run_id, "created_at": created_at, "retrieval_top_k": top_k, "config": {}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    if lines is None:
        lines = [json.dumps(c, ensure_ascii=False) for c in cases or []]
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    if gz:
        import gzip

        (run_dir / "cases.jsonl.gz").write_bytes(gzip.compress(text))
    else:
        (run_dir / "cases.jsonl").write_bytes(text)
    return run_dir


def job_options(runs: Path, warehouse: Path, **options) -> JobOptions:
    """JobOptions with the report written beside the warehouse, not into the repository."""
    options.setdefault("report_dir", Path(warehouse).parent / (Path(warehouse).name + "-report"))
    return JobOptions(runs=Path(runs), warehouse=Path(warehouse), **options)


def evaluate(options: JobOptions) -> JobResult:
    """The real main job in this process, as `retrieval-eval run` runs it."""
    if options.report_dir == JobOptions().report_dir:
        options = replace(options, report_dir=Path(options.warehouse).parent / (Path(options.warehouse).name + "-report"))
    steps = InProcess(batch_items=options.batch_items)
    try:
        return run_job(options, steps)
    finally:
        steps.close()


class Evaluated:
    """A warehouse after the real job, read through its views."""

    def __init__(self, warehouse: Path):
        self.warehouse = Warehouse(warehouse)

    def view(self, name: str) -> pl.DataFrame:
        with open_reader(self.warehouse, read_state(self.warehouse)) as con:
            return con.table(name).pl()

    def metrics(self, case_id: str, k: int) -> dict:
        return one_row(self.view("case_metrics"), case_id, k)


def one_row(case_metrics: pl.DataFrame, case_id: str, k: int) -> dict:
    rows = case_metrics.filter((pl.col("case_id") == case_id) & (pl.col("k") == k))
    assert rows.height == 1, f"expected one row for {case_id} at k={k}, got {rows.height}"
    return rows.row(0, named=True)


@dataclass(frozen=True)
class Scored:
    """The tables the pure steps make of some records, in memory (no warehouse, no file)."""

    tables: dict[str, pl.DataFrame]

    def view(self, name: str) -> pl.DataFrame:
        return self.tables[name]

    def metrics(self, case_id: str, k: int) -> dict:
        return one_row(self.tables["case_metrics"], case_id, k)


@cache
def scoring_connection() -> duckdb.DuckDBPyConnection:
    """One in-memory DuckDB for every `score` of the session (opening one costs ~0.04 s)."""
    return duckdb.connect()


def score(records: list[dict], *, k: int = 4, ks=(), relevance_level: int = 1, run_id: str = "run-a") -> Scored:
    """The pure steps over `records`, each first judged by the record rules (a record they
    refuse fails the test): staging, rankings, case metrics, aggregates and the runs row."""
    clean = []
    for record in records:
        verdict = judge_line(json.dumps(record, ensure_ascii=False).encode())
        assert verdict.reason is None, verdict.reason
        clean.append(json.loads(verdict.clean))
    staged = stage(pa.Table.from_pylist(clean, schema=CLEAN_CASES_SCHEMA), relevance_level)
    retrieved = retrieved_items(staged, run_id)
    evaluated = scored_cases(staged, retrieved, run_id, k, cutoffs(k, ks), scoring_connection())
    manifest = Manifest(run_id, "2026-11-01T02:00:00Z", datetime(2026, 11, 1, 2, tzinfo=UTC), k, None, None, {})
    runs = run_summary(manifest, evaluated.counts, 0, k, cutoffs(k, ks), relevance_level, "memory", "-", "-")
    return Scored({
        "retrieved": retrieved.drop("case_no"),
        "cases": evaluated.cases,
        "case_metrics": evaluated.case_metrics,
        "aggregates": aggregates(merge_partials([evaluated.partials])),
        "runs": runs,
    })


def cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600,
        peak_rss: bool = False, stdout: Path | None = None) -> subprocess.CompletedProcess:
    """`retrieval-eval ARGS` as a user runs it, in a process of its own. With `peak_rss`, the
    result also says the process's peak resident memory (`peak_rss_mb`, from wait4); with
    `stdout`, the output goes to that file (result.stdout is then empty)."""
    command = [sys.executable, "-m", "retrieval_eval", *args]
    if not peak_rss and stdout is None:
        return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    import os
    import tempfile

    with open(stdout or os.devnull, "wb") as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        err.seek(0)
        result = subprocess.CompletedProcess(command, os.waitstatus_to_exitcode(status), "", err.read().decode())
    result.peak_rss_mb = usage.ru_maxrss / 1024
    return result


def reader(warehouse) -> duckdb.DuckDBPyConnection:
    """A connection with the views of the warehouse at `warehouse` (a path or a Warehouse)."""
    warehouse = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)
    return open_reader(warehouse, read_state(warehouse))
