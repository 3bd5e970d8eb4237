"""Renderings of a comparison of runs (SPEC 11): a table, markdown, one HTML page (with a chart
of the deltas and their intervals per slice) and the JSON document, all of one model."""

from __future__ import annotations

import json

from .charts import delta_chart
from .comparison import adjusted_by, p_family
from .escaping import html_text, markdown_inline, markdown_text, terminal_text
from .letter_display import letter, letters
from .metrics import LABELS
from .tables import Table, fmt, fmt_p, layout_html, layout_markdown, layout_text, signed

JSON_FIELDS = ("run_id", "slice", "slice_value", "metric", "n", "reference_mean", "mean", "delta", "ci_low", "ci_high",
               "p_value", "p_adjusted", "significant", "wins", "ties", "losses")


def comparison_table(comparison) -> Table:
    rows = []
    for r in comparison.comparisons.iter_rows(named=True):
        rows.append([
            r["run_id"], "all" if r["slice"] == "all" else f"{r['slice']} {r['slice_value']}",
            f"{LABELS[r['metric']]}@{comparison.k}", fmt(r["reference_mean"]), fmt(r["mean"]),
            signed(r["delta"]) + (" *" if r["significant"] else ""), f"{signed(r['ci_low'])} … {signed(r['ci_high'])}",
            fmt_p(r["p_value"]), fmt_p(r["p_adjusted"], comparison.alpha), f"{r['wins']}/{r['ties']}/{r['losses']}",
            str(r["n"]),
        ])
    return Table(["run", "slice", "metric", "reference mean", "run mean", "Δ", "paired 95% CI", "p", "p adjusted",
                  "wins/ties/losses", "n"], rows, 3)


def comparisons_family(comparison) -> str:
    """The family `p adjusted` of the comparisons table was corrected over."""
    return p_family(comparison.correction, comparison.comparisons.height, "comparison", " of this table")


def pairs_family(comparison) -> str:
    """The family of the pairwise tests behind the tied groups."""
    runs = len({run for pair in comparison.pairs.select("a", "b").iter_rows() for run in pair})
    return p_family(comparison.correction, comparison.pairs.height, "pair",
                    f" of the {runs} runs on {comparison.metrics[0]}@{comparison.k}, slice all")


def pairs_table(comparison) -> Table:
    rows = [[r["a"], r["b"], fmt_p(r["p_value"]), fmt_p(r["p_adjusted"], comparison.alpha),
             "yes *" if r["significant"] else "no"] for r in comparison.pairs.iter_rows(named=True)]
    return Table(["run a", "run b", "p", "p adjusted", "significant"], rows, 2)


def _groups_lines(comparison) -> list[str]:
    """The tied groups as a compact letter display: runs that share a letter are not
    significantly different on the first metric; a run may carry several letters."""
    groups = "; ".join(f"{letter(i)} = {{" + ", ".join(group) + "}" for i, group in enumerate(comparison.tied_groups))
    marks = letters(comparison.tied_groups)
    return [f"Tied groups on {LABELS[comparison.metrics[0]]}@{comparison.k} (all cases, every pair of runs tested, "
            f"p {adjusted_by(comparison.correction, pairs_family(comparison))}, significant below {comparison.alpha}; groups may overlap, "
            f"and runs that share a letter are not significantly different): {groups}",
            "Letters: " + "; ".join(f"{run} {marks[run]}" for run in marks)]


def _heading(comparison) -> str:
    return (f"Every run against {comparison.reference} at k={comparison.k}, on the cases both scored: "
            f"{comparison.test} test, p {adjusted_by(comparison.correction, comparisons_family(comparison))}, "
            f"* = p adjusted < {comparison.alpha}")


def render_comparison_text(comparison) -> str:
    return "\n".join([terminal_text(_heading(comparison)), "", layout_text(comparison_table(comparison)), "",
                      *map(terminal_text, _groups_lines(comparison)), "", layout_text(pairs_table(comparison))]) + "\n"


def render_comparison_markdown(comparison) -> str:
    groups = [markdown_text(line) for line in _groups_lines(comparison)]
    return "\n".join([f"### {markdown_inline(_heading(comparison))}", "", layout_markdown(comparison_table(comparison)), "",
                      groups[0], "", groups[1], "", layout_markdown(pairs_table(comparison))]) + "\n"


def comparison_charts(comparison) -> list[bytes]:
    """One forest plot of the deltas per slice kind and metric, each run a row per slice value."""
    charts = []
    frame = comparison.comparisons
    for (slice_, metric), rows in frame.group_by("slice", "metric", maintain_order=True):
        data = [{"label": f"{r['run_id']} · {r['slice_value']}" if slice_ != "all" else r["run_id"],
                 "delta": r["delta"], "ci_low": r["ci_low"], "ci_high": r["ci_high"], "significant": r["significant"]}
                for r in rows.sort("slice_value", "run_id").iter_rows(named=True)]
        charts.append(delta_chart(data, f"{LABELS[metric]}@{comparison.k} against {comparison.reference}, by {slice_}",
                                  f"p < {comparison.alpha}, "
                                  + p_family(comparison.correction, comparison.comparisons.height)))
    return charts


def render_comparison_html(comparison) -> str:
    figures = "".join(f"<figure>{svg.decode('utf-8')}</figure>" for svg in comparison_charts(comparison))
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Comparison of runs</title>",
        "<style>body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1160px;padding:12px}"
        ".scroll{overflow-x:auto}table{border-collapse:collapse;white-space:nowrap}th,td{border:1px solid #d0d7de;"
        "padding:3px 8px}.num{text-align:right}.charts{display:flex;flex-wrap:wrap;gap:12px}"
        "figure{margin:0;max-width:100%}svg{max-width:100%;height:auto}</style></head><body>",
        f"<h1>Comparison of runs</h1><p>{html_text(_heading(comparison))}</p>",
        layout_html(comparison_table(comparison)), *[f"<p>{html_text(line)}</p>" for line in _groups_lines(comparison)],
        layout_html(pairs_table(comparison)),
        f'<div class="charts">{figures}</div>', "</body></html>",
    ]) + "\n"


def comparison_json(comparison) -> dict:
    return {
        "reference": comparison.reference,
        "k": comparison.k,
        "test": comparison.test,
        "correction": comparison.correction,
        "alpha": comparison.alpha,
        "p_family": comparisons_family(comparison),
        "comparisons": [{key: row[key] for key in JSON_FIELDS} for row in comparison.comparisons.iter_rows(named=True)],
        "pairs": comparison.pairs.to_dicts(),
        "pairs_correction": comparison.correction,
        "pairs_family": pairs_family(comparison),
        "tied_groups": comparison.tied_groups,
        "letters": letters(comparison.tied_groups),
    }


def render_comparison_json(comparison) -> str:
    return json.dumps(comparison_json(comparison), indent=2, sort_keys=True) + "\n"


RENDERERS = {"table": render_comparison_text, "markdown": render_comparison_markdown,
             "html": render_comparison_html, "json": render_comparison_json}
