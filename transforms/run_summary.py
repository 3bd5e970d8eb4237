"""The `runs` row of one run: its manifest, the account of its records, its flags, and the KB
it was judged against."""

from __future__ import annotations

import json

import polars as pl

from .manifest import Manifest

RUNS_SCHEMA = {
    "run_id": pl.String,
    "created_at": pl.String,
    "created_at_utc": pl.Datetime("us", "UTC"),
    "retrieval_top_k": pl.Int64,
    "headline_k": pl.Int64,
    "ks": pl.List(pl.Int64),
    "relevance_level": pl.Int64,
    "n_cases": pl.Int64,
    "n_labelled": pl.Int64,
    "n_rejected": pl.Int64,
    "n_labelled_with_retrieval": pl.Int64,
    "max_depth": pl.Int64,
    "vacuous": pl.Boolean,
    "git_sha": pl.String,
    "dataset_version": pl.String,
    "config": pl.String,
    "source_file": pl.String,
    "artifact_digest": pl.String,
    "evaluation_key": pl.String,
    "kb_uri": pl.String,  # the KB file (absolute path); null: the run had no KB
    "kb_digest": pl.String,  # "blake3:" + the digest of that file's bytes
}
# SPEC 15: how many retrieved items and gold entries of another tool's run were identified by
# their id, a metadata field, or their content (flows/sources/formats/identity.py). A staged
# case of such a run carries its own counts in these columns; a run folder's or a TREC run's
# has none, and its `runs` row holds null.
IDENTITY_COUNTS = (
    "retrieved_by_id", "retrieved_by_metadata", "retrieved_by_content", "gold_by_id", "gold_by_metadata", "gold_by_content",
)
RUNS_SCHEMA.update({name: pl.Int64 for name in IDENTITY_COUNTS})
COUNTS = ("n_cases", "n_labelled", "n_labelled_with_retrieval", "max_depth")


def add_counts(batches: list[dict[str, int]]) -> dict[str, int | None]:
    """The counts of a run from its batches' counts (max_depth is the deepest); the identity
    counts are summed over the batches that have them, and None when none has."""
    total: dict[str, int | None] = {name: 0 for name in COUNTS}
    for counts in batches:
        for name in COUNTS:
            total[name] = max(total[name], counts[name]) if name == "max_depth" else total[name] + counts[name]
    for name in IDENTITY_COUNTS:
        given = [counts[name] for counts in batches if counts.get(name) is not None]
        total[name] = sum(given) if given else None
    return total


def run_summary(
    manifest: Manifest,
    counts: dict[str, int],
    n_rejected: int,
    headline_k: int,
    ks: list[int],
    relevance_level: int,
    source_file: str,
    artifact_digest: str,
    evaluation_key: str,
    kb_uri: str | None = None,
    kb_digest: str | None = None,
) -> pl.DataFrame:
    """One row. A run is vacuous (SPEC 2.9) when it has labelled cases and none retrieved anything."""
    return pl.DataFrame(
        {
            "run_id": [manifest.run_id],
            "created_at": [manifest.created_at],
            "created_at_utc": [manifest.created_at_utc],
            "retrieval_top_k": [manifest.retrieval_top_k],
            "headline_k": [headline_k],
            "ks": [ks],
            "relevance_level": [relevance_level],
            "n_cases": [counts["n_cases"]],
            "n_labelled": [counts["n_labelled"]],
            "n_rejected": [n_rejected],
            "n_labelled_with_retrieval": [counts["n_labelled_with_retrieval"]],
            "max_depth": [counts["max_depth"]],
            "vacuous": [counts["n_labelled"] > 0 and counts["n_labelled_with_retrieval"] == 0],
            "git_sha": [manifest.git_sha],
            "dataset_version": [manifest.dataset_version],
            "config": [json.dumps(manifest.config, sort_keys=True)],
            "source_file": [source_file],
            "artifact_digest": [artifact_digest],
            "evaluation_key": [evaluation_key],
            "kb_uri": [kb_uri],
            "kb_digest": [kb_digest],
            **{name: [counts.get(name)] for name in IDENTITY_COUNTS},
        },
        schema=RUNS_SCHEMA,
    )
