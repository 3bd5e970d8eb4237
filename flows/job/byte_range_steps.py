"""A run evaluated by tasks that share no disk with the driver (SPEC 14: a warehouse in a
bucket, Dask workers on other machines). Every task reads its input from the store and puts
the parts it writes under fresh keys itself (flows/job/run_steps.py `TxnRef.write_part`); what
a later step needs travels as a returned value, never as a file of the driver's.

A run's cases file is cut into byte ranges of whole lines (`RunSource.byte_ranges`), each
read from the store (`RunSource.copy_range`), staged and evaluated by one task
(`evaluate_range`). The rules of the whole run hold as for one read of the file
(flows/sources/ingest.py): the fast read must hold in every range, no case id may repeat
across them (each range returns the 64-bit hashes of its ids), and the file's digest is of
all its bytes (`RunSource.digest`, a task of its own). When any of that fails, the range's
parts are left uncommitted and the whole file goes through ingest's rules in one task
(`evaluate_whole_run`), which judges every line, counts and writes the rejects, and finishes
the run; so does any run its source gives as one range (a .gz, a TREC run, another tool's
export).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from ...transforms.errors import NotClean
from ...transforms.staging import stage
from ..sources.case_file import CaseFileRead, FileFacts
from ..sources.ingest import FAST, IngestAccount
from .plan import RunPlan
from .run_steps import BatchParts, Outcome, TxnRef, finish_run, score_batch

# About this many bytes of a cases file per retrieved item (ingest's PARTITION_ITEMS of
# 1M items are about 220 MB of JSON): a range holds about one partition's items.
BYTES_PER_ITEM = 220


@dataclass(frozen=True)
class ByteRange:
    number: int  # its place in the file: the run's batches are in this order
    start: int
    end: int


@dataclass(frozen=True)
class RangeResult:
    """What evaluating one byte range gave: its batches' parts and sums when the fast read
    held for it (`clean`), and the hashes of its case ids for the run's check across ranges."""

    number: int
    clean: bool
    n_records: int
    case_hashes: pl.Series | None
    batches: list[BatchParts]


def byte_ranges(plan: RunPlan, batch_items: int) -> list[ByteRange]:
    """A run's cases file cut into ranges of whole lines of about `batch_items` items each, as
    its source cuts it (a single range for a source that cannot be evaluated range by range)."""
    n = max(1, math.ceil(plan.folder.cases_size() / (batch_items * BYTES_PER_ITEM)))
    return [ByteRange(number, start, end) for number, (start, end) in enumerate(plan.folder.byte_ranges(n))]


def evaluate_range(plan: RunPlan, byte_range: ByteRange, txn: TxnRef, batch_items: int) -> RangeResult:
    """Read one range of the run's cases file from the store into a folder of this process,
    stage it in batches and evaluate each into parts (put by `TxnRef.write_part`). A range the
    fast read cannot take stops at once: the run then goes through `evaluate_whole_run`."""
    batches, hashes, n_records = [], [], 0
    with tempfile.TemporaryDirectory(prefix="retrieval-eval-range-") as folder:
        path = plan.folder.copy_range(byte_range.start, byte_range.end, Path(folder))
        try:
            with CaseFileRead(path) as read:
                for index, table in enumerate(read.tables(batch_items)):
                    staged = stage(table, plan.relevance_level)
                    hashes.append(staged["case_id"].hash())  # as flows/sources/ingest.py checks one read
                    n_records += staged.height
                    batches.append(score_batch(plan, staged, FAST, index, txn))
                clean = read.facts().fast_read_holds(n_records)
        except NotClean:
            clean = False
    if not clean:
        return RangeResult(byte_range.number, False, 0, None, [])
    return RangeResult(byte_range.number, True, n_records, pl.concat(hashes), batches)


def ranged_account(plan: RunPlan, results: list[RangeResult], digest: str) -> tuple[IngestAccount, list[BatchParts]] | None:
    """The run's account and its batches in file order when its ranges together are what one
    fast read of the whole file is: every range clean, at least one record, and no case id
    hash twice across them (a collision, as in one read, only sends the file to the rules).
    None otherwise."""
    ordered = sorted(results, key=lambda result: result.number)
    if not all(result.clean for result in ordered):
        return None
    n_records = sum(result.n_records for result in ordered)
    if n_records == 0 or pl.concat([result.case_hashes for result in ordered]).n_unique() < n_records:
        return None
    batches = [batch for result in ordered for batch in result.batches]
    batches = [replace(batch, index=index) for index, batch in enumerate(batches)]
    facts = FileFacts(digest, None, None, True)  # what the strict parser's read records: the digest
    return IngestAccount(facts, FAST, n_records, same_bytes=digest == plan.committed_digest), batches


def evaluate_whole_run(plan: RunPlan, txn: TxnRef, batch_items: int) -> Outcome:
    """One run in one task, as in-process: its cases file copied from the store into a folder
    of this process, read through ingest's rules (rejects, the line-by-line pass, a .gz), its
    batches evaluated and the run finished, rejects and all, before the folder goes."""
    with tempfile.TemporaryDirectory(prefix="retrieval-eval-run-") as scratch:
        ingest = plan.folder.ingest(Path(scratch), allow_rejects=plan.allow_rejects, relevance_level=plan.relevance_level,
                                    batch_items=batch_items, committed_digest=plan.committed_digest)
        evaluated = [score_batch(plan, batch.frame, batch.attempt, batch.index, txn) for batch in ingest.batches()]
        return finish_run(plan, ingest.account, evaluated, txn)
