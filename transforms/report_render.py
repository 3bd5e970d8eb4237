"""Renderers of the report model: aligned terminal text, markdown, JSON.

Every table is built once as rows of cells (`Table`) and then laid out by the renderer,
so the terminal and markdown reports cannot disagree.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from html import escape

import polars as pl

from .metrics import LABELS as METRIC_LABELS
from .metrics import NAMES as METRICS
from .report import Report, RunReport, headline_table

TERMINAL_SLICES = ("all", "locale", "category")
# A report lists at most this many cases per diagnostic (never-hit cases by id, changed
# cases by change then id); past that a table stops being read, and the warehouse holds
# every case.
LISTED_CASES = 50
MARKDOWN_SLICES = ("all", "locale", "category", "locale_category")
GREEN, RED, BOLD, RESET = "\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[0m"


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]
    align_right_from: int = 1  # first column whose cells are right-aligned (numbers)


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def fmt_with_ci(row: dict | None) -> str:
    if row is None:
        return "—"
    return f"{row['mean']:.3f} ({row['ci_low']:.2f}–{row['ci_high']:.2f})"


def fmt_delta(delta: float | None) -> str:
    # round first so that float noise prints as +0.000, never -0.000
    return "" if delta is None else f"{round(delta, 3) + 0.0:+.3f}"


def slice_table(run: RunReport, slices: tuple[str, ...], with_ci: bool) -> Table:
    """Headline-k figures per slice; the n column is the number of labelled cases scored."""
    k = run.headline_k
    header = ["slice"] + [f"{METRIC_LABELS[m]}@{k}" for m in METRICS] + ["n"]
    header[1] += " (95% CI)"
    by_key = {
        (r["slice"], r["slice_value"], r["metric"]): r for r in run.headline.iter_rows(named=True)
    }
    rows = []
    for slice_ in slices:
        values = sorted({v for (s, v, _m) in by_key if s == slice_})
        for value in values:
            label = "all" if slice_ == "all" else f"{slice_.replace('_', ' × ')} {value}"
            hit = by_key.get((slice_, value, "hit_at_k"))
            cells = [label, fmt_with_ci(hit)]  # the headline figure always shows its interval
            for metric in METRICS[1:]:
                row = by_key.get((slice_, value, metric))
                cells.append(fmt_with_ci(row) if with_ci else fmt(row and row["mean"]))
            cells.append(str(hit["n"]) if hit else "0")
            rows.append(cells)
    return Table(header, rows)


def sweep_table(run: RunReport) -> Table:
    """Slice `all` at every k of the sweep; the headline k is marked with *."""
    header = ["k"] + [METRIC_LABELS[m] for m in METRICS] + ["n"]
    rows = []
    for k in run.ks:
        at_k = {r["metric"]: r for r in run.sweep.filter(pl.col("k") == k).iter_rows(named=True)}
        label = f"{k}*" if k == run.headline_k else str(k)
        n = at_k["hit_at_k"]["n"] if "hit_at_k" in at_k else 0
        rows.append([label] + [fmt(at_k[m]["mean"]) if m in at_k else "—" for m in METRICS] + [str(n)])
    return Table(header, rows)


def runs_table(report: Report) -> tuple[Table, list[float | None]]:
    """Headline figures of every run (oldest first) with the hit@k change from the run before."""
    frame = headline_table(report)
    header = ["run", "k"] + [f"{METRIC_LABELS[m]}@k" for m in METRICS] + ["n", "Δ hit"]
    rows, deltas, previous = [], [], None
    for row in frame.iter_rows(named=True):
        hit = row["hit_at_k"]
        delta = None if previous is None or hit is None else hit - previous
        deltas.append(delta)
        previous = hit
        rows.append(
            [row["run_id"], str(row["k"])] + [fmt(row[m]) for m in METRICS] + [str(row["n"]), fmt_delta(delta)]
        )
    return Table(header, rows), deltas


def layout_text(table: Table, colour_cells: dict[tuple[int, int], str] | None = None) -> str:
    """Aligned columns; `colour_cells` maps (row, column) to an ANSI colour."""
    widths = [len(h) for h in table.header]
    for row in table.rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: list[str], row_index: int | None) -> str:
        out = []
        for col, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            text = cell.rjust(width) if col >= table.align_right_from else cell.ljust(width)
            colour = (colour_cells or {}).get((row_index, col)) if row_index is not None else None
            out.append(f"{colour}{text}{RESET}" if colour else text)
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(table.header, None), rule] + [line(r, i) for i, r in enumerate(table.rows)])


def layout_markdown(table: Table) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    aligns = ["---" if i < table.align_right_from else "---:" for i in range(len(table.header))]
    return "\n".join([line(table.header), line(aligns)] + [line(r) for r in table.rows])


def render_terminal(report: Report, colour: bool = False) -> str:
    bold = (lambda s: f"{BOLD}{s}{RESET}") if colour else (lambda s: s)
    out = [bold(f"retrieval-eval — {len(report.runs)} run(s), headline figures on all labelled cases"), ""]
    table, deltas = runs_table(report)
    colours = {}
    if colour:
        delta_col = len(table.header) - 1
        for i, delta in enumerate(deltas):
            if delta:
                colours[(i, delta_col)] = GREEN if delta > 0 else RED
    out += [layout_text(table, colours), ""]
    for run in report.runs[-1:]:  # the newest run in detail; every run is in the runs table
        out.append(bold(f"Run {run.run_id}") + f"  created {run.created_at}, headline k={run.headline_k}")
        out.append(
            f"  {run.n_cases} cases, {run.n_labelled} labelled (scored), {run.n_rejected} rejected"
        )
        for warning in run.warnings:
            out.append("  " + (f"{RED}!{RESET}" if colour else "!") + " " + warning)
        out.append("")
        out.append(_indent(layout_text(slice_table(run, TERMINAL_SLICES, with_ci=False))))
        out.append("")
        out.append(_indent(layout_text(sweep_table(run))))
        out.append("")
    out += [f"* headline k.  {note}" if i == 0 else note for i, note in enumerate(report.notes)]
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Block:
    """One piece of the written report: kind is heading, text, warning, note, table or image."""

    kind: str
    text: str = ""
    table: Table | None = None
    level: int = 2
    image: str = ""  # file name in the report folder


def report_blocks(report: Report) -> list[Block]:
    """The written report (markdown, HTML, Prefect artifact) as one sequence of blocks."""
    blocks = [Block("heading", "Retrieval evaluation report", level=1)]
    blocks += [Block("note", note) for note in report.notes]
    warnings = [(run.run_id, w) for run in report.runs for w in run.warnings]
    if warnings:
        blocks.append(Block("heading", "Warnings"))
        blocks += [Block("warning", f"{run_id}: {w}") for run_id, w in warnings]
    blocks += [Block("heading", "Runs (headline k, slice all, oldest first)"), Block("table", table=runs_table(report)[0])]
    for name, title in CHART_TITLES.items():
        if name in report.charts:
            blocks.append(Block("image", title, image=report.charts[name]))
    for run in report.runs[-1:]:  # the newest run in detail; every run is in the runs table
        blocks.append(Block("heading", f"Run {run.run_id}"))
        blocks.append(Block(
            "text",
            f"Created {run.created_at}; headline k = {run.headline_k} (retrieval_top_k "
            f"{run.retrieval_top_k}); {run.n_cases} cases, {run.n_labelled} labelled and scored, "
            f"{run.n_rejected} rejected.",
        ))
        blocks.append(Block("table", table=slice_table(run, MARKDOWN_SLICES, with_ci=True)))
        blocks.append(Block("text", "k sweep, slice all (* = headline k):"))
        blocks.append(Block("table", table=sweep_table(run)))
    if report.runs:
        latest = report.runs[-1]
        blocks.append(Block("heading", f"Diagnostics of {latest.run_id}"))
        blocks.append(Block("text", "Rank at which each labelled case first meets a gold card (whole capture):"))
        blocks.append(Block("table", table=Table(
            ["first relevant rank", "cases"],
            [[fmt_rank(r["first_relevant_rank"]), str(r["n_cases"])] for r in report.entry_ranks.iter_rows(named=True)],
        )))
        blocks.append(Block("text", f"{report.never_hit.height} labelled case(s) never met a gold card within "
                            "the captured depth" + _listed(report.never_hit.height, "first_relevant_rank is null")))
        blocks.append(Block("table", table=Table(
            ["case", "locale", "category", "gold cards"],
            [[r["case_id"], r["locale"], r["category"], str(r["n_gold"])]
             for r in report.never_hit.head(LISTED_CASES).iter_rows(named=True)],
            align_right_from=3,
        )))
        if len(report.runs) > 1:
            previous = report.runs[-2]
            blocks.append(Block("text", f"{report.changed.height} case(s) changed hit@k between {previous.run_id} and "
                                f"{latest.run_id}" + _listed(report.changed.height, "hit_at_k of both runs differs")))
            blocks.append(Block("table", table=Table(
                ["case", "locale", "category", "change"],
                [[r["case_id"], r["locale"], r["category"], r["change"]]
                 for r in report.changed.head(LISTED_CASES).iter_rows(named=True)],
                align_right_from=4,
            )))
    return blocks


def _listed(n_cases: int, where: str) -> str:
    """The end of a diagnostic's heading line: all cases are listed, or the first few."""
    if n_cases <= LISTED_CASES:
        return ":"
    return (f" (the first {LISTED_CASES} are listed; every one is in the `case_metrics` view, "
            f"where {where} at the headline k):")


CHART_TITLES = {
    "sweep": "hit, recall and nDCG against k",
    "trend": "Headline figures across runs",
    "locales": "hit@k per locale with 95% intervals",
    "categories": "hit@k per category with 95% intervals",
}


def render_markdown(report: Report, with_images: bool = True) -> str:
    """report.md; without images for places that cannot show local files (Prefect UI)."""
    out = []
    for block in report_blocks(report):
        if block.kind == "heading":
            out.append("#" * block.level + " " + block.text)
        elif block.kind == "text":
            out.append(block.text)
        elif block.kind == "note":
            out.append(f"> {block.text}")
        elif block.kind == "warning":
            out.append(f"> **Warning:** {block.text}")
        elif block.kind == "table":
            out.append(layout_markdown(block.table))
        elif block.kind == "image" and with_images:
            out.append(f"![{block.text}]({block.image})")
        else:
            continue
        out.append("")
    return "\n".join(out)


HTML_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1100px; padding: 12px; color: #1b1f24; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #d0d7de; padding-top: .6em; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; margin: .5em 0 1em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; white-space: nowrap; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; } th { background: #f6f8fa; }
td.num, th.num { text-align: right; }
.note { color: #57606a; border-left: 3px solid #d0d7de; padding-left: 8px; }
.warning { background: #fff8c5; border-left: 3px solid #d4a72c; padding: 4px 8px; }
img { max-width: 100%; height: auto; }
"""


def render_html(report: Report, images: dict[str, bytes]) -> str:
    """report.html: one self-contained page (charts inline as data URIs, no network)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Retrieval evaluation report</title>",
        f"<style>{HTML_STYLE}</style></head><body>",
    ]
    for block in report_blocks(report):
        if block.kind == "heading":
            parts.append(f"<h{block.level}>{escape(block.text)}</h{block.level}>")
        elif block.kind == "text":
            parts.append(f"<p>{escape(block.text)}</p>")
        elif block.kind in ("note", "warning"):
            parts.append(f'<p class="{block.kind}">{escape(block.text)}</p>')
        elif block.kind == "table":
            parts.append(_html_table(block.table))
        elif block.kind == "image" and block.image in images:
            data = base64.b64encode(images[block.image]).decode("ascii")
            parts.append(f'<p><img alt="{escape(block.text)}" src="data:image/svg+xml;base64,{data}"></p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _html_table(table: Table) -> str:
    def cell(tag: str, text: str, col: int) -> str:
        cls = ' class="num"' if col >= table.align_right_from else ""
        return f"<{tag}{cls}>{escape(text)}</{tag}>"

    head = "".join(cell("th", h, i) for i, h in enumerate(table.header))
    body = "".join("<tr>" + "".join(cell("td", c, i) for i, c in enumerate(row)) + "</tr>" for row in table.rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def fmt_rank(rank: int | None) -> str:
    return "never" if rank is None else str(rank)


def report_json(report: Report) -> dict:
    """The `--json` document: per run, its account, warnings and every aggregate row."""
    return {
        "runs": [
            {
                "run_id": run.run_id,
                "created_at": run.created_at,
                "headline_k": run.headline_k,
                "ks": run.ks,
                "n_cases": run.n_cases,
                "n_labelled": run.n_labelled,
                "n_rejected": run.n_rejected,
                "vacuous": run.vacuous,
                "warnings": run.warnings,
                "aggregates": [
                    {key: row[key] for key in ("k", "slice", "slice_value", "metric", "mean", "n", "ci_low", "ci_high")}
                    for row in pl.concat([run.headline, run.sweep.filter(pl.col("k") != run.headline_k)])
                    .sort("k", "slice", "slice_value", "metric")
                    .iter_rows(named=True)
                ],
            }
            for run in report.runs
        ]
    }


def render_json(report: Report) -> str:
    return json.dumps(report_json(report), indent=2, sort_keys=True) + "\n"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def gate_table(result) -> Table:
    """Every gated metric and slice: baseline, current, delta with its paired interval, n."""
    header = ["slice", "metric", "baseline", "current", "delta", "paired 95% CI", "n base", "n now", "tolerance", ""]
    rows = []
    for line in result.lines:
        ci = "—" if line.delta_ci is None else f"{fmt_delta(line.delta_ci[0])} … {fmt_delta(line.delta_ci[1])}"
        status = "FAIL" if line.failed else ("ok" if line.tolerance is not None else "")
        rows.append([
            "all" if line.slice == "all" else f"{line.slice} {line.slice_value}",
            line.metric,
            fmt(line.baseline),
            fmt(line.current),
            fmt_delta(line.delta) or "—",
            ci,
            str(line.n_baseline),
            str(line.n_current),
            "—" if line.tolerance is None else f"{line.tolerance:.2f}",
            status,
        ])
    return Table(header, rows, align_right_from=2)


def render_gate(result, colour: bool = False) -> str:
    red = (lambda s: f"{RED}{s}{RESET}") if colour else (lambda s: s)
    green = (lambda s: f"{GREEN}{s}{RESET}") if colour else (lambda s: s)
    table = gate_table(result)
    colours = {(i, len(table.header) - 1): RED for i, line in enumerate(result.lines) if line.failed} if colour else {}
    out = [
        f"gate: run {result.run_id} against baseline {result.baseline_run_id} at k={result.k}",
        f"{result.n_rejected} record(s) of the run were rejected (left out of its figures)",
        "",
        layout_text(table, colours),
        "",
    ]
    for floor in result.floors:
        now = "missing" if floor.current is None else f"{floor.current:.3f}"
        out.append(f"floor {floor.metric} ≥ {floor.floor}: {now} {'FAIL' if floor.failed else 'ok'}")
    for title, cases in (("hit → miss", result.to_miss), ("miss → hit", result.to_hit)):
        out.append(f"{len(cases)} case(s) flipped {title}" + (":" if cases else ""))
        out += [f"  {c['case_id']} ({c['locale']}, {c['category']})" for c in cases]
    if result.added or result.removed:
        out.append(f"{len(result.added)} case(s) added since the baseline, {len(result.removed)} removed "
                   "(paired figures use the cases in both)")
        out += [f"  + {case_id}" for case_id in result.added] + [f"  - {case_id}" for case_id in result.removed]
    out += [f"note: {warning}" for warning in result.warnings]
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
        out += [f"  - {reason}" for reason in result.failures]
    return "\n".join(out) + "\n"


def render_gate_markdown(result) -> str:
    """The gate as markdown: for a CI job summary or a pull-request comment."""
    verdict = "PASS" if result.passed else "FAIL"
    out = [f"### retrieval-eval gate: {verdict}", "",
           f"Run `{result.run_id}` against baseline `{result.baseline_run_id}` at k={result.k}"
           f" ({result.n_rejected} rejected record(s) in the run).", "",
           layout_markdown(gate_table(result)), ""]
    if not result.passed:
        out += [f"- {reason}" for reason in result.failures] + [""]
    for title, cases in (("hit → miss", result.to_miss), ("miss → hit", result.to_hit)):
        out.append(f"{len(cases)} case(s) flipped {title}" + (": " + ", ".join(f"`{c['case_id']}`" for c in cases[:50]) if cases else "") + ".")
    return "\n".join(out) + "\n"
