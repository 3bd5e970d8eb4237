"""Baseline refresh and the gate, reading the run from the warehouse catalog."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from flows.warehouse import Warehouse
from transforms.baseline import build_snapshot, read_snapshot, snapshot_case_metrics, write_snapshot
from transforms.errors import InputError
from transforms.gate import GateResult, compare


def floors_from(min_hit: float | None, min_recall: float | None) -> dict[str, float]:
    """The absolute floors that were given: each is off unless set."""
    given = (("hit_at_k", min_hit), ("recall_at_k", min_recall))
    return {metric: value for metric, value in given if value is not None}


def read_run(warehouse: Warehouse, run_id: str, k: int | None = None) -> tuple[dict, pl.DataFrame, pl.DataFrame]:
    """The `runs` row, aggregates and case_metrics of one run at k (default: its headline k)."""
    with warehouse.connect() as con:
        runs = con.sql("select * from runs where run_id = $id", params={"id": run_id}).pl()
        if runs.height == 0:
            known = ", ".join(r[0] for r in con.execute("select run_id from runs order by run_id").fetchall())
            raise InputError(f"run {run_id!r} is not in the warehouse {warehouse.root} (known: {known or 'none'})")
        run = runs.row(0, named=True)
        k = k or run["headline_k"]
        params = {"id": run_id, "k": k}
        aggregates = con.sql("select * from aggregates where run_id = $id and k = $k", params=params).pl()
        case_metrics = con.sql("select * from case_metrics where run_id = $id and k = $k", params=params).pl()
    if k not in run["ks"]:
        raise InputError(
            f"run {run_id!r} has no metrics at k={k} (it has k in {list(run['ks'])}); "
            f"re-run it with --ks {k}"
        )
    return run, aggregates, case_metrics


def refresh_baseline(warehouse: Warehouse, run_id: str, out: Path) -> dict:
    run, aggregates, case_metrics = read_run(warehouse, run_id)
    snapshot = build_snapshot(run, aggregates, case_metrics)
    write_snapshot(snapshot, out)
    return snapshot


def gate_run(
    warehouse: Warehouse,
    run_id: str,
    baseline: Path,
    *,
    tolerance: float,
    locale_tolerance: float,
    floors: dict[str, float],
) -> GateResult:
    snapshot = read_snapshot(baseline)
    run, aggregates, case_metrics = read_run(warehouse, run_id, snapshot["k"])
    recomputed = None
    if snapshot["run_id"] in warehouse.run_ids():
        _, _, baseline_now = read_run(warehouse, snapshot["run_id"], snapshot["k"])
        recomputed = baseline_now
    return compare(
        snapshot,
        run,
        aggregates,
        case_metrics,
        snapshot_case_metrics(snapshot),
        tolerance=tolerance,
        locale_tolerance=locale_tolerance,
        floors=floors,
        recomputed_baseline=recomputed,
    )
