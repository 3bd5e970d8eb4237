"""Ingest: one run's cases file → staged cases, and the account of its records.

The fast path is one streaming read with Arrow's JSON reader and the schema of the fields
the metrics need (transforms/case_file.py). That reader is strict about types — a number where a
string belongs, a string for a score, a repeated key, malformed JSON: each stops it — and
what it cannot see (nulls, empty strings, non-finite scores) is checked in Polars on each
batch (`stage`). Chunk text and answers are parsed but never converted. In-process, the
staged cases go to the evaluation in batches of bounded size (`stream_staged`); for
scale-out each batch is written as one Parquet partition, one task per partition
(`stage_partitions`). Only a file with a bad record takes the line-by-line path of
transforms/records.py, which names each bad record and feeds the valid lines back through
the same pass (`ingest`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
from blake3 import blake3

from transforms import engine
from transforms.case_file import BLOCK_BYTES, NotClean, batches
from transforms.errors import InputError, Reject
from transforms.manifest import Manifest
from transforms.records import open_text_lines, split_records

# In-process, staged cases are evaluated in batches of about this many retrieved items
# (25k cases × 20 items; a batch's frames stay within a few hundred MB). Half the earlier
# million: less is left to evaluate when the parse ends (100k cases: 2.16 → 2.07 s median
# over 12 runs, peak RSS 686 → 523 MB; 250k measured the same as 500k, with twice the files).
BATCH_ITEMS = 500_000
# For scale-out, a batch is one staged partition and one task: larger, as a task costs
# about 0.1 s on Dask (about 220 MB of JSON each).
PARTITION_ITEMS = 1_000_000
NEWLINE, OPEN_BRACE = ord("\n"), ord("{")

T = TypeVar("T")
Streamed = tuple[T, int]  # what a fast pass made of a file, and how many records it read

REJECTS_SCHEMA = {
    "run_id": pl.String,
    "source_file": pl.String,
    "line": pl.Int64,
    "reason": pl.String,
    "raw": pl.String,
}


@dataclass(frozen=True)
class StagedRun:
    """One run's valid records as Parquet partitions (the scale-out path), and the account
    of its records. `reused` holds the committed parts of an unchanged run instead."""

    run_id: str
    partitions: list[Path]  # empty when the run was refused (rejects, strict mode) or reused
    n_cases: int
    digest: str  # BLAKE3 of manifest.json and the cases file
    rejects: list[Reject] = field(default_factory=list)
    loaded: bool = True
    reused: dict[str, list[Path]] | None = None


@dataclass(frozen=True)
class FileFacts:
    """What one read of a run's files tells: their content digest, and the shape of the
    cases file's lines. Arrow's reader takes JSON values wherever they stand, so the fast
    path holds only when every line is one record: as many records as lines, and every
    line opening with '{' (a blank line, a record split over lines or two on one line
    each break that; the line-by-line pass then judges every line)."""

    digest: str
    lines: int
    object_lines: int

    def one_record_per_line(self, n_records: int) -> bool:
        return n_records == self.lines == self.object_lines


def _stamp(manifest: Manifest) -> list:
    """Path, size, mtime, inode and ctime of the run's files: a copy that keeps the size and
    restores the mtime (`cp -p`, rsync, tar) still gets a new inode or ctime."""
    stats = [(f, f.stat()) for f in (manifest.run_dir / "manifest.json", manifest.cases_file)]
    return [[str(f), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns] for f, st in stats]


def known_facts(manifest: Manifest, stat_cache: Path) -> FileFacts | None:
    """The facts recorded for these files when their stamp (size, times, inode) is
    unchanged since they were computed (the way git decides what to hash again)."""
    try:
        cached = json.loads(stat_cache.read_text())
        if cached.get("stamp") == _stamp(manifest):
            return FileFacts(**cached["facts"])
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        pass  # none yet, or unreadable: read again
    return None


class _LineShape:
    """Counts line starts, and those at a '{', over the blocks of a file."""

    def __init__(self) -> None:
        self.lines = self.object_lines = 0
        self._at_line_start = True

    def update(self, block: bytes) -> None:
        if not block:
            return
        data = np.frombuffer(block, dtype=np.uint8)
        starts = np.flatnonzero(data[:-1] == NEWLINE) + 1  # lines that start inside this block
        self.lines += int(self._at_line_start) + len(starts)
        self.object_lines += int(self._at_line_start and data[0] == OPEN_BRACE)
        self.object_lines += int(np.count_nonzero(data[starts] == OPEN_BRACE))
        self._at_line_start = bool(data[-1] == NEWLINE)


def _blocks(stream: IO[bytes]) -> Iterator[bytes]:
    return iter(lambda: stream.read(BLOCK_BYTES), b"")


def file_facts(manifest: Manifest, stat_cache: Path | None = None) -> FileFacts:
    """BLAKE3 over the run's manifest.json and cases file, in that order (a cryptographic
    hash about 2.5× faster than sha256 here: 0.14 s per 440 MB on one core), and the cases
    file's line shape (0.05 s more); recorded in `stat_cache` with the files' stamp."""
    stamp = _stamp(manifest)
    digest = blake3()
    shape = _LineShape()
    cases = manifest.cases_file
    with open(manifest.run_dir / "manifest.json", "rb") as handle:
        digest.update(handle.read())
    with open(cases, "rb") as handle:
        for block in _blocks(handle):
            digest.update(block)
            if cases.suffix != ".gz":
                shape.update(block)
    if cases.suffix == ".gz":
        with open_text_lines(cases) as text:
            for block in _blocks(text):
                shape.update(block)
    facts = FileFacts("blake3:" + digest.hexdigest(), shape.lines, shape.object_lines)
    if stat_cache is not None:
        stat_cache.parent.mkdir(parents=True, exist_ok=True)
        written = stat_cache.with_suffix(".tmp")
        written.write_text(json.dumps({"stamp": stamp, "facts": facts.__dict__}))
        written.replace(stat_cache)  # whole or not at all
    return facts


def facts_beside(
    manifest: Manifest,
    stat_cache: Path,
    work: Callable[[Callable[[], FileFacts], threading.Event], T],
    reusable: Callable[[str], bool],
) -> tuple[str, T | None]:
    """The run's content digest, and the result of `work(facts, stop)` unless the digest
    shows that the run is already evaluated (`reusable`), in which case the result is None.

    Files whose stamp is known are not read for their facts. Unseen ones are read here
    while `work` (the fast pass) runs in a worker thread — 0.2 s of one core per 440 MB,
    beside a pass of seconds; `facts()` waits for them. When the bytes turn out to be known
    (a touched file), the pass is stopped at its next batch and its output left
    uncommitted.
    """
    known = known_facts(manifest, stat_cache)
    stop = threading.Event()
    if known:
        return known.digest, None if reusable(known.digest) else work(lambda: known, stop)
    facts: Future[FileFacts] = Future()
    with ThreadPoolExecutor(max_workers=1) as worker:
        running = worker.submit(work, facts.result, stop)
        try:
            facts.set_result(file_facts(manifest, stat_cache))
        except BaseException as error:  # Ctrl-C or a failed read: stop the pass, do not wait for it
            stop.set()
            facts.set_exception(error)
            raise
        digest = facts.result().digest
        if reusable(digest):
            stop.set()
            return digest, None
        return digest, running.result()


def ingest(
    source: Path,
    scratch: Path,
    display_name: str,
    allow_rejects: bool,
    fast_pass: Callable[[Path, int], Streamed[T] | None],
    facts: Callable[[], FileFacts],
) -> tuple[Streamed[T] | None, list[Reject]]:
    """Run `fast_pass(path, block_bytes)` (returns None when a record breaks a rule) over
    `source` and check that it read one record per line (`facts`); otherwise name every
    bad record line by line and run it again over the valid lines. Returns (result,
    rejects); the result is None when the run is refused (rejects in strict mode)."""
    result = fast_pass(source, BLOCK_BYTES)
    if result is not None and facts().one_record_per_line(result[1]):
        return result, []
    clean = scratch / "clean.jsonl"
    with open(clean, "wb") as clean_out:
        account = split_records(source, display_name, clean_out)
    if account.valid + len(account.rejects) == 0:
        raise InputError(f"{display_name}: holds no records")
    if account.rejects and not allow_rejects:
        return None, account.rejects
    result = fast_pass(clean, max(BLOCK_BYTES, account.longest_valid + 1))
    if result is None or result[1] != account.valid:
        raise RuntimeError(f"{display_name}: records that passed the rules failed the fast path's checks")
    clean.unlink()
    return result, account.rejects


STAGED_ITEM = {"id": pl.String, "parent_id": pl.String, "score": pl.Float64}
NO_IDS = pl.lit([], dtype=pl.List(pl.String))
NO_ITEMS = pl.lit([], dtype=pl.List(pl.Struct(STAGED_ITEM)))


def _missing(text: pl.Expr) -> pl.Expr:
    """Null or empty: what a required string may not be."""
    return text.is_null() | (text == "")


def stage(batch: pa.Table) -> pl.DataFrame:
    """One row per case (SPEC 2.4): case_id, locale, category, gold_source, gold (distinct,
    sorted: gold is a set) and retrieved_context (list of {id, parent_id, score}, in rank
    order, [] when absent). Raises NotClean when a record breaks a rule Arrow's types do
    not state: a required field null or empty, a gold id null or empty, an item with no id
    or an empty one, a score that is not finite."""
    # One chunk, not one per Arrow block (~200 a batch): the steps after it (explode,
    # windows, joins) run a third faster on contiguous columns.
    frame = pl.from_arrow(batch.combine_chunks())
    items = frame.select(pl.col("retrieved_context").explode(keep_nulls=False).struct.unnest())
    text_fields = [_missing(pl.col(name)).any() for name in ("case_id", "locale", "category")]
    gold_ids = [_missing(pl.col(name).explode(keep_nulls=False)).any() for name in ("must_cite_one_of", "relevant_ids")]
    if (
        frame.select(pl.any_horizontal(*text_fields, *gold_ids)).item()
        or items.select((_missing(pl.col("id")) | ~pl.col("score").is_finite()).any()).item()
    ):
        raise NotClean
    return frame.select(
        "case_id",
        "locale",
        "category",
        pl.when(pl.col("relevant_ids").is_not_null())
        .then(pl.lit("relevant_ids"))
        .otherwise(pl.lit("must_cite_one_of"))
        .alias("gold_source"),
        pl.coalesce("relevant_ids", "must_cite_one_of").list.unique().list.sort().fill_null(NO_IDS).alias("gold"),
        pl.col("retrieved_context").fill_null(NO_ITEMS),
    )


def stream_staged(
    path: Path,
    block_bytes: int,
    consume: Callable[[pl.DataFrame, int], T],
    stop: threading.Event,
    batch_items: int | None = None,
) -> Streamed[list[T]] | None:
    """The fast pass: hand `path`'s staged cases to `consume(frame, index)` in batches of
    about `batch_items` (default BATCH_ITEMS) retrieved items, never writing them as an
    intermediate file. Returns (what consume returned, in order; records), or None when
    a record breaks a rule — what was consumed is then left to be discarded. Only reading
    says that: an error of `consume` (the engines evaluating a batch) is raised as it is.
    Repeated case ids are for the caller to find in what was consumed
    (`repeated_case_ids`): holding them here would hold every batch's buffers."""
    results: list[T] = []
    n_records = 0
    try:
        for batch in batches(path, block_bytes, batch_items or BATCH_ITEMS, stop):
            staged = stage(batch)
            n_records += staged.height
            results.append(consume(staged, len(results)))
    except NotClean:
        return None
    return results, n_records


def repeated_case_ids(con: duckdb.DuckDBPyConnection, files: list[Path]) -> int:
    """How many case ids of these Parquet files (a `case_id` column) repeat an earlier one."""
    if not files:
        return 0
    [(n_repeated,)] = con.execute(
        "select count(*) - count(distinct case_id) from read_parquet($files)", {"files": [str(f) for f in files]}
    ).fetchall()
    return n_repeated


def stage_partitions(
    path: Path, out_dir: Path, block_bytes: int, stop: threading.Event, batch_items: int | None = None
) -> Streamed[list[Path]] | None:
    """The scale-out fast pass: write `path`'s staged cases into `out_dir` as Parquet
    partitions of about `batch_items` (default PARTITION_ITEMS) retrieved items: (files,
    records), or None when a record breaks a rule or a case_id repeats."""
    out_dir.mkdir(parents=True, exist_ok=True)

    def write(staged: pl.DataFrame, index: int) -> Path:
        path = out_dir / f"partition-{index:04d}.parquet"
        engine.write_parquet(staged, path, compression="lz4")
        return path

    streamed = stream_staged(path, block_bytes, write, stop, batch_items or PARTITION_ITEMS)
    if streamed is None:
        return None
    files, n_records = streamed
    con = engine.connect()
    try:
        if repeated_case_ids(con, files):
            return None
    finally:
        con.close()
    return files, n_records


def read_staged(path: Path) -> pl.DataFrame:
    """One staged partition, in the order it was written."""
    return pl.read_parquet(path)


def write_rejects(run_id: str, rejects: list[Reject], path: Path) -> None:
    frame = pl.DataFrame(
        {
            "run_id": [run_id] * len(rejects),
            "source_file": [r.source_file for r in rejects],
            "line": [r.line for r in rejects],
            "reason": [r.reason for r in rejects],
            "raw": [r.raw for r in rejects],
        },
        schema=REJECTS_SCHEMA,
    )
    engine.write_parquet(frame, path)
