"""Ingest: one run's cases file → staged cases, and the account of its records.

The fast path is one streaming DuckDB pass (sql/staged_cases.sql) that reads the file,
types the fields the metrics need and flags records that break a rule. In-process, the
staged cases go straight to Polars in batches of bounded size (`stream_staged`); for
scale-out they are written as Parquet partitions by a stable hash of case_id, one task
per partition (`stage_partitions`). Only a file with a bad record takes the line-by-line
path of transforms/records.py, which names each bad record and feeds the valid lines back
through the same pass (`ingest`).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import duckdb
import polars as pl
from blake3 import blake3

import sql
from transforms import engine
from transforms.errors import InputError, Reject
from transforms.manifest import Manifest
from transforms.records import MAX_RECORD_BYTES, split_records

# DuckDB's reader refuses a record past about twice its maximum_object_size (its read
# buffer; the setting has a floor of 16 MiB, so about 32 MiB here). That is below
# MAX_RECORD_BYTES, so any line the fast path could mis-measure falls to the line-by-line
# pass, which rejects exactly the lines over MAX_RECORD_BYTES; the clean copy is then read
# with a buffer large enough for every line that passed.
FAST_PATH_OBJECT_LIMIT = 16 * 1024 * 1024
# About this much JSON per partition keeps a partition's frames to a few hundred MB.
PARTITION_BYTES = 256 * 1024 * 1024
GZIP_RATIO = 6  # rough expansion of gzip-compressed JSON, to size partitions
# In-process, staged cases are evaluated in batches of about this many retrieved items
# (50k cases × 20 items; a batch's frames stay within a few hundred MB: 0.85 GB peak RSS
# at 100k and at 1M cases, where 250k items took 0.6 GB and 3% more time). DuckDB hands
# them over in Arrow batches of READ_BATCH_ROWS records, and reads on while one is evaluated.
BATCH_ITEMS = 1_000_000
READ_BATCH_ROWS = 8_192

T = TypeVar("T")

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


def partition_count(path: Path) -> int:
    size = path.stat().st_size * (GZIP_RATIO if path.suffix == ".gz" else 1)
    return max(1, math.ceil(size / PARTITION_BYTES))


def _stamp(manifest: Manifest) -> list:
    """Path, size, mtime, inode and ctime of the run's files: a copy that keeps the size and
    restores the mtime (`cp -p`, rsync, tar) still gets a new inode or ctime."""
    stats = [(f, f.stat()) for f in (manifest.run_dir / "manifest.json", manifest.cases_file)]
    return [[str(f), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns] for f, st in stats]


def known_digest(manifest: Manifest, stat_cache: Path) -> str | None:
    """The digest recorded for these files when their stamp (size, times, inode) is
    unchanged since it was computed (the way git decides what to hash again)."""
    try:
        cached = json.loads(stat_cache.read_text())
        if cached.get("stamp") == _stamp(manifest):
            return cached["digest"]
    except (OSError, ValueError, AttributeError):
        pass  # none yet, or unreadable: hash again
    return None


def artifact_digest(manifest: Manifest, stat_cache: Path | None = None) -> str:
    """BLAKE3 over the run's manifest.json and cases file, in that order (a cryptographic
    hash about 2.5× faster than sha256 here: 0.14 s per 440 MB on one core); recorded in
    `stat_cache` with the files' size and modification time."""
    stamp = _stamp(manifest)
    digest = blake3()
    for path in (manifest.run_dir / "manifest.json", manifest.cases_file):
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    result = "blake3:" + digest.hexdigest()
    if stat_cache is not None:
        stat_cache.parent.mkdir(parents=True, exist_ok=True)
        written = stat_cache.with_suffix(".tmp")
        written.write_text(json.dumps({"stamp": stamp, "digest": result}))
        written.replace(stat_cache)  # whole or not at all
    return result


def digest_beside(
    manifest: Manifest,
    stat_cache: Path,
    con: duckdb.DuckDBPyConnection,
    work: Callable[[], T],
    reusable: Callable[[str], bool],
) -> tuple[str, T | None]:
    """The run's content digest, and the result of `work` unless the digest shows that the
    run is already evaluated (`reusable`), in which case the result is None.

    A file whose size and mtime are known is not read for its digest. An unseen one is
    hashed here while `work` (reading it with DuckDB on `con`) runs in a worker thread —
    0.14 s of one core per 440 MB, beside the DuckDB pass; when the bytes turn out to be
    known (a touched file), the pass is interrupted (a DuckDB statement stops; work outside
    one runs to its end) and its output left uncommitted.
    """
    digest = known_digest(manifest, stat_cache)
    if digest:
        return digest, None if reusable(digest) else work()
    with ThreadPoolExecutor(max_workers=1) as worker:
        running = worker.submit(work)
        try:
            digest = artifact_digest(manifest, stat_cache)
            if reusable(digest):
                con.interrupt()
                wait([running])  # interrupted or finished: its output is dropped either way
                return digest, None
            return digest, running.result()
        except BaseException:  # Ctrl-C or a failed hash: stop the pass rather than wait for it
            con.interrupt()
            raise


def ingest(
    source: Path,
    scratch: Path,
    display_name: str,
    allow_rejects: bool,
    fast_pass: Callable[[Path, int], T | None],
) -> tuple[T | None, list[Reject]]:
    """Run `fast_pass` (a DuckDB pass that returns None when a record breaks a rule) over
    `source`; when it refuses, name every bad record line by line and run it again over the
    valid lines. Returns (result, rejects); the result is None when the run is refused
    (rejects in strict mode)."""
    result = fast_pass(source, FAST_PATH_OBJECT_LIMIT)
    if result is not None:
        return result, []
    clean = scratch / "clean.jsonl"
    with open(clean, "wb") as clean_out:
        account = split_records(source, display_name, clean_out)
    if account.valid + len(account.rejects) == 0:
        raise InputError(f"{display_name}: holds no records")
    if account.rejects and not allow_rejects:
        return None, account.rejects
    result = fast_pass(clean, MAX_RECORD_BYTES)
    if result is None:
        raise RuntimeError(f"{display_name}: records that passed the rules failed the SQL checks")
    clean.unlink()
    return result, account.rejects


def staged_relation(
    con: duckdb.DuckDBPyConnection, path: Path, object_limit: int, partitions: int = 1
) -> duckdb.DuckDBPyRelation:
    return con.sql(
        sql.load("staged_cases"),
        params={"path": str(path), "max_object_size": object_limit, "partitions": partitions},
    )


class _NotClean(Exception):
    """The fast pass cannot take these records (a record breaks a rule, or DuckDB cannot read
    the file): the line-by-line pass decides."""


def stream_staged(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    object_limit: int,
    consume: Callable[[pl.DataFrame, int], T],
    batch_items: int | None = None,
) -> tuple[list[T], int] | None:
    """The in-process fast pass: hand `path`'s staged cases to `consume(frame, index)` in
    batches of about `batch_items` (default BATCH_ITEMS) retrieved items, never writing them
    as an intermediate file. Returns (what consume returned, in order; records), or None when
    a record breaks a rule — what was consumed is then left to be discarded. Only reading
    says that: an error of `consume` (the engines evaluating a batch) is raised as it is.
    Repeated case ids are for the caller to find in what was consumed
    (`repeated_case_ids`): holding them here would hold every batch's Arrow buffers."""
    results: list[T] = []
    n_records = 0
    try:
        for frame in _batches(con, path, object_limit, batch_items or BATCH_ITEMS):
            n_records += frame.height
            results.append(consume(frame, len(results)))
    except _NotClean:
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


def _batches(con: duckdb.DuckDBPyConnection, path: Path, object_limit: int, batch_items: int) -> Iterator[pl.DataFrame]:
    """Frames of about `batch_items` retrieved items of `path`'s staged cases."""
    try:
        reader = staged_relation(con, path, object_limit).to_arrow_reader(READ_BATCH_ROWS)
    except duckdb.InterruptException:
        raise  # the same bytes were found evaluated already (see digest_beside)
    except (duckdb.Error, UnicodeDecodeError) as error:
        # Malformed JSON or wrong shapes. DuckDB raises UnicodeDecodeError when its message
        # quotes a line cut inside a character.
        raise _NotClean from error
    pending: list[pl.DataFrame] = []
    n_items = 0
    while (batch := _next_batch(reader)) is not None:
        frame = pl.from_arrow(batch)
        if frame["breaks_rule"].any():
            raise _NotClean
        pending.append(frame)
        n_items += frame["chunk_ids"].list.len().sum()
        if n_items >= batch_items:
            yield pl.concat(pending)
            pending, n_items = [], 0
    if pending:
        yield pl.concat(pending)


def _next_batch(reader):
    """The next Arrow batch of a DuckDB result, or None at its end. DuckDB's errors reach
    Python through the Arrow stream as OSError("<kind> Error: ..."): an interrupt is raised
    again as the DuckDB interrupt it was, any other means records the fast pass cannot take."""
    try:
        return next(reader, None)
    except (OSError, UnicodeDecodeError) as error:
        if str(error).startswith("INTERRUPT Error"):
            raise duckdb.InterruptException(str(error)) from None
        raise _NotClean(str(error)) from error


def stage_partitions(
    con: duckdb.DuckDBPyConnection, path: Path, out_dir: Path, partitions: int, object_limit: int
) -> tuple[list[Path], int] | None:
    """The scale-out fast pass: write `path`'s staged cases into `out_dir` as Parquet
    partitions by a stable hash of case_id: (files, records), or None when a record breaks a
    rule or a case_id repeats."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        con.execute(
            "copy (" + sql.load("staged_cases") + ") to $out_dir "
            "(format parquet, partition_by (partition), overwrite_or_ignore)",
            {
                "path": str(path),
                "max_object_size": object_limit,
                "partitions": partitions,
                "out_dir": str(out_dir),
            },
        )
    except duckdb.InterruptException:
        raise  # the same bytes were found evaluated already (see digest_beside)
    except (duckdb.Error, UnicodeDecodeError):
        shutil.rmtree(out_dir, ignore_errors=True)
        return None
    files = sorted(out_dir.glob("partition=*/*.parquet"))
    if not files:
        return [], 0
    [(n_records, n_bad, n_repeated)] = con.execute(
        sql.load("staged_case_problems"), {"files": [str(f) for f in files]}
    ).fetchall()
    if n_bad or n_repeated:
        shutil.rmtree(out_dir, ignore_errors=True)
        return None
    return files, n_records


STAGED_COLUMNS = ["case_id", "locale", "category", "gold_source", "gold", "chunk_ids", "parent_ids", "scores"]


def read_staged(path: Path) -> pl.DataFrame:
    """One staged partition, in the order it was written."""
    return pl.read_parquet(path, columns=STAGED_COLUMNS, hive_partitioning=False)


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
