"""The gate and the baseline refresh, reading runs from the warehouse (SPEC 8)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ... import __version__, sql
from ...transforms.baseline import build_snapshot, dumps, relevance_level, relevance_mismatch
from ...transforms.errors import InputError
from ...transforms.gate import GateResult, compare
from ..inputs import config
from ..inputs.baseline_file import Baseline, write_baseline
from ..inputs.kb import KnowledgeBase, run_kb, unknown_gold
from ..inputs.options import OPTIONS, input_location
from ..storage.output_files import output_file, written_to
from ..warehouse.committed import read_state
from ..warehouse.views import naming_damage, open_reader
from ..warehouse.warehouse import State, Warehouse

GateOutcome = GateResult


@dataclass(frozen=True)
class GateOptions:
    baseline: Path | str = config.BASELINE  # where the job reads it, a path or a URI (read_baseline); gate_run takes what was read
    warehouse: Path | str = config.WAREHOUSE  # a folder, or a bucket's URI as given
    tolerance: float = config.TOLERANCE
    locale_tolerance: float = config.LOCALE_TOLERANCE
    floors: dict[str, float] = field(default_factory=dict)
    allow_missing_cases: bool = False
    decision: str = "point"
    alpha: float = 0.05


def floors_from(min_hit: float | None, min_recall: float | None) -> dict[str, float]:
    """The absolute floors that were given: each is off unless set."""
    given = (("hit_at_k", min_hit), ("recall_at_k", min_recall))
    return {metric: value for metric, value in given if value is not None}


def gate_options(values: Mapping[str, Any]) -> GateOptions | None:
    """The gate's options from values by name (a name not given takes its default); no gate
    without a baseline."""
    given = {**{option.name: option.default for option in OPTIONS}, **values}
    if given["baseline"] is None:
        return None
    return GateOptions(
        baseline=input_location(given["baseline"]),
        warehouse=input_location(given["warehouse"]),  # a Path would spoil a URI: s3:/bucket/key
        tolerance=given["tolerance"],
        locale_tolerance=given["locale_tolerance"],
        floors=floors_from(given["min_hit"], given["min_recall"]),
        allow_missing_cases=given["allow_missing_cases"],
        decision=given["decision"],
        alpha=given["alpha"],
    )


@dataclass(frozen=True)
class RunFigures:
    """One run at one k: its `runs` row, aggregates, and case metrics with each case's gold."""

    run: dict
    aggregates: pl.DataFrame
    case_metrics: pl.DataFrame


def read_run(warehouse: Warehouse, state: State, run_id: str, k: int | None = None) -> RunFigures:
    """A run's figures at k (default: its headline k); exit 2 when the run or the k is not there."""
    if run_id not in state.runs or "runs" not in state.runs[run_id].tables:
        known = ", ".join(sorted(r for r, run in state.runs.items() if "runs" in run.tables))
        raise InputError(f"run {run_id!r} is not in the warehouse {warehouse.name} (known: {known or 'none'})")
    # Every byte of what a verdict rests on is checked against its digest, whatever the stat says.
    with open_reader(warehouse, state, [run_id], ("runs", "aggregates", "case_metrics", "cases"),
                     every_byte=True) as con:
        with naming_damage(warehouse, state):
            run = con.table("runs").pl().row(0, named=True)
            k = k or run["headline_k"]
            if k not in run["ks"]:
                raise InputError(
                    f"run {run_id!r} has no metrics at k={k} (it has k in {list(run['ks'])}); re-run it with --ks {k}"
                )
            params = {"k": k}
            aggregates = con.table("aggregates").pl().filter(pl.col("k") == k)
            case_metrics = con.sql(sql.load("case_metrics_with_gold"), params=params).pl()
    return RunFigures(run, aggregates, case_metrics)


def refresh_baseline(warehouse: Warehouse, run_id: str, out: str | Path) -> dict:
    """Write the snapshot of run `run_id` to `out`, a local file (its folder made if missing)
    or a URI's object."""
    target = output_file(out)  # a location refused before any work
    state = read_state(warehouse)
    figures = read_run(warehouse, state, run_id)
    gold = figures.case_metrics.select("case_id", "gold")
    snapshot = build_snapshot(figures.run, figures.aggregates, figures.case_metrics.drop("gold"), gold, __version__)
    if isinstance(target, Path):
        write_baseline(snapshot, target)
    else:
        with written_to(target) as handle:
            handle.write(dumps(snapshot))
    return snapshot


def refuse_ungateable(baseline: Baseline, run_id: str, ks: list[int], run_level: int | None) -> None:
    """Exit 2 when run `run_id`, evaluated at cutoffs `ks` and relevance level `run_level`,
    cannot be gated against `baseline`: a job checks its newest run's plan before any work."""
    snapshot = baseline.snapshot
    mismatch = relevance_mismatch(snapshot, run_id, run_level)
    if mismatch is not None:
        raise InputError(f"{baseline.path}: {mismatch}; re-run it with --relevance-level {relevance_level(snapshot)}, "
                         "or refresh the baseline")
    if snapshot["k"] not in ks:
        raise InputError(f"{baseline.path}: the baseline is at k={snapshot['k']}, run {run_id!r} is evaluated at "
                         f"k in {list(ks)}; add {snapshot['k']} with --ks, or refresh the baseline")


def gate_run(state: State, run_id: str, options: GateOptions, baseline: Baseline,
             kb: KnowledgeBase | None = None) -> GateResult:
    """Run `run_id` against `baseline` (read from options.baseline by read_baseline). The flips
    whose gold is not a card are told apart by the run's own KB, or by `kb` when it was given
    with --kb (flows/inputs/kb.py `run_kb`); a note names a KB given, or says why the run's own is not used."""
    warehouse = Warehouse(options.warehouse)
    snapshot = baseline.snapshot
    current = read_run(warehouse, state, run_id, snapshot["k"])
    refuse_ungateable(baseline, run_id, current.run["ks"], current.run.get("relevance_level"))
    recomputed = None
    baseline_run = snapshot["run_id"]
    judged = run_kb(run_id, current.run, state.runs[run_id].source, kb)
    warnings = [judged.note] if judged.note else []
    if baseline_run in state.runs and "runs" in state.runs[baseline_run].tables:
        recomputed = read_run(warehouse, state, baseline_run, snapshot["k"]).case_metrics
    else:
        warnings.append(f"the baseline's run {baseline_run} is not in this warehouse: the snapshot could not be "
                        "checked against its run recomputed")
    baseline_cases = baseline.cases
    return compare(
        snapshot,
        current.run,
        current.aggregates,
        current.case_metrics,
        baseline_cases,
        tolerance=options.tolerance,
        locale_tolerance=options.locale_tolerance,
        floors=options.floors,
        decision=options.decision,
        alpha=options.alpha,
        recomputed_baseline=recomputed,
        allow_missing_cases=options.allow_missing_cases,
        unknown_gold=unknown_gold(judged.kb, [baseline_cases, current.case_metrics]),
        notes=warnings,
    )
