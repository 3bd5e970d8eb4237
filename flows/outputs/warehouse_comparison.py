"""`retrieval-eval compare` (SPEC 11): runs read from the warehouse at one k and compared with a
reference by transforms/comparison.py."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ... import sql
from ...transforms.comparison import compare_runs, pairwise, tied_groups
from ...transforms.errors import InputError
from ..inputs.kb import compared_kb_notes
from ..warehouse.committed import read_state
from ..warehouse.views import naming_damage, open_reader
from ..warehouse.warehouse import Warehouse


@dataclass(frozen=True)
class Comparison:
    reference: str
    k: int
    test: str
    correction: str
    alpha: float
    metrics: list[str]
    slices: list[str]
    comparisons: pl.DataFrame  # transforms/comparison.py COMPARISON_COLUMNS
    pairs: pl.DataFrame  # every pair of runs on the first metric, slice all: PAIR_COLUMNS
    tied_groups: list[list[str]]  # the compact letter display of `pairs`
    runs: pl.DataFrame  # run_id, created_at of the runs compared, oldest first
    kb_notes: tuple[str, ...] = ()  # the runs' own KBs gone, changed or different (flows/inputs/kb.py)


def compare_in_warehouse(warehouse: Warehouse, run_ids: list[str], *, reference: str | None, k: int | None,
                         metrics: list[str], slices: list[str], test: str, correction: str, alpha: float) -> Comparison:
    state = read_state(warehouse)
    run_ids = list(dict.fromkeys(run_ids))
    unknown = [r for r in run_ids + ([reference] if reference else []) if r not in state.runs or "runs" not in state.runs[r].tables]
    if unknown:
        known = ", ".join(sorted(r for r, run in state.runs.items() if "runs" in run.tables))
        raise InputError(f"run {unknown[0]!r} is not in the warehouse {warehouse.name} (known: {known})")
    if reference and reference not in run_ids:
        run_ids.insert(0, reference)
    if len(run_ids) < 2:
        given = f"only run {run_ids[0]!r} was given" + (" (it is also the --reference)" if reference else "") if run_ids else "no run was given"
        raise InputError(f"compare: {given}; give at least two runs (or one and a --reference other than it)")
    with (open_reader(warehouse, state, run_ids, ("runs", "case_metrics"), every_byte=True) as con,
          naming_damage(warehouse, state)):
        runs = con.sql(sql.load("report_runs")).pl()
        reference = reference or runs["run_id"][0]  # the oldest given
        k = k or runs.filter(pl.col("run_id") == reference)["headline_k"][0]
        lacking = [row["run_id"] for row in runs.iter_rows(named=True) if k not in row["ks"]]
        if lacking:
            raise InputError(f"run {lacking[0]!r} has no metrics at k={k}; re-run it with --ks {k} (or choose --k)")
        cases = con.table("case_metrics").pl().filter(pl.col("k") == k)
    refuse_unpaired(cases, reference, run_ids, metrics[0])
    comparisons = compare_runs(cases, reference, metrics=metrics, slices=slices, test=test, correction=correction,
                               alpha=alpha)
    compared = cases.filter(pl.col("run_id").is_in(run_ids))
    pairs = pairwise(compared, metrics[0], test=test, correction=correction, alpha=alpha)
    return Comparison(reference, k, test, correction, alpha, metrics, slices, comparisons, pairs,
                      tied_groups(compared, metrics[0], pairs), runs.select("run_id", "created_at"),
                      tuple(compared_kb_notes(runs.to_dicts())))


def refuse_unpaired(cases: pl.DataFrame, reference: str, run_ids: list[str], metric: str) -> None:
    """A run that scored no case the reference scored has nothing to pair: no comparison, not a tie."""
    scored = cases.filter(pl.col(metric).is_not_null()).select("run_id", "case_id")
    shared = scored.join(scored.filter(pl.col("run_id") == reference).select("case_id"), on="case_id")
    paired = set(shared["run_id"])
    apart = [run_id for run_id in run_ids if run_id != reference and run_id not in paired]
    if apart:
        raise InputError(f"compare: run {apart[0]!r} scored no case that the reference {reference!r} scored; "
                         "a paired comparison needs cases both runs scored")
