"""Benchmark harness of retrieval-eval: see benchmarks/README.md."""
