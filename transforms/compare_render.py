"""Renderings of a comparison of runs (SPEC 11): a table, markdown, one HTML page (with a chart
of the deltas and their intervals per slice) and the JSON document, all of one model."""

from __future__ import annotations

import json
from html import escape

from .charts import delta_chart
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
            fmt_p(r["p_value"]), fmt_p(r["p_adjusted"]), f"{r['wins']}/{r['ties']}/{r['losses']}", str(r["n"]),
        ])
    return Table(["run", "slice", "metric", "reference mean", "run mean", "Δ", "paired 95% CI", "p", "p adjusted",
                  "wins/ties/losses", "n"], rows, 3)


def _groups_line(comparison) -> str:
    groups = "; ".join("{" + ", ".join(group) + "}" for group in comparison.tied_groups)
    return (f"Runs that no significant difference separates on {LABELS[comparison.metrics[0]]}@{comparison.k} "
            f"(all cases, every pair tested, {comparison.correction} over the pairs): {groups}")


def _heading(comparison) -> str:
    return (f"Every run against {comparison.reference} at k={comparison.k}, on the cases both scored: "
            f"{comparison.test} test, {comparison.correction} correction over the {comparison.comparisons.height} "
            f"comparisons, * = significant at {comparison.alpha}")


def render_comparison_text(comparison) -> str:
    return "\n".join([_heading(comparison), "", layout_text(comparison_table(comparison)), "",
                      _groups_line(comparison)]) + "\n"


def render_comparison_markdown(comparison) -> str:
    return "\n".join([f"### {_heading(comparison)}", "", layout_markdown(comparison_table(comparison)), "",
                      _groups_line(comparison)]) + "\n"


def comparison_charts(comparison) -> list[bytes]:
    """One forest plot of the deltas per slice kind and metric, each run a row per slice value."""
    charts = []
    frame = comparison.comparisons
    for (slice_, metric), rows in frame.group_by("slice", "metric", maintain_order=True):
        data = [{"label": f"{r['run_id']} · {r['slice_value']}" if slice_ != "all" else r["run_id"],
                 "delta": r["delta"], "ci_low": r["ci_low"], "ci_high": r["ci_high"], "significant": r["significant"]}
                for r in rows.sort("slice_value", "run_id").iter_rows(named=True)]
        charts.append(delta_chart(data, f"{LABELS[metric]}@{comparison.k} against {comparison.reference}, by {slice_}"))
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
        f"<h1>Comparison of runs</h1><p>{escape(_heading(comparison))}</p>",
        layout_html(comparison_table(comparison)), f"<p>{escape(_groups_line(comparison))}</p>",
        f'<div class="charts">{figures}</div>', "</body></html>",
    ]) + "\n"


def comparison_json(comparison) -> dict:
    return {
        "reference": comparison.reference,
        "k": comparison.k,
        "test": comparison.test,
        "correction": comparison.correction,
        "alpha": comparison.alpha,
        "comparisons": [{key: row[key] for key in JSON_FIELDS} for row in comparison.comparisons.iter_rows(named=True)],
        "tied_groups": comparison.tied_groups,
    }


def render_comparison_json(comparison) -> str:
    return json.dumps(comparison_json(comparison), indent=2, sort_keys=True) + "\n"


RENDERERS = {"table": render_comparison_text, "markdown": render_comparison_markdown,
             "html": render_comparison_html, "json": render_comparison_json}
