"""Orchestration of retrieval-eval: the pipeline, its Prefect flows, the warehouse and the CLI."""
