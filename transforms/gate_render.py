"""Renderings of the gate (SPEC 8): aligned text for the terminal, markdown for a CI job summary
or a pull-request comment, and the JSON document CI posts (transforms/gate.py `gate_json`)."""

from __future__ import annotations

import json
import math

import polars as pl

from .escaping import markdown_code_span, markdown_inline, markdown_text, terminal_text
from .flips import REASONS, reasons_by_slice
from .gate import GateResult, gate_json
from .metrics import LABELS
from .tables import (
    GREEN,
    RED,
    RESET,
    Table,
    fmt,
    fmt_p,
    layout_markdown,
    layout_text,
    signed,
)

LISTED_FLIPS = 50


def gate_table(result: GateResult, wide: bool = True) -> Table:
    """Every line of the baseline's gated metrics: baseline, current, delta with its paired
    interval, adjusted p, the minimum detectable drop, n, tolerance and status; not `wide`,
    without the locale × category lines (shown, never gated)."""
    header = ["slice", "metric", "baseline", "current", "delta", "paired 95% CI", "p (Holm)", "MDE", "n base", "n now",
              "tolerance", ""]
    rows = []
    for line in result.lines:
        if line.slice == "locale_category" and not wide:
            continue
        ci = "—" if line.ci_low is None else f"{signed(line.ci_low)} … {signed(line.ci_high)}"
        status = "FAIL" if line.failed else ("ok" if line.tolerance is not None else "")
        rows.append([
            "all" if line.slice == "all" else f"{line.slice} {line.slice_value}",
            f"{LABELS[line.metric]}@{result.k}",
            fmt(line.baseline),
            fmt(line.current),
            signed(line.delta),
            ci,
            fmt_p(line.p_adjusted, result.alpha) if line.tolerance is not None else "",
            _fmt_mde(line.mde) if line.tolerance is not None else "",
            str(line.n_baseline),
            str(line.n_current),
            "—" if line.tolerance is None else f"{line.tolerance:.2f}",
            status,
        ])
    return Table(header, rows, align_right_from=2)


def _fmt_mde(mde: float | None) -> str:
    """The minimum detectable drop; ∞ where the test detects no drop with 80% power at that n."""
    return "∞" if mde is not None and math.isinf(mde) else fmt(mde)


def legend(result: GateResult) -> str:
    """What the p and MDE columns mean: the family of the adjusted p-values, and the MDE's test."""
    return (f"p (Holm): the paired sign-flip test's p-value, adjusted by {result.p_family}; MDE: the smallest "
            f"drop that test detects at alpha {result.alpha} with 80% power at the line's n (∞: none)")


def reasons_table(result: GateResult) -> Table:
    counts = reasons_by_slice(result.flips).filter(pl.col("slice").is_in(["all", "locale"]))
    keys = [("all", "all")] + sorted({(s, v) for s, v in counts.select("slice", "slice_value").iter_rows() if s == "locale"})
    rows = []
    for slice_, value in keys:
        mine = {r["reason"]: r["n"] for r in counts.filter(
            (pl.col("slice") == slice_) & (pl.col("slice_value") == value)).iter_rows(named=True)}
        rows.append([value, *[str(mine.get(reason, 0)) for reason in REASONS], str(sum(mine.values()))])
    return Table(["hit → miss in", *REASONS, "total"], rows)


def _flip_reason(flip: dict) -> str:
    """Why a case flipped, said of the side that missed: this run's reason for a hit → miss
    (for below_k, the rank its gold card is now first at); for a miss → hit, the baseline's."""
    if flip["to"] == "miss":
        return flip["reason"] + (f", now first at rank {flip['rank_after']}" if flip["reason"] == "below_k" else "")
    rank = f", its gold first at rank {flip['rank_before']}" if flip["reason"] == "below_k" else ""
    return f"the baseline missed: {flip['reason']}{rank}"


def _flip_line(flip: dict) -> str:
    return terminal_text(f"{flip['case_id']} ({flip['locale']}, {flip['category']}): {_flip_reason(flip)}")


def _flip_item(flip: dict) -> str:
    """A flip as a markdown list item's text: the case id as code, its locale and category as text."""
    return (f"{markdown_code_span(flip['case_id'])} ({markdown_inline(flip['locale'])}, "
            f"{markdown_inline(flip['category'])}): {markdown_inline(_flip_reason(flip))}")


def render_gate(result: GateResult, colour: bool = False) -> str:
    red = (lambda s: f"{RED}{s}{RESET}") if colour else (lambda s: s)
    green = (lambda s: f"{GREEN}{s}{RESET}") if colour else (lambda s: s)
    table = gate_table(result, wide=False)
    shown = [line for line in result.lines if line.slice != "locale_category"]
    colours = {(i, len(table.header) - 1): RED for i, line in enumerate(shown) if line.failed} if colour else {}
    out = [
        terminal_text(f"gate: run {result.run_id} against baseline {result.baseline_run_id} at k={result.k}, "
                      f"decision {result.decision}"),
        f"{result.n_rejected} record(s) of the run were rejected (left out of its figures)",
        "",
        layout_text(table, colours),
        legend(result),
        "(locale × category lines, shown and never gated, are in `--format markdown` and `--format json`)",
        "",
    ]
    for floor in result.floors:
        now = "missing" if floor.current is None else f"{floor.current:.3f}"
        out.append(f"floor {floor.metric} ≥ {floor.floor}: {now} {'FAIL' if floor.failed else 'ok'}")
    for title, flips in (("hit → miss", result.to_miss), ("miss → hit", result.to_hit)):
        out.append(f"{len(flips)} case(s) flipped {title}" + (":" if flips else ""))
        out += [f"  {_flip_line(f)}" for f in flips[:LISTED_FLIPS]]
        if len(flips) > LISTED_FLIPS:
            out.append(f"  ... and {len(flips) - LISTED_FLIPS} more (`gate --format json` lists every one)")
    if result.to_miss:
        out += ["", layout_text(reasons_table(result)), ""]
    if result.added or result.removed:
        out.append(f"{len(result.added)} case(s) added since the baseline, {len(result.removed)} removed "
                   "(paired figures use the cases in both)")
        out += [f"  + {terminal_text(case_id)}" for case_id in result.added[:LISTED_FLIPS]]
        out += [f"  - {terminal_text(case_id)}" for case_id in result.removed[:LISTED_FLIPS]]
    out += [f"note: {terminal_text(warning)}" for warning in result.warnings]
    out.append("")
    if result.passed:
        out.append(green("PASS"))
        if result.improved:
            out.append(
                "Improved beyond tolerance: consider `retrieval-eval baseline refresh "
                f"{result.run_id}` so the gate guards the new level."
            )
    else:
        out.append(red("FAIL"))
        out += [f"  - {terminal_text(reason)}" for reason in result.failures]
    return "\n".join(out) + "\n"


def render_gate_markdown(result: GateResult) -> str:
    """The gate as markdown: for a CI job summary or a pull-request comment."""
    verdict = "✅ PASS" if result.passed else "❌ FAIL"
    out = [f"### retrieval-eval gate: {verdict}", "",
           f"Run {markdown_code_span(result.run_id)} against baseline {markdown_code_span(result.baseline_run_id)} "
           f"at k={result.k}, decision `{result.decision}`; {result.n_rejected} rejected record(s) in the run.", ""]
    if not result.passed:
        out += [f"- {markdown_text(reason)}" for reason in result.failures] + [""]
    out += [layout_markdown(gate_table(result)), "", markdown_text(legend(result)), ""]
    out += [f"> {markdown_text(warning)}" for warning in result.warnings] + ([""] if result.warnings else [])
    for floor in result.floors:
        now = "missing" if floor.current is None else f"{floor.current:.3f}"
        out += [f"- floor {markdown_code_span(floor.metric)} ≥ {floor.floor}: {now} {'FAIL' if floor.failed else 'ok'}", ""]
    for title, flips in (("hit → miss", result.to_miss), ("miss → hit", result.to_hit)):
        out.append(f"**{len(flips)} case(s) flipped {title}**" + (":" if flips else ""))
        out += [f"- {_flip_item(f)}" for f in flips[:LISTED_FLIPS]]
        if len(flips) > LISTED_FLIPS:
            out.append(f"- … and {len(flips) - LISTED_FLIPS} more (`gate --format json` lists every one)")
        out.append("")
    if result.to_miss:
        out += [layout_markdown(reasons_table(result)), ""]
    if result.added or result.removed:  # SPEC 8: listed, in the CI summary as in the terminal
        out.append(f"**{len(result.added)} case(s) added since the baseline, {len(result.removed)} removed** "
                   "(paired figures use the cases in both):")
        out += [f"- added {markdown_code_span(case_id)}" for case_id in result.added[:LISTED_FLIPS]]
        out += [f"- removed {markdown_code_span(case_id)}" for case_id in result.removed[:LISTED_FLIPS]]
        hidden = max(0, len(result.added) - LISTED_FLIPS) + max(0, len(result.removed) - LISTED_FLIPS)
        if hidden:
            out.append(f"- … and {hidden} more (`gate --format json` lists every one)")
        out.append("")
    return "\n".join(out)


def render_gate_json(result: GateResult) -> str:
    return json.dumps(gate_json(result), indent=2, sort_keys=True) + "\n"


def render_gate_verdict(result: GateResult) -> str:
    """The gate in one line (`run --quiet`, the Prefect artifact's description): its verdict, and
    on a failure every reason."""
    what = f"gate: run {result.run_id} against baseline {result.baseline_run_id} at k={result.k}, decision {result.decision}"
    if result.decision == "significant":
        what += f" at alpha {result.alpha:g}"
    verdict = "PASS" if result.passed else "FAIL: " + "; ".join(result.failures)
    return terminal_text(f"{what}: {verdict}") + "\n"
