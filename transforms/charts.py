"""Charts of the report (PNG): metric against k, headline trend across runs, and hit@k
per locale and per category with 95% intervals. matplotlib is imported only here, so a
run that renders no chart never pays for it."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from transforms.report import RunReport

SWEEP_METRICS = ("hit_at_k", "recall_at_k", "ndcg_at_k")
TITLES = {"hit_at_k": "hit@k", "recall_at_k": "recall@k (lower bound)", "ndcg_at_k": "nDCG@k"}


def warm_up() -> None:
    """Import the plotting stack and load its fonts by drawing a tiny figure, so that the
    next charts cost their drawing only (flows/chart_process.py does this ahead of time)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(1, 1))
    figure.subplots().set_title("warm-up")
    FigureCanvasAgg(figure).draw()


def chart_files(runs: list[RunReport]) -> dict[str, str]:
    """The charts of the report's runs: chart name → file name (known before drawing)."""
    if not runs:
        return {}
    names = ["sweep"] if any(len(run.ks) > 1 for run in runs) else []  # a curve needs a sweep (--ks)
    return {name: f"{name}.png" for name in [*names, "trend", "locales", "categories"]}


def write_charts(runs: list[RunReport], out_dir: Path, baseline: dict[str, float] | None = None) -> dict[str, str]:
    """Write every chart of the report's runs into `out_dir`; returns chart name → file name."""
    files = chart_files(runs)
    if not files:
        return {}
    # The object-oriented API without pyplot: no GUI backend, no global figure state.
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    palette = colormaps["tab10"]
    colours = {run.run_id: palette(i % 10) for i, run in enumerate(runs)}
    if "sweep" in files:
        _sweep(Figure, runs, colours, out_dir / files["sweep"])
    _trend(Figure, runs, out_dir / files["trend"], baseline or {})
    _slices(Figure, runs, colours, "locale", out_dir / files["locales"])
    _slices(Figure, runs, colours, "category", out_dir / files["categories"])
    return files


def _sweep(Figure, runs: list[RunReport], colours, path: Path) -> Path:
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(12, 3.6))
    # Fixed margins: a layout engine would cost more than drawing the chart.
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.15, top=0.91, wspace=0.06)
    axes = fig.subplots(1, 3, sharey=True)
    for ax, metric in zip(axes, SWEEP_METRICS, strict=True):
        for run in runs:
            rows = run.sweep.filter(pl.col("metric") == metric).sort("k")
            ax.plot(rows["k"], rows["mean"], marker="o", ms=3, color=colours[run.run_id], label=run.run_id)
            at_headline = rows.filter(pl.col("k") == run.headline_k)
            if at_headline.height:
                ax.plot(at_headline["k"], at_headline["mean"], marker="*", ms=12, color=colours[run.run_id])
        ax.set_title(TITLES[metric])
        ax.set_xlabel("k (★ headline)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def _trend(Figure, runs: list[RunReport], path: Path, baseline: dict[str, float]) -> Path:
    fig = Figure(figsize=(8, 3.6))
    fig.subplots_adjust(left=0.08, right=0.97, bottom=0.3, top=0.9)
    ax = fig.subplots()
    labels = [run.run_id for run in runs]
    for metric, style in zip(SWEEP_METRICS, ("-o", "-s", "-^"), strict=True):
        values = [(run.figure(metric) or {}).get("mean") for run in runs]
        line = ax.plot(range(len(labels)), values, style, label=TITLES[metric])[0]
        if metric in baseline:
            ax.axhline(baseline[metric], color=line.get_color(), ls="--", lw=1, alpha=0.7)
    ax.set_xticks(range(len(labels)), labels, rotation=15, ha="right", fontsize=7)
    ax.set_ylim(0, 1.02)
    ax.set_title("Headline figures by run (oldest first" + (", dashed: baseline)" if baseline else ")"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _slices(Figure, runs: list[RunReport], colours, slice_: str, path: Path) -> Path:
    values = sorted(
        {v for run in runs for v in run.headline.filter(pl.col("slice") == slice_)["slice_value"]}
    )
    fig = Figure(figsize=(max(6, 1.6 * len(values) * max(1, len(runs)) / 2), 3.8))
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.1, top=0.9)
    ax = fig.subplots()
    width = 0.8 / max(1, len(runs))
    for i, run in enumerate(runs):
        rows = {
            r["slice_value"]: r
            for r in run.headline.filter((pl.col("slice") == slice_) & (pl.col("metric") == "hit_at_k")).iter_rows(named=True)
        }
        xs = [j + i * width for j, v in enumerate(values) if v in rows]
        got = [rows[v] for v in values if v in rows]
        means = [r["mean"] for r in got]
        errors = [[r["mean"] - r["ci_low"] for r in got], [r["ci_high"] - r["mean"] for r in got]]
        ax.bar(xs, means, width, yerr=errors, capsize=2, color=colours[run.run_id], label=run.run_id)
        for x, r in zip(xs, got, strict=True):
            ax.text(x, 0.02, f"n={r['n']}", rotation=90, ha="center", va="bottom", fontsize=6, color="white")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(values))], values)
    ax.set_ylim(0, 1.3)  # headroom for the legend above the bars
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_title(f"hit@k per {slice_} at each run's headline k (95% CI)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=90)
    return path
