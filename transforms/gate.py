"""The regression gate (SPEC 8): a run against a baseline snapshot at the baseline's k.

Gated: hit, recall and nDCG (the metrics declared gated) on `all` (tolerance) and on each
locale (locale tolerance); category and locale × category slices are shown, not gated. A
gated line fails by the decision asked for:

- `point` (the default): `current < baseline − tolerance`, on the slice means or on the
  cases both runs scored (so cases added since the baseline cannot hide a drop);
- `significant`: that drop, and a paired test rejects "no change" at alpha after Holm's
  correction over the gated lines;
- `non-inferior`: unless the lower bound of the paired 95% interval of the delta is at least
  −tolerance.

The gate also fails when a baseline slice is missing now, when a baseline case is missing
now (removed, or rejected and loaded with --allow-rejects) unless missing cases are allowed,
when an absolute floor is given and not met, when the run is vacuous, and when the
baseline's own run, recomputed, no longer reproduces the snapshot. Every gated line carries
its minimum detectable drop: the smallest drop the paired sign-flip test at alpha detects with
80% power at its n (paired_stats.minimum_detectable_drop, inf when none is). The adjusted
p-values name their family (`p_family`: Holm over the gated lines that have paired cases).
The statistics are paired_stats's, on the cases both runs scored, through
transforms/comparison.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from . import paired_stats
from .aggregates import slice_rows
from .baseline import rounded_as_snapshot
from .comparison import adjusted, p_family
from .flips import flipped_cases
from .metrics import GATED as GATED_METRICS
from .metrics import NAMES as METRICS
from .tables import fmt_p

DECISIONS = ("point", "significant", "non-inferior")
REPRODUCE_ATOL = 1e-9
EPSILON = 1e-12  # a drop exactly at the tolerance passes, whatever the float rounding


@dataclass(frozen=True)
class GateLine:
    slice: str
    slice_value: str
    metric: str
    baseline: float
    current: float | None
    n_baseline: int
    n_current: int
    n_paired: int  # cases both runs scored in this slice
    ci_low: float | None  # paired 95% interval of the delta
    ci_high: float | None
    p_value: float | None  # the paired test's, before correction
    p_adjusted: float | None  # after Holm's correction over the gated lines (gated lines only)
    mde: float | None  # minimum detectable drop of the test at alpha, 80% power, its n (inf: none)
    tolerance: float | None  # None: shown, not gated
    failed: bool
    note: str = ""

    @property
    def delta(self) -> float | None:
        return None if self.current is None else self.current - self.baseline

    @property
    def delta_ci(self) -> tuple[float, float] | None:
        return None if self.ci_low is None else (self.ci_low, self.ci_high)


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
    decision: str
    alpha: float
    lines: list[GateLine]
    floors: list[FloorLine]
    flips: pl.DataFrame  # transforms/flips.py flipped_cases, with their reasons
    added: list[str]
    removed: list[str]
    vacuous: bool
    reproduction_error: str | None
    warnings: list[str] = field(default_factory=list)
    n_rejected: int = 0  # records of the run that were rejected (left out of its figures)
    allow_missing_cases: bool = False
    p_family: str = ""  # what the adjusted p-values were corrected over, in words

    @property
    def to_miss(self) -> list[dict]:
        return self.flips.filter(pl.col("to") == "miss").to_dicts()

    @property
    def to_hit(self) -> list[dict]:
        return self.flips.filter(pl.col("to") == "hit").to_dicts()

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
        reasons += [f"{line.metric} on {line.slice}={line.slice_value}: {line.note}" for line in self.lines if line.failed]
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
        return self.passed and any(
            line.tolerance is not None and line.delta is not None and line.delta > line.tolerance
            for line in self.lines
        )


def _tolerance(slice_: str, tolerance: float, locale_tolerance: float) -> float | None:
    return tolerance if slice_ == "all" else locale_tolerance if slice_ == "locale" else None


def _drop(baseline: float, current: float, tolerance: float,
          comparison: paired_stats.PairedComparison | None) -> str | None:
    """The drop past the tolerance, on the slice means or on the cases both runs scored: cases
    added since the baseline must not dilute a drop on the cases it has."""
    if current < baseline - tolerance - EPSILON:
        return f"{current:.3f} < {baseline:.3f} − {tolerance}"
    if comparison is not None and comparison.delta < -tolerance - EPSILON:
        return (f"on the {comparison.n} cases both runs scored, {comparison.mean:.3f} < "
                f"{comparison.reference_mean:.3f} − {tolerance}")
    return None


def _verdict(decision: str, baseline: float, current: float, tolerance: float,
             comparison: paired_stats.PairedComparison | None, p_adjusted: float | None, alpha: float,
             family: str) -> str | None:
    """Why a gated line fails under `decision`, or None when it passes."""
    if decision == "point":
        return _drop(baseline, current, tolerance, comparison)
    if decision == "significant":
        dropped = _drop(baseline, current, tolerance, comparison)
        if dropped and p_adjusted is not None and p_adjusted < alpha:
            shown = fmt_p(p_adjusted, alpha)
            relation = f"< {shown[1:]}" if shown.startswith("<") else f"= {shown}"
            return f"{dropped}, and p {relation} < {alpha} ({family})"
        return None
    if decision == "non-inferior":
        if comparison is None or comparison.ci_low < -tolerance - EPSILON:
            bound = "no paired cases" if comparison is None else f"lower bound {comparison.ci_low:+.3f}"
            return f"not shown non-inferior: {bound} of the paired 95% interval is below −{tolerance}"
        return None
    raise ValueError(f"unknown decision {decision!r} (expected one of {', '.join(DECISIONS)})")


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
    decision: str = "point",
    alpha: float = 0.05,
    recomputed_baseline: pl.DataFrame | None = None,
    allow_missing_cases: bool = False,
    unknown_gold: set[str] | None = None,
    notes: list[str] | None = None,
) -> GateResult:
    """Gate `run` (its aggregates and per-case rows at the snapshot's k) against `snapshot`;
    `notes` are the caller's warnings, printed with the gate's own."""
    if decision not in DECISIONS:
        raise ValueError(f"unknown decision {decision!r} (expected one of {', '.join(DECISIONS)})")
    current = {(r["slice"], r["slice_value"], r["metric"]): r for r in current_aggregates.iter_rows(named=True)}
    paired = baseline_cases.join(rounded_as_snapshot(current_cases).select("case_id", *METRICS), on="case_id",
                                 suffix="_current")
    rows = [row for row in snapshot["aggregates"] if row["metric"] in GATED_METRICS]
    stats = []
    for row in rows:
        slice_, value, metric = row["slice"], row["slice_value"], row["metric"]
        in_slice = slice_rows(paired, slice_, value)
        reference = in_slice[metric].to_numpy()
        comparison = paired_stats.compare(reference, in_slice[f"{metric}_current"].to_numpy()) if len(reference) else None
        if comparison is not None and comparison.n == 0:  # no pair with the metric on both sides
            comparison = None
        baseline_values = slice_rows(baseline_cases, slice_, value)[metric].drop_nulls().to_numpy()
        mde = paired_stats.minimum_detectable_drop(baseline_values, alpha=alpha) if len(baseline_values) else None
        stats.append((comparison, mde))
    gated = [i for i, row in enumerate(rows) if _tolerance(row["slice"], tolerance, locale_tolerance) is not None
             and stats[i][0] is not None]
    holm = dict(zip(gated, adjusted(np.array([stats[i][0].p_value for i in gated]), "holm"), strict=True))
    family = p_family("holm", len(gated), "gated line")
    lines = []
    for i, row in enumerate(rows):
        slice_, value, metric = row["slice"], row["slice_value"], row["metric"]
        limit = _tolerance(slice_, tolerance, locale_tolerance)
        comparison, mde = stats[i]
        now = current.get((slice_, value, metric))
        common = {
            "slice": slice_, "slice_value": value, "metric": metric, "baseline": row["mean"],
            "n_baseline": row["n"], "n_paired": comparison.n if comparison else 0,
            "ci_low": comparison.ci_low if comparison else None, "ci_high": comparison.ci_high if comparison else None,
            "p_value": comparison.p_value if comparison else None,
            "p_adjusted": float(holm[i]) if i in holm else None, "mde": mde, "tolerance": limit,
        }
        if now is None:
            lines.append(GateLine(**common, current=None, n_current=0, failed=True, note="slice missing in this run"))
            continue
        note = None if limit is None else _verdict(decision, row["mean"], now["mean"], limit, comparison,
                                                   common["p_adjusted"], alpha, family)
        lines.append(GateLine(**common, current=now["mean"], n_current=now["n"], failed=note is not None,
                              note=note or ""))

    floor_lines = []
    for metric, floor in floors.items():
        now = current.get(("all", "all", metric))
        value = now["mean"] if now else None
        floor_lines.append(FloorLine(metric, floor, value, value is None or value < floor))

    baseline_ids = set(baseline_cases["case_id"])
    current_ids = set(current_cases["case_id"])
    return GateResult(
        run_id=run["run_id"],
        baseline_run_id=snapshot["run_id"],
        k=snapshot["k"],
        decision=decision,
        alpha=alpha,
        lines=lines,
        floors=floor_lines,
        flips=flipped_cases(baseline_cases, current_cases, unknown_gold),
        added=sorted(current_ids - baseline_ids),
        removed=sorted(baseline_ids - current_ids),
        vacuous=bool(run["vacuous"]),
        reproduction_error=reproduction_error(snapshot, baseline_cases, recomputed_baseline),
        warnings=[*(notes or []), *detectability_warnings(lines, snapshot["k"])],
        n_rejected=int(run["n_rejected"]),
        allow_missing_cases=allow_missing_cases,
        p_family=family,
    )


def detectability_warnings(lines: list[GateLine], k: int) -> list[str]:
    """Per gated slice, when the minimum detectable drop of its headline metric (hit@k)
    exceeds its tolerance: a drop of the tolerance cannot be told from noise at that n."""
    return [
        f"{'all' if line.slice == 'all' else line.slice_value} n = {line.n_baseline}: "
        + (f"a drop smaller than {line.mde:.2f} cannot be told from noise" if math.isfinite(line.mde)
           else "no drop can be told from noise")
        + f" (hit@{k}, the paired sign-flip test at 80% power; tolerance {line.tolerance})"
        for line in lines
        if line.metric == "hit_at_k" and line.tolerance is not None and line.mde is not None and line.mde > line.tolerance
    ]


def reproduction_error(snapshot: dict, baseline_cases: pl.DataFrame, recomputed: pl.DataFrame | None) -> str | None:
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


def gate_json(result: GateResult) -> dict:
    """The document `gate --format json` prints (SPEC 8), with the run's account beside it."""
    return {
        "run_id": result.run_id,
        "baseline_run_id": result.baseline_run_id,
        "k": result.k,
        "decision": result.decision,
        "alpha": result.alpha,
        "p_family": result.p_family,
        "passed": result.passed,
        "failures": result.failures,
        "warnings": result.warnings,
        "n_rejected": result.n_rejected,
        "lines": [
            {"slice": line.slice, "slice_value": line.slice_value, "metric": line.metric,
             "baseline": line.baseline, "current": line.current, "delta": line.delta,
             "ci_low": line.ci_low, "ci_high": line.ci_high, "p_value": line.p_value,
             "p_adjusted": line.p_adjusted, "n": line.n_current, "n_baseline": line.n_baseline,
             "mde": line.mde if line.mde is None or math.isfinite(line.mde) else None,
             "tolerance": line.tolerance, "failed": line.failed}
            for line in result.lines
        ],
        "flips": [
            {"case_id": f["case_id"], "from": f["from"], "to": f["to"], "reason": f["reason"],
             "rank_before": f["rank_before"], "rank_after": f["rank_after"]}
            for f in result.flips.iter_rows(named=True)
        ],
        "missing_cases": result.removed,
        "added_cases": result.added,
    }
