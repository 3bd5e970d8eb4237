"""The baseline snapshot (SPEC 8): one committed JSON file per gate, byte-identical when
refreshed from the same run — sorted keys, floats rounded to a fixed number of places, and
nothing about the refresh itself (no timestamp of it)."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import polars as pl

from transforms.case_metrics import METRICS
from transforms.errors import InputError, read_json_file

FORMAT_VERSION = 1
FLOAT_PLACES = 10
CASE_FIELDS = ("locale", "category", "n_gold", *METRICS, "first_relevant_rank")


def tool_version() -> str:
    try:
        return version("retrieval-eval")
    except PackageNotFoundError:
        return "unknown"


def _round(value):
    return round(value, FLOAT_PLACES) if isinstance(value, float) else value


def build_snapshot(run: dict, aggregates: pl.DataFrame, case_metrics: pl.DataFrame) -> dict:
    """The snapshot of one run at its headline k: aggregates by slice and per-case metrics."""
    k = run["headline_k"]
    at_k = aggregates.filter(pl.col("k") == k).sort("slice", "slice_value", "metric")
    cases = case_metrics.filter(pl.col("k") == k).sort("case_id")
    return {
        "format_version": FORMAT_VERSION,
        "run_id": run["run_id"],
        "k": k,
        "source": {
            "run_created_at": run["created_at"],
            "git_sha": run["git_sha"],
            "dataset_version": run["dataset_version"],
            "artifact_digest": run["artifact_digest"],
            "tool_version": tool_version(),
            "n_cases": run["n_cases"],
            "n_labelled": run["n_labelled"],
            "vacuous": run["vacuous"],
        },
        "aggregates": [
            {key: _round(row[key]) for key in ("slice", "slice_value", "metric", "mean", "n", "ci_low", "ci_high")}
            for row in at_k.iter_rows(named=True)
        ],
        "cases": {
            row["case_id"]: {key: _round(row[key]) for key in CASE_FIELDS}
            for row in cases.iter_rows(named=True)
        },
    }


def dumps(snapshot: dict) -> str:
    return json.dumps(snapshot, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_snapshot(snapshot: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(snapshot), encoding="utf-8")
    tmp.replace(path)


def read_snapshot(path: Path) -> dict:
    snapshot = read_json_file(path, "no baseline: write one with `retrieval-eval baseline refresh RUN_ID`")
    if not isinstance(snapshot, dict):
        raise InputError(f"{path}: not a baseline snapshot (not a JSON object)")
    missing = [key for key in ("run_id", "k", "aggregates", "cases") if key not in snapshot]
    if missing:
        raise InputError(f"{path}: not a baseline snapshot (missing {', '.join(missing)})")
    if snapshot.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{path}: format_version {snapshot.get('format_version')!r}, expected {FORMAT_VERSION}")
    return snapshot


def snapshot_case_metrics(snapshot: dict) -> pl.DataFrame:
    """The snapshot's per-case rows as a frame shaped like `case_metrics` at its k."""
    rows = [{"case_id": case_id, **values} for case_id, values in snapshot["cases"].items()]
    schema = {"case_id": pl.String, "locale": pl.String, "category": pl.String, "n_gold": pl.Int64}
    schema |= {metric: pl.Float64 for metric in METRICS} | {"first_relevant_rank": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


def baseline_reference(snapshot: dict) -> dict[str, float]:
    """The snapshot's figures on slice `all`, metric → mean (reference lines in charts)."""
    return {row["metric"]: row["mean"] for row in snapshot["aggregates"] if row["slice"] == "all"}
