"""The per-run steps of the job, each a function of plain values that any executor runs
(flows/job.py in this process, flows/prefect_flows.py as Prefect tasks): evaluate one batch
of staged cases into its parts, and finish a run into what its commit makes visible.

Every step writes fresh files (flows/warehouse.py `new_part`) that stay invisible until the
job's one commit; a step computed twice leaves only an unreferenced file behind, which the
transaction removes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from ..transforms.aggregates import aggregates, merge_partials
from ..transforms.case_metrics import evaluate_cases
from ..transforms.errors import Reject
from ..transforms.rankings import retrieved_items
from ..transforms.run_summary import add_counts, run_summary
from .engine import write_parquet
from .ingest import IngestAccount
from .plan import RunPlan
from .warehouse import PartFile, RunCommit, new_part

REJECTS_SCHEMA = {"run_id": pl.String, "source_file": pl.String, "line": pl.Int64, "reason": pl.String, "raw": pl.String}


@dataclass(frozen=True)
class TxnRef:
    """A transaction as a task on another process sees it: where to write, under which id,
    and for which runs (those it named in its marker: a part of any other run would be
    left behind by its cleanup, which looks in their folders only)."""

    root: Path
    id: str
    runs: frozenset[str] | None = None  # None: any run (the cleanup then looks everywhere)

    def new_part(self, table: str, run_id: str) -> Path:
        if self.runs is not None and run_id not in self.runs:
            raise ValueError(f"transaction {self.id} did not plan to write run {run_id!r}")
        return new_part(self.root, self.id, table, run_id)


@dataclass(frozen=True)
class BatchParts:
    """What evaluating one batch wrote (three tables), its partial sums and its counts."""

    attempt: int
    index: int
    parts: dict[str, PartFile]
    partials: pl.DataFrame
    counts: dict[str, int]


@dataclass(frozen=True)
class Reused:
    """The warehouse's evaluation of the run stands (`commit` records a new stamp, if any)."""

    run_id: str
    why: str
    commit: RunCommit | None = None


@dataclass(frozen=True)
class Refused:
    """The run had rejected records and --allow-rejects was not given: only its rejects land."""

    run_id: str
    rejects: list[Reject]
    commit: RunCommit


@dataclass(frozen=True)
class Loaded:
    run_id: str
    commit: RunCommit
    rejects: list[Reject] = field(default_factory=list)


Outcome = Reused | Refused | Loaded


def evaluate_batch(plan: RunPlan, staged: pl.DataFrame, attempt: int, index: int, txn: TxnRef,
                   con: duckdb.DuckDBPyConnection | None = None) -> BatchParts:
    """Rankings, cases, case metrics and partial sums of one batch, written as parts."""
    run_id = plan.run_id
    retrieved = retrieved_items(staged, run_id)
    # Arrow writes the batch's largest file on one core, on a thread of its own, while Polars
    # and DuckDB make the rest; card_id is the views' to compute (flows/views.py DERIVED_COLUMNS).
    with ThreadPoolExecutor(max_workers=1) as writer:
        written = writer.submit(
            write_parquet, retrieved.drop("case_no", "card_id"), txn.new_part("retrieved", run_id), txn.root,
            compression="lz4", statistics=False, dictionary=["run_id", "case_id"],
        )
        evaluated = evaluate_cases(staged, retrieved, run_id, plan.headline_k, plan.ks, con)
        # A dictionary only for the columns of few values (hashing each case's own strings
        # bought nothing), and lz4 over zstd: 27 ms less CPU a batch, 0.2 MB more.
        parts = {
            "cases": write_parquet(
                evaluated.cases, txn.new_part("cases", run_id), txn.root, compression="lz4",
                dictionary=["run_id", "locale", "category", "gold_source"],
            ),
            "case_metrics": write_parquet(
                evaluated.case_metrics, txn.new_part("case_metrics", run_id), txn.root, compression="lz4",
            ),
        }
        parts["retrieved"] = written.result()
    return BatchParts(attempt, index, parts, evaluated.partials, evaluated.counts)


def rejects_frame(run_id: str, rejects: list[Reject]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "run_id": [run_id] * len(rejects),
            "source_file": [r.source_file for r in rejects],
            "line": [r.line for r in rejects],
            "reason": [r.reason for r in rejects],
            "raw": [r.raw for r in rejects],
        },
        schema=REJECTS_SCHEMA,
    )


def finish_run(plan: RunPlan, account: IngestAccount, batches: list[BatchParts], txn: TxnRef) -> Outcome:
    """The run's outcome once its batches are evaluated: reused (the same bytes were found
    committed), refused (rejects in strict mode) or loaded (aggregates merged from every
    batch's partial sums, the `runs` row and the rejects written)."""
    run_id = plan.run_id
    digest = account.facts.digest
    if account.same_bytes:
        source = plan.source(digest)
        return Reused(run_id, "same bytes", RunCommit({}, plan.committed.evaluation_key, source))
    rejects = write_parquet(rejects_frame(run_id, account.rejects), txn.new_part("rejects", run_id), txn.root)
    if account.refused:
        return Refused(run_id, account.rejects, RunCommit({"rejects": [rejects]}, None, None))
    mine = sorted((b for b in batches if b.attempt == account.attempt), key=lambda b: b.index)
    key = plan.evaluation_key(digest)
    summary = run_summary(
        plan.folder.manifest, add_counts([b.counts for b in mine]), len(account.rejects), plan.headline_k, plan.ks,
        plan.relevance_level, str(plan.cases_file), digest, key,
    )
    tables = {table: [b.parts[table] for b in mine] for table in ("cases", "retrieved", "case_metrics")}
    tables["aggregates"] = [
        write_parquet(aggregates(merge_partials([b.partials for b in mine])), txn.new_part("aggregates", run_id), txn.root)
    ]
    tables["runs"] = [write_parquet(summary, txn.new_part("runs", run_id), txn.root)]
    tables["rejects"] = [rejects]
    return Loaded(run_id, RunCommit(tables, key, plan.source(digest)), account.rejects)
