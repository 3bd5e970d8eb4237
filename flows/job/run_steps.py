"""The per-run steps of the job, each a function of plain values that any executor runs
(flows/job/job.py in this process, flows/job/prefect_flows.py as Prefect tasks): evaluate one batch
of staged cases into its parts, and finish a run into what its commit makes visible.

Every step writes fresh files (flows/warehouse/warehouse.py `new_part`) that stay invisible until the
job's one commit; a step computed twice leaves only an unreferenced file behind, which the
transaction removes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import duckdb
import polars as pl

from ...transforms.aggregates import aggregates, merge_partials
from ...transforms.case_metrics import scored_cases
from ...transforms.errors import RejectTally
from ...transforms.rankings import retrieved_items
from ...transforms.run_summary import add_counts, run_summary
from ..sources.ingest import IngestAccount
from ..sources.reject_stream import REJECT_COLUMNS, RejectFiles
from ..warehouse.part_files import write_parquet
from ..warehouse.warehouse import PartFile, RunCommit, Warehouse, new_part
from .plan import RunPlan

REJECTS_SCHEMA = {"run_id": pl.String, **REJECT_COLUMNS}


@dataclass(frozen=True)
class TxnRef:
    """A transaction as a task on another process sees it: where to write, under which id,
    and for which runs (those it named in its marker: a part of any other run would be
    left behind by its cleanup, which looks in their folders only)."""

    root: Path  # where its parts are written: the warehouse's folder, or the folder they are staged in
    id: str
    runs: frozenset[str] | None = None  # None: any run (the cleanup then looks everywhere)
    warehouse: str | None = None  # the warehouse as given (a folder or a URI): where committed parts are read

    def new_part(self, table: str, run_id: str, root: Path | None = None) -> Path:
        """A fresh file for a part, under `root` (default: the transaction's)."""
        if self.runs is not None and run_id not in self.runs:
            raise ValueError(f"transaction {self.id} did not plan to write run {run_id!r}")
        return new_part(root or self.root, self.id, table, run_id)

    def write_part(self, frame: pl.DataFrame, table: str, run_id: str, **parquet) -> PartFile:
        """Write `frame` as a fresh part of `table` for `run_id` (`write_parquet`'s options).
        In a bucket the part is put under its key here, by the task that wrote it, from this
        machine's work folder of the warehouse (a Dask worker's own: it shares no disk with the
        driver), and only its description travels; the commit finds it there."""
        bucket = bucket_warehouse(self.warehouse) if self.warehouse is not None else None
        root = bucket.root if bucket is not None else self.root
        part = write_parquet(frame, self.new_part(table, run_id, root), root, **parquet)
        if bucket is not None:
            bucket.put_part(part)
        return part


@lru_cache(maxsize=8)
def bucket_warehouse(location: str) -> Warehouse | None:
    """The warehouse at `location` as this process writes to it when it is in a bucket (one
    client per process, not one per part); None for a local folder."""
    warehouse = Warehouse(location)
    return warehouse if warehouse.remote else None


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
    rejects: RejectTally
    commit: RunCommit


@dataclass(frozen=True)
class Loaded:
    run_id: str
    commit: RunCommit
    rejects: RejectTally = RejectTally()


Outcome = Reused | Refused | Loaded


def score_batch(plan: RunPlan, staged: pl.DataFrame, attempt: int, index: int, txn: TxnRef,
                   con: duckdb.DuckDBPyConnection | None = None) -> BatchParts:
    """Rankings, cases, case metrics and partial sums of one batch, written as parts."""
    run_id = plan.run_id
    retrieved = retrieved_items(staged, run_id)
    # Arrow writes the batch's largest file on one core, on a thread of its own, while Polars
    # and DuckDB make the rest; card_id is the views' to compute (flows/warehouse/views.py DERIVED_COLUMNS).
    with ThreadPoolExecutor(max_workers=1) as writer:
        written = writer.submit(
            txn.write_part, retrieved.drop("case_no", "card_id"), "retrieved", run_id,
            compression="lz4", statistics=False, dictionary=["run_id", "case_id"],
        )
        evaluated = scored_cases(staged, retrieved, run_id, plan.headline_k, plan.ks, con)
        # A dictionary only for the columns of few values (hashing each case's own strings
        # bought nothing), and lz4 over zstd: 27 ms less CPU a batch, 0.2 MB more.
        parts = {
            "cases": txn.write_part(
                evaluated.cases, "cases", run_id, compression="lz4",
                dictionary=["run_id", "locale", "category", "gold_source"],
            ),
            "case_metrics": txn.write_part(evaluated.case_metrics, "case_metrics", run_id, compression="lz4"),
        }
        parts["retrieved"] = written.result()
    return BatchParts(attempt, index, parts, evaluated.partials, evaluated.counts)


def write_rejects(run_id: str, rejects: RejectFiles, txn: TxnRef) -> list[PartFile]:
    """The run's `rejects` parts: one per file the ingest streamed its rejects to (read one at
    a time), or one empty part when there were none, so that a run's table is always there."""
    frames = rejects.frames() if rejects.files else iter([pl.DataFrame(schema=REJECT_COLUMNS)])
    return [
        txn.write_part(frame.select(pl.lit(run_id).alias("run_id"), pl.all()).cast(REJECTS_SCHEMA), "rejects", run_id)
        for frame in frames
    ]


def finish_run(plan: RunPlan, account: IngestAccount, batches: list[BatchParts], txn: TxnRef) -> Outcome:
    """The run's outcome once its batches are evaluated: reused (the same bytes were found
    committed), refused (rejects in strict mode) or loaded (aggregates merged from every
    batch's partial sums, the `runs` row and the rejects written)."""
    run_id = plan.run_id
    digest = account.facts.digest
    if account.same_bytes:
        return Reused(run_id, "same bytes", RunCommit(runs_row_with_kb(plan, txn), plan.committed.evaluation_key,
                                                      plan.source(digest)))
    rejects = write_rejects(run_id, account.rejects, txn)
    if account.refused:
        return Refused(run_id, account.rejects.tally, RunCommit({"rejects": rejects}, None, None))
    mine = sorted((b for b in batches if b.attempt == account.attempt), key=lambda b: b.index)
    key = plan.evaluation_key(digest)
    manifest = plan.folder.manifest
    if account.tag is not None:  # kept in the run's config, where export finds it (trec_eval's runid)
        manifest = replace(manifest, config={**manifest.config, "tag": account.tag})
    summary = run_summary(
        manifest, add_counts([b.counts for b in mine]), account.rejects.count, plan.headline_k, plan.ks,
        plan.relevance_level, str(plan.cases_file), digest, key, *kb_columns(plan.kb),
    )
    tables = {table: [b.parts[table] for b in mine] for table in ("cases", "retrieved", "case_metrics")}
    tables["aggregates"] = [txn.write_part(aggregates(merge_partials([b.partials for b in mine])), "aggregates", run_id)]
    tables["runs"] = [txn.write_part(summary, "runs", run_id)]
    tables["rejects"] = rejects
    return Loaded(run_id, RunCommit(tables, key, plan.source(digest)), account.rejects.tally)


def kb_columns(kb: dict | None) -> tuple[str | None, str | None]:
    """The `runs` row's kb_uri and kb_digest of a KB record (flows/inputs/kb.py `kb_record`)."""
    return (None, None) if kb is None else (kb["uri"], kb["digest"])


def runs_row_with_kb(plan: RunPlan, txn: TxnRef) -> dict[str, list[PartFile]]:
    """A reused run's tables to commit: none when it recorded the job's KB; else its `runs` row
    written again with the job's (the one row read from its committed part, no case read)."""
    if not plan.kb_changed:
        return {}
    warehouse = Warehouse(txn.warehouse if txn.warehouse is not None else txn.root)
    committed = pl.concat([pl.read_parquet(warehouse.part_file(part)) for part in plan.committed.tables["runs"]],
                          how="diagonal_relaxed")
    uri, digest = kb_columns(plan.kb)
    row = committed.with_columns(pl.lit(uri, pl.String).alias("kb_uri"), pl.lit(digest, pl.String).alias("kb_digest"))
    return {"runs": [txn.write_part(row, "runs", plan.run_id)]}


def reuse_run(plan: RunPlan, txn: TxnRef) -> Reused:
    """A run whose committed evaluation stands (`plan.reuse`): a job with another KB than the
    one it recorded commits its `runs` row again with the new KB (SPEC 16), since no figure
    depends on the KB; its artifacts are not read."""
    if not plan.kb_changed:
        return Reused(plan.run_id, plan.reuse)
    source = {**plan.committed.source, "kb": plan.kb}
    return Reused(plan.run_id, f"{plan.reuse}, with another KB",
                  RunCommit(runs_row_with_kb(plan, txn), plan.committed.evaluation_key, source))
