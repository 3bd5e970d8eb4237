"""Renderings of the report model (transforms/report.py): the terminal, report.md, report.html
(charts and the case explorer inline, nothing fetched) and the `--json` document. Each opens
with what changed; tables are built once as rows of cells (transforms/tables.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain

import polars as pl

from .case_explorer import ChunkMap, explorer_section
from .charts_of_report import CHART_TITLES
from .escaping import html_text, markdown_text, terminal_text
from .flips import REASONS
from .metrics import LABELS, NAMES
from .report import Changes, Report, RunReport, change_phrase, headline_of, signed
from .tables import (
    BOLD,
    GREEN,
    RED,
    RESET,
    Table,
    fmt,
    fmt_p,
    indent,
    layout_html,
    layout_markdown,
    layout_text,
)

TERMINAL_SLICES = ("all", "locale", "category")
MARKDOWN_SLICES = ("all", "locale", "category", "locale_category")
TERMINAL_RUNS = 10  # the terminal's runs table shows the newest runs; report.md shows every one
# A report lists at most this many cases per diagnostic (never-hit cases by id, flipped cases
# by direction then id); past that a table stops being read, and the warehouse holds every case.
LISTED_CASES = 50


def fmt_with_ci(row: dict | None) -> str:
    if row is None:
        return "—"
    return f"{row['mean']:.3f} ({row['ci_low']:.2f}–{row['ci_high']:.2f})"


def fmt_rank(rank: int | None) -> str:
    return "never" if rank is None else str(rank)


# ----------------------------------------------------------------------------- tables


def changes_table(changes: Changes, limit: int | None = None) -> Table:
    """The changes, largest first: slice, metric, before, now, delta with its paired interval,
    adjusted p, n."""
    lines = changes.lines if limit is None else changes.moved(limit)
    rows = [
        ["all" if r["slice"] == "all" else f"{r['slice']} {r['slice_value']}",
         f"{LABELS[r['metric']]}@{changes.k}", fmt(r["reference_mean"]), fmt(r["mean"]),
         signed(r["delta"]) + (" *" if r["significant"] else ""),
         f"{signed(r['ci_low'])} … {signed(r['ci_high'])}", fmt_p(r["p_adjusted"], changes.alpha), str(r["n"])]
        for r in lines.iter_rows(named=True)
    ]
    return Table(["slice", "metric", "before", "now", "Δ", "paired 95% CI", "p (Holm)", "n"], rows, 2)


def reasons_table(changes: Changes) -> Table:
    """Hit → miss flips per reason, in `all` and in each locale; a reason no flip has is left
    out (the text above the table names every reason), so the table fits a phone."""
    counts = changes.reasons.filter(pl.col("slice").is_in(["all", "locale"]))
    keys = [("all", "all")] + sorted({(s, v) for s, v in counts.select("slice", "slice_value").iter_rows()
                                      if s == "locale"})
    reasons = [reason for reason in REASONS if reason in set(counts["reason"])] or list(REASONS)
    rows = []
    for slice_, value in keys:
        mine = {r["reason"]: r["n"] for r in counts.filter(
            (pl.col("slice") == slice_) & (pl.col("slice_value") == value)).iter_rows(named=True)}
        rows.append(["all" if slice_ == "all" else value, *[str(mine.get(reason, 0)) for reason in reasons],
                     str(sum(mine.values()))])
    return Table(["hit → miss in", *reasons, "total"], rows)


def runs_table(report: Report, limit: int | None = None) -> tuple[Table, list[float | None]]:
    """Headline figures of every run (oldest first) with the hit@k change from the run before."""
    frame = report.runs
    header = ["run", "k"] + [f"{LABELS[m]}@k" for m in NAMES] + ["n", "Δ hit"]
    rows, deltas, previous = [], [], None
    for row in frame.iter_rows(named=True):
        hit = row["hit_at_k"]
        delta = None if previous is None or hit is None else hit - previous
        deltas.append(delta)
        previous = hit
        rows.append([row["run_id"], str(row["headline_k"])] + [fmt(row[m]) for m in NAMES]
                    + [str(row["n"]), "" if delta is None else signed(delta)])
    if limit is not None:
        rows, deltas = rows[-limit:], deltas[-limit:]
    return Table(header, rows), deltas


def slice_table(run: RunReport, slices: tuple[str, ...]) -> Table:
    """Headline-k figures per slice; the n column is the number of labelled cases scored."""
    k = run.headline_k
    header = ["slice"] + [f"{LABELS[m]}@{k}" for m in NAMES] + ["n"]
    header[1] += " (95% CI)"
    by_key = {(r["slice"], r["slice_value"], r["metric"]): r for r in run.headline.iter_rows(named=True)}
    rows = []
    for slice_ in slices:
        for value in sorted({v for (s, v, _m) in by_key if s == slice_}):
            label = "all" if slice_ == "all" else f"{slice_.replace('_', ' × ')} {value}"
            hit = by_key.get((slice_, value, "hit_at_k"))
            cells = [label, fmt_with_ci(hit)]  # the headline figure always shows its interval
            for metric in NAMES[1:]:
                row = by_key.get((slice_, value, metric))
                cells.append(fmt(row["mean"]) if row else "—")
            cells.append(str(hit["n"]) if hit else "0")
            rows.append(cells)
    return Table(header, rows)


def sweep_table(run: RunReport) -> Table:
    header = ["k"] + [LABELS[m] for m in NAMES] + ["n"]
    rows = []
    for k in run.ks:
        at_k = {r["metric"]: r for r in run.sweep.filter(pl.col("k") == k).iter_rows(named=True)}
        n = at_k["hit_at_k"]["n"] if "hit_at_k" in at_k else 0
        rows.append([f"{k}*" if k == run.headline_k else str(k)] + [fmt(at_k[m]["mean"]) if m in at_k else "—"
                                                                    for m in NAMES] + [str(n)])
    return Table(header, rows)


def flips_table(changes: Changes) -> Table:
    rows = [[r["case_id"], r["locale"], r["category"], f"{r['from']} → {r['to']}", r["reason"],
             fmt_rank(r["rank_before"]), fmt_rank(r["rank_after"])]
            for r in changes.flips.head(LISTED_CASES).iter_rows(named=True)]
    return Table(["case", "locale", "category", "flip", "reason", "rank before", "rank now"], rows, 5)


# ----------------------------------------------------------------------------- what changed


def changes_summary(changes: Changes) -> list[str]:
    """The lines a reader sees first: the largest change, the flips, what the figures rest on."""
    to_miss = changes.flips.filter(pl.col("to") == "miss").height
    to_hit = changes.flips.height - to_miss
    reasons = changes.reasons.filter(pl.col("slice") == "all").sort("n", descending=True)
    why = ", ".join(f"{r['n']} {r['reason']}" for r in reasons.iter_rows(named=True))
    moved = [change_phrase(row, changes.k) for row in changes.moved(3).iter_rows(named=True)]
    lines = [f"What changed in {changes.run_id} since {changes.reference}: {headline_of(changes)}"]
    if len(moved) > 1:
        lines.append("  next: " + "; ".join(moved[1:]))
    lines.append(f"  {to_miss} case(s) flipped hit → miss" + (f" ({why})" if why else "")
                 + f", {to_hit} miss → hit; {changes.n_shared} cases compared"
                 + (f", {changes.n_added} added, {changes.n_removed} removed" if changes.n_added or changes.n_removed else ""))
    lines += [f"  note: {note}" for note in changes.notes]
    lines.append(f"  p (Holm) is adjusted by {changes.p_family}; * = p (Holm) < {changes.alpha}")
    return lines


def nothing_to_compare(run: RunReport) -> str:
    """The opening line of a report whose newest run has no run before it (nor a baseline at its k)."""
    return f"What changed in {run.run_id}: nothing to compare, there is no run before it"


# ----------------------------------------------------------------------------- terminal


def render_terminal(report: Report, colour: bool = False) -> str:
    bold = (lambda s: f"{BOLD}{s}{RESET}") if colour else (lambda s: s)
    out = []
    if report.changes is not None:
        summary = [terminal_text(line) for line in changes_summary(report.changes)]
        out += [bold(summary[0]), *summary[1:], ""]
        out += [indent(layout_text(changes_table(report.changes, limit=6))), ""]
    elif report.newest is not None:
        out += [bold(terminal_text(nothing_to_compare(report.newest))),
                *[f"  note: {terminal_text(note)}" for note in report.uncompared], ""]
    total = report.runs.height
    shown = min(total, TERMINAL_RUNS)
    title = f"retrieval-eval — {total} run(s), headline figures on all labelled cases"
    out += [bold(title + (f" (the newest {shown}; every run is in report.md)" if shown < total else "")), ""]
    table, deltas = runs_table(report, limit=TERMINAL_RUNS)
    colours = {}
    if colour:
        for i, delta in enumerate(deltas):
            if delta:
                colours[(i, len(table.header) - 1)] = GREEN if delta > 0 else RED
    out += [layout_text(table, colours), ""]
    run = report.newest
    if run is not None:
        out.append(bold(f"Newest run {terminal_text(run.run_id)}")
                   + f"  created {terminal_text(run.created_at)}, headline k={run.headline_k}")
        out.append(f"  {run.n_cases} cases, {run.n_labelled} labelled (scored), {run.n_rejected} rejected")
        out += ["  " + (f"{RED}!{RESET}" if colour else "!") + " " + terminal_text(warning) for warning in run.warnings]
        out += ["", indent(layout_text(slice_table(run, TERMINAL_SLICES))), ""]
        if len(run.ks) > 1:
            out += ["  k sweep, slice all (* = headline k):", indent(layout_text(sweep_table(run))), ""]
    out += [terminal_text(note) for note in report.notes]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- written report


@dataclass(frozen=True)
class Block:
    """One piece of the written report: kind is heading, text, warning, note, table, images or explorer."""

    kind: str
    text: str = ""
    table: Table | None = None
    level: int = 2
    images: tuple[str, ...] = ()  # chart names, drawn side by side where the page is wide


def report_blocks(report: Report) -> list[Block]:
    """The written report (markdown, HTML, Prefect artifact) as one sequence of blocks."""
    blocks = [Block("heading", "Retrieval evaluation report", level=1)]
    if report.changes is not None:
        summary = changes_summary(report.changes)
        blocks += [Block("heading", "What changed"), Block("text", summary[0]),
                   *[Block("text", line.strip()) for line in summary[1:]],
                   Block("table", table=changes_table(report.changes)), Block("images", images=("changes",)),
                   Block("text", "Cases that flipped hit → miss, by reason (the first that applies: "
                         + ", ".join(REASONS) + "; a reason no case has is not shown):"),
                   Block("table", table=reasons_table(report.changes))]
        if report.changes.flips.height:
            blocks += [Block("text", f"{report.changes.flips.height} flipped case(s)"
                             + _listed(report.changes.flips.height, "hit_at_k of both runs differs")),
                       Block("table", table=flips_table(report.changes))]
    elif report.newest is not None:
        blocks += [Block("heading", "What changed"), Block("text", nothing_to_compare(report.newest)),
                   *[Block("text", f"note: {note}") for note in report.uncompared]]
    warnings = [w for run in (report.newest,) if run for w in run.warnings]
    if warnings:
        blocks.append(Block("heading", "Warnings"))
        blocks += [Block("warning", f"{report.newest.run_id}: {w}") for w in warnings]
    blocks += [Block("heading", "Runs (headline k, slice all, oldest first)"), Block("table", table=runs_table(report)[0]),
               Block("images", images=("trend", "locales", "categories"))]
    run = report.newest
    if run is not None:
        blocks.append(Block("heading", f"Newest run: {run.run_id}"))
        blocks.append(Block(
            "text",
            f"Created {run.created_at}; headline k = {run.headline_k} (retrieval_top_k "
            f"{run.retrieval_top_k}); {run.n_cases} cases, {run.n_labelled} labelled and scored, "
            f"{run.n_rejected} rejected.",
        ))
        blocks.append(Block("table", table=slice_table(run, MARKDOWN_SLICES)))
        if len(run.ks) > 1:
            blocks += [Block("text", "k sweep, slice all (* = headline k):"), Block("table", table=sweep_table(run)),
                       Block("images", images=("sweep-hit_at_k", "sweep-recall_at_k", "sweep-ndcg_at_k"))]
        blocks.append(Block("heading", f"Diagnostics of {run.run_id}"))
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
        if report.explorer is not None:
            blocks.append(Block("explorer"))
    blocks += [Block("note", note) for note in report.notes]
    return blocks


def _listed(n_cases: int, where: str) -> str:
    """The end of a diagnostic's heading line: all cases are listed, or the first few."""
    if n_cases <= LISTED_CASES:
        return ":"
    return (f" (the first {LISTED_CASES} are listed; every one is in the `case_metrics` view, "
            f"where {where} at the headline k):")


def render_markdown(report: Report, with_images: bool = True) -> str:
    """report.md; without images for places that cannot show local files (Prefect UI)."""
    out = []
    for block in report_blocks(report):
        if block.kind == "heading":
            out.append("#" * block.level + " " + markdown_text(block.text))
        elif block.kind == "text":
            out.append(markdown_text(block.text))
        elif block.kind == "note":
            out.append(f"> {markdown_text(block.text)}")
        elif block.kind == "warning":
            out.append(f"> **Warning:** {markdown_text(block.text)}")
        elif block.kind == "table":
            out.append(layout_markdown(block.table))
        elif block.kind == "images" and with_images and any(name in report.charts for name in block.images):
            out.append(" ".join(f"![{CHART_TITLES[name]}]({report.charts[name]})"
                                for name in block.images if name in report.charts))
        elif block.kind == "explorer":
            out.append("Every labelled case, with its evidence, is in the case explorer of report.html.")
        else:
            continue
        out.append("")
    return "\n".join(out)


HTML_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1160px; padding: 12px; color: #1b1f24; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #d0d7de; padding-top: .6em; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; margin: .5em 0 1em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; white-space: nowrap; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; } th { background: #f6f8fa; }
td.num, th.num { text-align: right; }
.note { color: #57606a; border-left: 3px solid #d0d7de; padding-left: 8px; }
.warning { background: #fff8c5; border-left: 3px solid #d4a72c; padding: 4px 8px; }
.lead { font-size: 1.1em; font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; margin: .5em 0 1em; }
.charts figure { margin: 0; max-width: 100%; }
.charts svg { max-width: 100%; height: auto; }
/* a phone: long slice labels and run ids wrap, so the first figures show beside them */
@media (max-width: 700px) { .labels td:first-child { white-space: normal; } }
"""


LABELLED_TABLES = ("slice", "run")  # tables whose first column is a long label, then figures


def render_html(report: Report, images: dict[str, bytes], *, explorer_script: str = "", explorer_style: str = "",
                map_chunks: ChunkMap = map) -> Iterator[str]:
    """report.html: one self-contained page (charts inline as SVG, the case explorer, no
    network), as parts to write one after the other: the page is laid out here, the
    explorer's data (tens of MB at 100k cases) is made as the parts are taken, in chunks
    made by `map_chunks`."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Retrieval evaluation report</title>",
        f"<style>{HTML_STYLE}</style></head><body>",
    ]
    page: list[Iterable[str]] = []  # what is done; `parts` are lines still to join
    first_text = True
    for block in report_blocks(report):
        if block.kind == "heading":
            parts.append(f"<h{block.level}>{html_text(block.text)}</h{block.level}>")
        elif block.kind == "text":
            css = ' class="lead"' if first_text and report.newest is not None else ""
            first_text = False
            parts.append(f"<p{css}>{html_text(block.text)}</p>")
        elif block.kind in ("note", "warning"):
            parts.append(f'<p class="{block.kind}">{html_text(block.text)}</p>')
        elif block.kind == "table":
            table = layout_html(block.table)
            if block.table.header[0] in LABELLED_TABLES:
                table = table.replace('<div class="scroll">', '<div class="scroll labels">', 1)
            parts.append(table)
        elif block.kind == "images":
            figures = [
                f'<figure aria-label="{html_text(CHART_TITLES[name])}">{images[report.charts[name]].decode("utf-8")}</figure>'
                for name in block.images if name in report.charts and report.charts[name] in images
            ]
            if figures:
                parts.append('<div class="charts">' + "".join(figures) + "</div>")
        elif block.kind == "explorer" and report.explorer is not None:
            cases, meta = report.explorer
            explorer = explorer_section(cases, meta, script=explorer_script, style=explorer_style, map_chunks=map_chunks)
            page += [["\n".join(parts) + "\n"], explorer]
            parts = []
    parts.append("</body></html>")
    return chain.from_iterable([*page, ["\n".join(parts) + "\n"]])


# ----------------------------------------------------------------------------- JSON


def report_json(report: Report) -> dict:
    """The `--json` document: per run (oldest first), its account, warnings (of the newest)
    and every aggregate row the report shows (every slice at the headline k, slice all at
    the other ks)."""
    keys = ("k", "slice", "slice_value", "metric", "mean", "n", "ci_low", "ci_high")
    by_run = {run_id: frame for (run_id,), frame in
              report.aggregates.sort("k", "slice", "slice_value", "metric").group_by("run_id", maintain_order=True)}
    warnings = {report.newest.run_id: report.newest.warnings} if report.newest else {}
    ks = {run_id: sorted(frame["k"].unique().to_list()) for run_id, frame in by_run.items()}
    return {
        "runs": [
            {
                "run_id": run["run_id"],
                "created_at": run["created_at"],
                "headline_k": run["headline_k"],
                "ks": ks.get(run["run_id"], [run["headline_k"]]),
                "n_cases": run["n_cases"],
                "n_labelled": run["n_labelled"],
                "n_rejected": run["n_rejected"],
                "vacuous": run["vacuous"],
                "warnings": warnings.get(run["run_id"], []),
                "aggregates": [{key: row[key] for key in keys}
                               for row in by_run[run["run_id"]].iter_rows(named=True)] if run["run_id"] in by_run else [],
            }
            for run in report.runs.iter_rows(named=True)
        ]
    }


def render_json(report: Report) -> str:
    return json.dumps(report_json(report), indent=2, sort_keys=True) + "\n"
