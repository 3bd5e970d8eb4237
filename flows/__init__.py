"""Orchestration of retrieval-eval: the pipeline, its Prefect flows, the warehouse and the CLI."""

import os
import sys

# NumPy (imported by pyarrow, Polars and DuckDB) starts OpenBLAS with a thread per core,
# and those threads spin before they sleep. Nothing here calls BLAS; on 2 cores the
# spinning cost about 0.25 CPU-s per run (100k cases: 3.4-3.6 → 3.1-3.4 user CPU-s).
# A value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Arrow's default allocator, mimalloc 3, reserves its arena with transparent huge pages:
# every first touch of a 2 MiB page is a fault that zeroes all of it, and the JSON reader
# allocates fresh blocks all run long (perf: 13% of a 100k-case run's CPU in the kernel's
# clear_page). jemalloc, also in pyarrow's Linux wheels, reuses its pages: 100k cases 1.99 →
# 1.92 s median over 24 interleaved runs, 3.39 → 3.30 CPU-s, peak RSS 557 → 506 MB.
# Elsewhere (wheels without jemalloc would warn) and when the user chose, Arrow decides.
if sys.platform == "linux":
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
