"""Orchestration of retrieval-eval: the pipeline, its Prefect flows, the warehouse and the CLI."""

import os

# NumPy (imported by pyarrow, Polars and DuckDB) starts OpenBLAS with a thread per core,
# and those threads spin before they sleep. Nothing here calls BLAS; on 2 cores the
# spinning cost about 0.25 CPU-s per run (100k cases: 3.4-3.6 → 3.1-3.4 user CPU-s).
# A value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
