"""The `runs` row of one run: its manifest, the account of its records, and its flags."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl

from transforms.manifest import Manifest

RUNS_SCHEMA = {
    "run_id": pl.String,
    "created_at": pl.String,
    "retrieval_top_k": pl.Int64,
    "headline_k": pl.Int64,
    "ks": pl.List(pl.Int64),
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
}
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def code_fingerprint() -> str:
    """Short hash of the project's code (flows/, transforms/, sql/) as it is now."""
    digest = hashlib.sha256()
    for folder, pattern in (("flows", "*.py"), ("transforms", "*.py"), ("sql", "*.sql")):
        for path in sorted((PROJECT_ROOT / folder).glob(pattern)):
            digest.update(str(path.relative_to(PROJECT_ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def evaluation_key(artifact_digest: str, headline_k: int, ks: list[int], allow_rejects: bool) -> str:
    """What a run's figures depend on: its bytes, the cutoffs, the reject mode and the code.
    A committed run with the same key is not evaluated again."""
    inputs = [artifact_digest, headline_k, ks, allow_rejects, code_fingerprint()]
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:20]


def run_summary(
    manifest: Manifest,
    cases_paths: list[Path],
    n_rejected: int,
    headline_k: int,
    ks: list[int],
    artifact_digest: str,
    evaluation_key: str,
) -> pl.DataFrame:
    """One row. A run is vacuous (SPEC 2.9) when it has labelled cases and none retrieved anything."""
    columns = ["n_gold", "n_retrieved", "n_cards"]
    cases = pl.concat(
        [pl.read_parquet(path, columns=columns) for path in cases_paths],
        how="vertical",
    ) if cases_paths else pl.DataFrame(schema={c: pl.Int64 for c in columns})
    labelled = cases.filter(pl.col("n_gold") > 0)
    n_labelled = labelled.height
    with_retrieval = labelled.filter(pl.col("n_retrieved") > 0).height
    return pl.DataFrame(
        {
            "run_id": [manifest.run_id],
            "created_at": [manifest.created_at],
            "retrieval_top_k": [manifest.retrieval_top_k],
            "headline_k": [headline_k],
            "ks": [ks],
            "n_cases": [cases.height],
            "n_labelled": [n_labelled],
            "n_rejected": [n_rejected],
            "n_labelled_with_retrieval": [with_retrieval],
            "max_depth": [cases["n_cards"].max() or 0],
            "vacuous": [n_labelled > 0 and with_retrieval == 0],
            "git_sha": [manifest.git_sha],
            "dataset_version": [manifest.dataset_version],
            "config": [json.dumps(manifest.config, sort_keys=True)],
            "source_file": [str(manifest.cases_file)],
            "artifact_digest": [artifact_digest],
            "evaluation_key": [evaluation_key],
        },
        schema=RUNS_SCHEMA,
    )
