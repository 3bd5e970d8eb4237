"""Ingest: one run's cases file → staged Parquet partitions, and the account of its records.

The fast path is one streaming DuckDB pass (sql/staged_cases.sql) that reads the file,
types the fields the metrics need, flags records that break a rule and writes them split
into partitions by a stable hash of case_id. Only a file with a bad record takes the
line-by-line path of transforms/records.py, which names each bad record and feeds the
valid lines back through the same pass.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

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

REJECTS_SCHEMA = {
    "run_id": pl.String,
    "source_file": pl.String,
    "line": pl.Int64,
    "reason": pl.String,
    "raw": pl.String,
}


@dataclass(frozen=True)
class StagedRun:
    """One run's valid records as Parquet partitions, and the account of its records."""

    run_id: str
    partitions: list[Path]  # empty when the run was refused (rejects, strict mode)
    n_cases: int
    rejects: list[Reject] = field(default_factory=list)
    loaded: bool = True


def partition_count(path: Path) -> int:
    size = path.stat().st_size * (GZIP_RATIO if path.suffix == ".gz" else 1)
    return max(1, math.ceil(size / PARTITION_BYTES))


def stage_cases(
    manifest: Manifest,
    staging_dir: Path,
    *,
    allow_rejects: bool,
    partitions: int | None = None,
    display_name: str | None = None,
) -> StagedRun:
    """Validate one run's cases file and stage its valid records under `staging_dir`."""
    source = manifest.cases_file
    display_name = display_name or str(source)
    n_partitions = partitions or partition_count(source)
    staging_dir.mkdir(parents=True, exist_ok=True)
    con = engine.connect(spill_dir=staging_dir)
    try:
        files = _stage(con, source, staging_dir / "fast", n_partitions, FAST_PATH_OBJECT_LIMIT)
        rejects: list[Reject] = []
        if files is None:
            clean = staging_dir / "clean.jsonl"
            with open(clean, "wb") as clean_out:
                account = split_records(source, display_name, clean_out)
            rejects = account.rejects
            if account.valid + len(rejects) == 0:
                raise InputError(f"{display_name}: holds no records")
            if rejects and not allow_rejects:
                return StagedRun(manifest.run_id, [], 0, rejects, loaded=False)
            files = _stage(con, clean, staging_dir / "clean", n_partitions, MAX_RECORD_BYTES)
            if files is None:
                raise RuntimeError(f"{display_name}: records that passed the rules failed the SQL checks")
            clean.unlink()
        n_cases = _count(con, files)
    finally:
        con.close()
    if n_cases == 0 and not rejects:
        raise InputError(f"{display_name}: holds no records")
    return StagedRun(manifest.run_id, files, n_cases, rejects)


def _stage(
    con: duckdb.DuckDBPyConnection, path: Path, out_dir: Path, partitions: int, object_limit: int
) -> list[Path] | None:
    """Write `path` staged and partitioned into `out_dir`; None when a record breaks a rule."""
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
    except (duckdb.Error, UnicodeDecodeError):
        # Malformed JSON or wrong shapes: the line-by-line pass names each record. DuckDB
        # raises UnicodeDecodeError when its message quotes a line cut inside a character.
        shutil.rmtree(out_dir, ignore_errors=True)
        return None
    files = sorted(out_dir.glob("partition=*/*.parquet"))
    if not files:
        return []
    _, n_bad, n_repeated = con.execute(
        sql.load("staged_case_problems"), {"files": [str(f) for f in files]}
    ).fetchone()
    if n_bad or n_repeated:
        shutil.rmtree(out_dir, ignore_errors=True)
        return None
    return files


def _count(con: duckdb.DuckDBPyConnection, files: list[Path]) -> int:
    if not files:
        return 0
    return con.execute(
        "select count(*) from read_parquet($files)", {"files": [str(f) for f in files]}
    ).fetchone()[0]


STAGED_COLUMNS = ["case_id", "locale", "category", "gold_source", "gold", "items"]


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
    frame.write_parquet(path, compression="zstd")
