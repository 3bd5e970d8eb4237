"""retrieval-eval: retrieval-only quality figures (hit@k, recall@k, nDCG@k, precision@k,
reciprocal rank) from stored RAG evaluation artifacts.

The command is `retrieval-eval` (or `python -m retrieval_eval`); from Python,
`retrieval_eval.evaluate(cases, k=...)` returns the per-case metrics and the aggregates as
Polars frames without writing a warehouse. Subpackages: `flows` (the job, its orchestration,
the warehouse and the CLI), `transforms` (pure steps over frames) and `sql` (DuckDB models).
"""

__version__ = "0.2.0"


def evaluate(cases, *, k, ks=(), relevance_level=1, allow_rejects=False, run_id=None):
    """Per-case metrics and aggregates of `cases` at cutoff `k` (and the sweep `ks`), in memory.

    `cases` is a cases.jsonl path, a Polars or pandas DataFrame with the case columns, or an
    iterable of case dicts. Returns an object with `.case_metrics` and `.aggregates` (Polars
    DataFrames with the columns of the warehouse views of those names). A record that breaks
    the rules raises RejectedRecords, unless `allow_rejects` (then `.rejects` lists them);
    `run_id` names the run in the frames (default "python"). See the README.
    """
    from .flows.commands.api import in_memory_figures  # deferred: `import retrieval_eval` loads no engine

    return in_memory_figures(cases, k=k, ks=ks, relevance_level=relevance_level, allow_rejects=allow_rejects,
                             run_id=run_id)
