"""DuckDB connections for the pipeline's steps, with threads and memory capped per worker."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

# Caps for one worker; a Dask worker sets these to its own share of the machine.
THREADS_ENV = "RETRIEVAL_EVAL_THREADS"
MEMORY_ENV = "RETRIEVAL_EVAL_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "1500MB"


def connect(spill_dir: Path | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that spills to `spill_dir` rather than exceed the memory cap."""
    con = duckdb.connect(config={"memory_limit": os.environ.get(MEMORY_ENV, DEFAULT_MEMORY_LIMIT)})
    threads = os.environ.get(THREADS_ENV)
    if threads:
        con.execute("set threads = $n", {"n": int(threads)})
    if spill_dir is not None:
        con.execute("set temp_directory = $dir", {"dir": str(spill_dir)})
    return con
