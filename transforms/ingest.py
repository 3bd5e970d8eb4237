"""Ingest: one run's cases file → `cases`, `retrieved` and `rejects` Parquet files.

The fast path reads the file once with DuckDB (sql/raw_cases.sql), checks it with
sql/raw_case_problems.sql and writes both tables. Only a file with a bad record takes the
line-by-line path of transforms/records.py, which names each bad record and feeds the
valid lines back through the same fast path.
"""

from __future__ import annotations

import tempfile
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

REJECTS_SCHEMA = {
    "run_id": pl.String,
    "source_file": pl.String,
    "line": pl.Int64,
    "reason": pl.String,
    "raw": pl.String,
}


@dataclass(frozen=True)
class IngestedRun:
    """What ingest wrote for one run, and the account of its records."""

    run_id: str
    cases_path: Path | None  # None when the run was not loaded (rejects, strict mode)
    retrieved_path: Path | None
    rejects_path: Path
    n_cases: int
    n_labelled: int
    rejects: list[Reject] = field(default_factory=list)

    @property
    def loaded(self) -> bool:
        return self.cases_path is not None


def ingest_cases(
    manifest: Manifest,
    cases_path: Path,
    retrieved_path: Path,
    rejects_path: Path,
    *,
    allow_rejects: bool,
    display_name: str | None = None,
) -> IngestedRun:
    """Validate and load one run's cases file into Parquet at the given paths."""
    source = manifest.cases_file
    display_name = display_name or str(source)
    # Scratch (DuckDB spill, the clean copy) sits beside the part: the same disk, and the
    # warehouse removes it if this process is killed.
    with tempfile.TemporaryDirectory(prefix=".ingest-", dir=cases_path.parent) as scratch:
        con = engine.connect(spill_dir=Path(scratch))
        rejects: list[Reject] = []
        if not _read_clean(con, source, FAST_PATH_OBJECT_LIMIT):
            clean = Path(scratch) / "clean.jsonl"
            with open(clean, "wb") as clean_out:
                account = split_records(source, display_name, clean_out)
            rejects = account.rejects
            if account.valid + len(rejects) == 0:
                raise InputError(f"{display_name}: holds no records")
            if rejects and not allow_rejects:
                write_rejects(manifest.run_id, rejects, rejects_path)
                return IngestedRun(manifest.run_id, None, None, rejects_path, 0, 0, rejects)
            if not _read_clean(con, clean, MAX_RECORD_BYTES):
                raise RuntimeError(f"{display_name}: valid records failed the SQL checks")
        n_cases = con.execute("select count(*) from raw_cases").fetchone()[0]
        if n_cases == 0 and not rejects:
            raise InputError(f"{display_name}: holds no records")
        params = {"run_id": manifest.run_id}
        con.execute("create temp table case_rankings as " + sql.load("case_rankings"))
        con.execute("drop table raw_cases")
        con.sql(sql.load("cases"), params=params).write_parquet(str(cases_path), compression="zstd")
        con.sql(sql.load("retrieved"), params=params).write_parquet(
            str(retrieved_path), compression="zstd"
        )
        n_labelled = con.execute(
            "select count(*) from read_parquet($path) where n_gold > 0", {"path": str(cases_path)}
        ).fetchone()[0]
        con.close()
    write_rejects(manifest.run_id, rejects, rejects_path)
    return IngestedRun(
        manifest.run_id, cases_path, retrieved_path, rejects_path, n_cases, n_labelled, rejects
    )


def _read_clean(con: duckdb.DuckDBPyConnection, path: Path, object_limit: int) -> bool:
    """Load `path` into temp table raw_cases; False when any record breaks a rule."""
    con.execute("drop table if exists raw_cases")
    try:
        con.execute(
            "create temp table raw_cases as " + sql.load("raw_cases"),
            {"path": str(path), "max_object_size": object_limit},
        )
    except (duckdb.Error, UnicodeDecodeError):
        # Malformed JSON or wrong shapes: the line-by-line pass names each record. DuckDB
        # raises UnicodeDecodeError when its message quotes a line cut inside a character.
        return False
    n_bad, n_repeated = con.execute(sql.load("raw_case_problems")).fetchone()
    return n_bad == 0 and n_repeated == 0


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
