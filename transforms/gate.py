"""The regression gate (SPEC 8): a run against a baseline snapshot at the baseline's k.

Fails when, for hit, recall or nDCG, `current < baseline − tolerance` on `all` or
`current < baseline − locale_tolerance` on a locale slice; when a baseline slice is missing
now; when a case of the baseline is missing now (removed, or rejected and loaded with
--allow-rejects) unless missing cases are allowed; when an absolute floor is given and not
met; when the run is vacuous; and when the baseline's own run, recomputed, no longer
reproduces the snapshot. Other slices are shown,
not gated. Deltas carry a paired 95% bootstrap interval over the cases both runs share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from .aggregates import SLICE_VALUES, Z_95
from .flips import HIT_TO_MISS, MISS_TO_HIT, hit_changes
from .metrics import GATED as GATED_METRICS
from .metrics import NAMES as METRICS

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261130
BOOTSTRAP_MAX_CASES = 50_000  # beyond this the normal approximation is as good and far cheaper
REPRODUCE_ATOL = 1e-9


@dataclass(frozen=True)
class GateLine:
    slice: str
    slice_value: str
    metric: str
    baseline: float
    current: float | None
    n_baseline: int
    n_current: int
    delta_ci: tuple[float, float] | None
    tolerance: float | None  # None: shown, not gated
    failed: bool
    note: str = ""

    @property
    def delta(self) -> float | None:
        return None if self.current is None else self.current - self.baseline


@dataclass(frozen=True)
class FloorLine:
    metric: str
    floor: float
    current: float | None
    failed: bool


@dataclass(frozen=True)
class GateResult:
    run_id: str
    baseline_run_id: str
    k: int
    lines: list[GateLine]
    floors: list[FloorLine]
    to_miss: list[dict]  # shared cases that flipped hit → miss
    to_hit: list[dict]
    added: list[str]
    removed: list[str]
    vacuous: bool
    reproduction_error: str | None
    warnings: list[str] = field(default_factory=list)
    n_rejected: int = 0  # records of the run that were rejected (left out of its figures)
    allow_missing_cases: bool = False

    @property
    def failures(self) -> list[str]:
        reasons = []
        if self.vacuous:
            reasons.append(f"VACUOUS run {self.run_id}: no labelled case retrieved anything")
        if self.reproduction_error:
            reasons.append(self.reproduction_error)
        if self.removed and not self.allow_missing_cases:
            shown = ", ".join(self.removed[:10]) + (", ..." if len(self.removed) > 10 else "")
            reasons.append(
                f"{len(self.removed)} case(s) of the baseline are missing from {self.run_id} ({shown}): "
                "removed, or rejected and left out; the gate cannot vouch for them "
                "(--allow-missing-cases accepts this)"
            )
        reasons += [
            f"{line.metric} on {line.slice}={line.slice_value}: "
            + (line.note or f"{line.current:.3f} < {line.baseline:.3f} − {line.tolerance}")
            for line in self.lines
            if line.failed
        ]
        reasons += [
            f"{f.metric} on all: {'missing' if f.current is None else f'{f.current:.3f}'} below the floor {f.floor}"
            for f in self.floors
            if f.failed
        ]
        return reasons

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def improved(self) -> bool:
        return any(
            line.tolerance is not None and line.delta is not None and line.delta > line.tolerance
            for line in self.lines
        )


def paired_delta_interval(deltas: np.ndarray) -> tuple[float, float] | None:
    """95% interval of the mean paired delta: percentile bootstrap with a fixed seed."""
    n = len(deltas)
    if n == 0:
        return None
    if n > BOOTSTRAP_MAX_CASES:
        half = Z_95 * float(np.std(deltas, ddof=1)) / math.sqrt(n)
        mean = float(np.mean(deltas))
        return mean - half, mean + half
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = np.concatenate([
        deltas[rng.integers(0, n, size=(200, n))].mean(axis=1)
        for _ in range(BOOTSTRAP_RESAMPLES // 200)
    ])
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def compare(
    snapshot: dict,
    run: dict,
    current_aggregates: pl.DataFrame,
    current_cases: pl.DataFrame,
    baseline_cases: pl.DataFrame,
    *,
    tolerance: float,
    locale_tolerance: float,
    floors: dict[str, float],
    recomputed_baseline: pl.DataFrame | None = None,
    allow_missing_cases: bool = False,
) -> GateResult:
    """Gate `run` (its aggregates and case_metrics at the snapshot's k) against `snapshot`."""
    current = {
        (r["slice"], r["slice_value"], r["metric"]): r for r in current_aggregates.iter_rows(named=True)
    }
    paired = baseline_cases.join(current_cases, on="case_id", suffix="_current")
    lines = []
    for row in snapshot["aggregates"]:
        slice_, value, metric = row["slice"], row["slice_value"], row["metric"]
        if metric not in GATED_METRICS:
            continue
        limit = tolerance if slice_ == "all" else locale_tolerance if slice_ == "locale" else None
        now = current.get((slice_, value, metric))
        in_slice = paired.filter(SLICE_VALUES[slice_] == value)
        deltas = (in_slice[f"{metric}_current"] - in_slice[metric]).to_numpy()
        if now is None:
            lines.append(GateLine(slice_, value, metric, row["mean"], None, row["n"], 0, None, limit,
                                  True, "slice missing in this run"))
            continue
        failed = limit is not None and now["mean"] < row["mean"] - limit - 1e-12
        lines.append(GateLine(slice_, value, metric, row["mean"], now["mean"], row["n"], now["n"],
                              paired_delta_interval(deltas), limit, failed))

    floor_lines = []
    for metric, floor in floors.items():
        now = current.get(("all", "all", metric))
        value = now["mean"] if now else None
        floor_lines.append(FloorLine(metric, floor, value, value is None or value < floor))

    changes = hit_changes(baseline_cases, current_cases)
    baseline_ids = set(baseline_cases["case_id"])
    current_ids = set(current_cases["case_id"])
    return GateResult(
        run_id=run["run_id"],
        baseline_run_id=snapshot["run_id"],
        k=snapshot["k"],
        lines=lines,
        floors=floor_lines,
        to_miss=changes.filter(pl.col("change") == HIT_TO_MISS).drop("change").to_dicts(),
        to_hit=changes.filter(pl.col("change") == MISS_TO_HIT).drop("change").to_dicts(),
        added=sorted(current_ids - baseline_ids),
        removed=sorted(baseline_ids - current_ids),
        vacuous=bool(run["vacuous"]),
        reproduction_error=reproduction_error(snapshot, baseline_cases, recomputed_baseline),
        warnings=detectability_warnings(lines),
        n_rejected=int(run["n_rejected"]),
        allow_missing_cases=allow_missing_cases,
    )


def detectability_warnings(lines: list[GateLine]) -> list[str]:
    """Gated slices whose n is too small for a drop of the tolerance to stand out of noise."""
    warnings = []
    for line in lines:
        if line.tolerance is None or line.metric != "hit_at_k" or line.n_baseline == 0:
            continue
        p = line.baseline
        noise = Z_95 * math.sqrt(max(p * (1 - p), 0.0) / line.n_baseline)
        if noise > line.tolerance:
            warnings.append(
                f"{line.slice}={line.slice_value}: n={line.n_baseline} is too small for a "
                f"{line.tolerance} tolerance to be detectable (95% sampling noise ±{noise:.3f})"
            )
    return warnings


def reproduction_error(
    snapshot: dict, baseline_cases: pl.DataFrame, recomputed: pl.DataFrame | None
) -> str | None:
    """When the baseline's own run is in the warehouse, it must reproduce the snapshot."""
    if recomputed is None:
        return None
    columns = ["n_gold", *METRICS, "first_relevant_rank"]
    joined = baseline_cases.select("case_id", *columns).join(
        recomputed.select("case_id", *columns), on="case_id", how="full", suffix="_now", coalesce=True
    )
    differs = pl.lit(False)
    for column in columns:
        a, b = pl.col(column).cast(pl.Float64), pl.col(f"{column}_now").cast(pl.Float64)
        differs = differs | (a.is_null() != b.is_null()) | ((a - b).abs() > REPRODUCE_ATOL).fill_null(False)
    bad = joined.filter(differs)["case_id"].sort().to_list()
    if not bad:
        return None
    return (
        f"the baseline run {snapshot['run_id']}, recomputed now, differs from its snapshot in "
        f"{len(bad)} case(s) (first: {', '.join(bad[:5])}): the metric code or the run's artifacts "
        "changed since the snapshot was taken; review the change, then refresh the baseline"
    )


def suggest_floors(snapshot: dict, margin: float) -> dict[str, float]:
    """Floors a little under what the baseline observed on `all`, rounded down to 0.01."""
    observed = {
        row["metric"]: row["mean"]
        for row in snapshot["aggregates"]
        if row["slice"] == "all" and row["metric"] in ("hit_at_k", "recall_at_k")
    }
    return {metric: max(0.0, math.floor((value - margin) * 100 + 1e-9) / 100) for metric, value in observed.items()}
