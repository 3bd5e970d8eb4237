"""The baseline snapshot (SPEC 8): one committed JSON file per gate, byte-identical when
refreshed from the same run — sorted keys, floats rounded to a fixed number of places, and
nothing about the refresh itself (no timestamp of it). Its shape is published as a JSON
Schema (docs/schema/baseline.schema.json); flows/inputs/baseline_file.py reads and writes the file."""

from __future__ import annotations

import itertools
import json

import polars as pl
import pyarrow as pa

from .aggregates import aggregates, slice_partials
from .errors import InputError
from .metrics import FIRST_RELEVANT_RANK, NAMES

FORMAT_VERSION = 2
FLOAT_PLACES = 10
CONSISTENCY_ATOL = 1e-8  # an aggregate and the mean of its cases, each rounded to FLOAT_PLACES
AGGREGATE_FIELDS = ("slice", "slice_value", "metric", "mean", "n", "ci_low", "ci_high")
CASE_FIELDS = ("locale", "category", "n_gold", *NAMES, FIRST_RELEVANT_RANK, "n_retrieved")


def _round(value):
    return round(value, FLOAT_PLACES) if isinstance(value, float) else value


def build_snapshot(run: dict, aggregates: pl.DataFrame, case_metrics: pl.DataFrame, gold: pl.DataFrame,
                   tool_version: str) -> dict:
    """The snapshot of one run at its headline k: its aggregates by slice and its per-case
    metrics with their gold ids (`gold`: case_id, gold). A run without a labelled case makes
    no snapshot: it could not gate anything."""
    k = run["headline_k"]
    at_k = aggregates.filter(pl.col("k") == k).sort("slice", "slice_value", "metric")
    cases = case_metrics.filter(pl.col("k") == k).join(gold, on="case_id", how="left").sort("case_id")
    if at_k.height == 0 or cases.height == 0:
        raise InputError(
            f"run {run['run_id']!r} has no labelled case at k={k}: a baseline of it could not gate anything"
        )
    return {
        "format_version": FORMAT_VERSION,
        "run_id": run["run_id"],
        "k": k,
        "relevance_level": run.get("relevance_level") or 1,
        "source": {
            "run_created_at": run["created_at"],
            "git_sha": run["git_sha"],
            "dataset_version": run["dataset_version"],
            "artifact_digest": run["artifact_digest"],
            "tool_version": tool_version,
            "n_cases": run["n_cases"],
            "n_labelled": run["n_labelled"],
            "n_rejected": run["n_rejected"],
            "vacuous": run["vacuous"],
        },
        "aggregates": [{key: _round(row[key]) for key in AGGREGATE_FIELDS} for row in at_k.iter_rows(named=True)],
        "cases": {
            row["case_id"]: {**{key: _round(row[key]) for key in CASE_FIELDS}, "gold": sorted(row["gold"] or [])}
            for row in cases.iter_rows(named=True)
        },
    }


def dumps(snapshot: dict) -> str:
    return json.dumps(snapshot, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def snapshot_case_metrics(snapshot: dict) -> pl.DataFrame:
    """The snapshot's per-case rows as a frame shaped like `case_metrics` at its k, with their
    gold ids and how much each retrieved (null in a format-1 snapshot, which kept neither:
    a `gold` field there is not the format's, and is not read). Built column by column, the
    gold lists through Arrow: Polars makes a list column from Python lists one by one."""
    schema = {"case_id": pl.String, "locale": pl.String, "category": pl.String, "n_gold": pl.Int64}
    schema |= {metric: pl.Float64 for metric in NAMES}
    schema |= {FIRST_RELEVANT_RANK: pl.Int64, "n_retrieved": pl.Int64, "gold": pl.List(pl.String)}
    cases = snapshot["cases"]
    columns = {name: [case.get(name) for case in cases.values()] for name in list(schema)[1:-1]}
    gold = _gold_column(cases) if snapshot.get("format_version") != 1 else None
    return pl.DataFrame({"case_id": list(cases), **columns, "gold": gold}, schema=schema)


def _gold_column(cases: dict) -> pl.Series:
    """The cases' gold lists as one column, from their ids end to end and where each list starts."""
    lists = [case.get("gold") for case in cases.values()]
    offsets = list(itertools.accumulate((len(gold or ()) for gold in lists), initial=0))
    ids = pa.array(list(itertools.chain.from_iterable(gold or () for gold in lists)), pa.string())
    missing = pa.array([gold is None for gold in lists], pa.bool_())
    return pl.Series("gold", pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), ids, mask=missing))


def snapshot_problems(snapshot: dict, cases: pl.DataFrame) -> list[str]:
    """Where a snapshot's aggregates disagree with its own cases (`cases`: its
    snapshot_case_metrics): the gate reads the aggregates, and only the cases are checked
    against the baseline's run recomputed, so an aggregate edited, dropped or written twice
    would gate on figures no case supports. Each (slice, value, metric) the cases make must be
    there once with their mean, n and interval (recomputed by transforms/aggregates.py, within
    the file's rounding); none other may be."""
    cases = cases.with_columns(pl.lit(snapshot["run_id"]).alias("run_id"), pl.lit(snapshot["k"]).alias("k"))
    expected = {(r["slice"], r["slice_value"], r["metric"]): r
                for r in aggregates(slice_partials(cases)).iter_rows(named=True)}
    problems, seen = [], set()
    for i, row in enumerate(snapshot["aggregates"]):
        key = (row["slice"], row["slice_value"], row["metric"])
        where = f"aggregates[{i}] ({' '.join(key)})"
        if key in seen:
            problems.append(f"{where}: written twice")
            continue
        seen.add(key)
        want = expected.get(key)
        if want is None:
            problems.append(f"{where}: no case of the snapshot is in this slice")
            continue
        for field_name in ("mean", "n", "ci_low", "ci_high"):
            if abs(row[field_name] - want[field_name]) > CONSISTENCY_ATOL:
                problems.append(f"{where}.{field_name}: {row[field_name]} where its cases give {_round(want[field_name])}")
    problems += [f"aggregates: no entry for {' '.join(key)}, which its cases make" for key in sorted(expected.keys() - seen)]
    return problems


def rounded_as_snapshot(case_metrics: pl.DataFrame) -> pl.DataFrame:
    """Case metrics with their figures kept to the snapshot's FLOAT_PLACES, to be paired with
    a snapshot's cases: unrounded, an unchanged case would differ from it by rounding alone,
    and a paired test of many such differences calls them significant."""
    return case_metrics.with_columns(pl.col(*NAMES).round(FLOAT_PLACES))


def relevance_level(snapshot: dict) -> int:
    """The lowest grade the snapshot counts as gold (a format-1 file has none: 1)."""
    return snapshot.get("relevance_level") or 1


def relevance_mismatch(snapshot: dict, run_id: str, run_level: int | None) -> str | None:
    """Why run `run_id`, evaluated with relevance level `run_level`, cannot be compared with
    the snapshot case by case, or None: at another level its gold is not the snapshot's."""
    level, run_level = relevance_level(snapshot), run_level or 1
    if run_level == level:
        return None
    return (f"the baseline counts grades >= {level} as relevant, run {run_id!r} was evaluated "
            f"with --relevance-level {run_level}: its gold is not the baseline's")


def baseline_reference(snapshot: dict) -> dict[str, float]:
    """The snapshot's figures on slice `all`, metric → mean (reference lines in charts)."""
    return {row["metric"]: row["mean"] for row in snapshot["aggregates"] if row["slice"] == "all"}
