"""Charts of the report as SVG, drawn from plain Python data without a plotting library.

Four kinds of chart, each a pure function of its data (same data, same bytes):

- `sweep_panels(runs)`: hit@k, recall@k and nDCG@k against k, one small panel per metric.
- `trend_chart(run_ids, series, baseline)`: the headline figures across runs.
- `slice_chart(slice_name, rows)`: hit@k per slice value with its 95% interval and n.
- `delta_chart(rows, title, marked)`: a forest plot of changes with their paired 95% intervals.

Every chart is at most `WIDTH` (360) px wide with text of 11 px or more, so a phone
(390 px viewport, 12 px page padding) shows it at its natural size; a wide page lays
several side by side. Series are told apart by an Okabe–Ito colour and by a marker
shape and a dash pattern, so they stay apart in greyscale and for colour-blind readers.

Each chart is built in two steps. A *layout* function (`sweep_layouts`, `trend_layout`,
`slice_layout`, `delta_layout`) places every element and returns a `Scene`: a list of
primitives (text, lines, markers, bands) whose bounding boxes are known, plus the plot
area and the legend entries' boxes. `render` writes a scene as SVG. The tests check the
layouts (no text overlaps other text, the legend stays clear of the plot, n labels stay
clear of the marks) and the SVG (valid XML, sizes, byte-identical output).

Text widths are estimated, not measured: `text_width` uses per-character widths at or
above those of DejaVu Sans, the widest common sans-serif, so labels laid out with it fit
in whatever font of the system stack the viewer picks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .escaping import html_text
from .tables import signed

WIDTH = 360
PAD = 8  # outer margin on every side
FONT_FAMILY = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif"
TITLE_SIZE, TEXT_SIZE, SMALL_SIZE = 14, 12, 11
LINE_GAP = 3  # between two lines of text, beyond the font size
INK, MUTED, GRID, BAND, WHITE = "#1b1f24", "#57606a", "#d0d7de", "#f3f5f7", "#ffffff"

SWEEP_METRICS = ("hit_at_k", "recall_at_k", "ndcg_at_k")
METRIC_TITLES = {"hit_at_k": "hit@k", "recall_at_k": "recall@k", "ndcg_at_k": "nDCG@k"}
MAX_SWEEP_RUNS = 6  # the sweep panels draw the newest runs only: more curves cannot be told apart
MAX_SLICE_RUNS = 3  # the slice chart sets the newest run beside at most two before it
DENSE_MARKERS = 30  # a trend of more runs marks about a dozen points per line, not every one


@dataclass(frozen=True)
class Style:
    """How one series is drawn: colour, marker shape and dash pattern ("" is a solid line)."""

    colour: str
    marker: str
    dash: str


# Okabe–Ito colours (yellow left out: too faint on white). Index 0 is the newest run, so a
# run keeps its style across the sweep panels and the slice chart.
RUN_STYLES = (
    Style("#0072B2", "circle", ""),
    Style("#D55E00", "square", "6 3"),
    Style("#009E73", "triangle", "2 2"),
    Style("#000000", "diamond", "7 2 2 2"),
    Style("#CC79A7", "triangle-down", "1 3"),
    Style("#E69F00", "cross", "10 3"),
)
METRIC_STYLES = {
    "hit_at_k": Style("#0072B2", "circle", ""),
    "recall_at_k": Style("#D55E00", "square", ""),
    "ndcg_at_k": Style("#009E73", "triangle", ""),
}
BASELINE_DASH = "6 4"
GAIN, LOSS = "#0072B2", "#D55E00"  # delta chart: significant gains and losses

# Character widths in em, rounded up from DejaVu Sans; any other character counts 0.66
# (lower case, digits) or 0.8 (upper case, other scripts: 1.0).
_EM = {
    **dict.fromkeys("il.,:;'|!`", 0.32),
    **dict.fromkeys("fjrtI()[]{} -/\\\"", 0.45),
    **dict.fromkeys("mwMW@%&…—", 1.0),
    "·": 0.4, "×": 0.84, "−": 0.84, "–": 0.5, "≥": 0.84, "±": 0.84, "Δ": 0.78, "=": 0.84, "+": 0.84,
}


def text_width(text: str, size: float) -> float:
    """A conservative width in px of `text` at font size `size` (see the module's note)."""
    return size * sum(_EM.get(c, 0.8 if c.isupper() else 0.66 if c.isascii() else 1.0) for c in text)


def fit_text(text: str, max_width: float, size: float) -> str:
    """`text`, or its longest start that fits `max_width` with an ellipsis."""
    if text_width(text, size) <= max_width:
        return text
    for end in range(len(text) - 1, 0, -1):
        shortened = text[:end].rstrip() + "…"
        if text_width(shortened, size) <= max_width:
            return shortened
    return "…"


def wrap_text(text: str, max_width: float, size: float, max_lines: int = 0) -> list[str]:
    """`text` in lines of at most `max_width`, broken at spaces or after a "/" (so that
    "es-419/expanded_domain" can take two lines). A piece longer than a line is
    shortened; with `max_lines`, the last line holds the rest, shortened with an ellipsis."""
    pieces = []  # (what joins it to the piece before, piece)
    for word in text.split():
        parts = re.findall(r"[^/]*/|[^/]+", word)
        pieces += [(" " if j == 0 else "", part) for j, part in enumerate(parts)]
    lines: list[str] = []
    starts: list[int] = []  # index of each line's first piece
    for i, (joiner, piece) in enumerate(pieces):
        if lines and text_width(lines[-1] + joiner + piece, size) <= max_width:
            lines[-1] += joiner + piece
        else:
            lines.append(fit_text(piece, max_width, size))
            starts.append(i)
    if max_lines and len(lines) > max_lines:
        rest = pieces[starts[max_lines - 1]:]
        tail = rest[0][1] + "".join(joiner + piece for joiner, piece in rest[1:])
        lines = lines[: max_lines - 1] + [fit_text(tail, max_width, size)]
    return lines


def num(value: float) -> str:
    """A coordinate as written in the SVG: at most 2 decimals, no trailing zeros, no -0."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# --- scene: what a chart draws, with the boxes that the tests check -------------------


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def bottom(self) -> float:
        return self.y + self.h

    def overlaps(self, other: Box) -> bool:
        """True when the two boxes share some area (touching edges do not count)."""
        return (
            self.x < other.right - 0.01 and other.x < self.right - 0.01
            and self.y < other.bottom - 0.01 and other.y < self.bottom - 0.01
        )


@dataclass(frozen=True)
class Text:
    """A line of text; `y` is its baseline. `tooltip` is the full text of a shortened one."""

    x: float
    y: float
    text: str
    size: float = TEXT_SIZE
    anchor: str = "start"  # start, middle or end
    colour: str = INK
    bold: bool = False
    tooltip: str = ""
    role: str = "label"  # title, note, legend, tick, axis, label, n, value

    @property
    def box(self) -> Box:
        width = text_width(self.text, self.size) * (1.1 if self.bold else 1.0)
        left = {"start": self.x, "middle": self.x - width / 2, "end": self.x - width}[self.anchor]
        return Box(left, self.y - 0.95 * self.size, width, 1.2 * self.size)

    def svg(self) -> str:
        attrs = f'x="{num(self.x)}" y="{num(self.y)}" font-size="{num(self.size)}" fill="{self.colour}"'
        if self.anchor != "start":
            attrs += f' text-anchor="{self.anchor}"'
        if self.bold:
            attrs += ' font-weight="bold"'
        element = f"<text {attrs}>{html_text(self.text)}</text>"
        return f"<g><title>{html_text(self.tooltip)}</title>{element}</g>" if self.tooltip else element


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    colour: str = GRID
    width: float = 1.0
    dash: str = ""
    role: str = "grid"  # grid, axis, guide, whisker, baseline

    @property
    def box(self) -> Box:
        half = self.width / 2
        return Box(min(self.x1, self.x2) - half, min(self.y1, self.y2) - half,
                   abs(self.x2 - self.x1) + self.width, abs(self.y2 - self.y1) + self.width)

    def svg(self) -> str:
        dash = f' stroke-dasharray="{self.dash}"' if self.dash else ""
        return (f'<line x1="{num(self.x1)}" y1="{num(self.y1)}" x2="{num(self.x2)}" y2="{num(self.y2)}" '
                f'stroke="{self.colour}" stroke-width="{num(self.width)}"{dash}/>')


@dataclass(frozen=True)
class Polyline:
    points: tuple[tuple[float, float], ...]
    colour: str
    width: float = 1.75
    dash: str = ""
    role: str = "series"

    def svg(self) -> str:
        points = " ".join(f"{num(x)},{num(y)}" for x, y in self.points)
        dash = f' stroke-dasharray="{self.dash}"' if self.dash else ""
        return (f'<polyline points="{points}" fill="none" stroke="{self.colour}" '
                f'stroke-width="{num(self.width)}" stroke-linejoin="round"{dash}/>')


@dataclass(frozen=True)
class Marker:
    """A data point's symbol, centred on (x, y) with radius `r`; hollow markers are white inside."""

    x: float
    y: float
    shape: str
    colour: str
    r: float = 3.5
    filled: bool = True
    role: str = "data"  # data or legend

    @property
    def box(self) -> Box:
        return Box(self.x - self.r - 1, self.y - self.r - 1, 2 * self.r + 2, 2 * self.r + 2)

    def svg(self) -> str:
        x, y, r = self.x, self.y, self.r
        # Filled markers get a white rim so that overlapping points stay apart.
        paint = (f'fill="{self.colour}" stroke="{WHITE}" stroke-width="1"' if self.filled
                 else f'fill="{WHITE}" stroke="{self.colour}" stroke-width="1.5"')
        if self.shape == "circle":
            return f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(r)}" {paint}/>'
        if self.shape == "square":
            s = r * 0.9
            return f'<rect x="{num(x - s)}" y="{num(y - s)}" width="{num(2 * s)}" height="{num(2 * s)}" {paint}/>'
        if self.shape == "cross":  # a plus sign: stroke only, thick enough to read
            d = f"M{num(x - r)} {num(y)}H{num(x + r)}M{num(x)} {num(y - r)}V{num(y + r)}"
            return f'<path d="{d}" fill="none" stroke="{self.colour}" stroke-width="2.2"/>'
        corners = {
            "triangle": ((0, -1.15), (1.05, 0.75), (-1.05, 0.75)),
            "triangle-down": ((0, 1.15), (1.05, -0.75), (-1.05, -0.75)),
            "diamond": ((0, -1.2), (1.0, 0), (0, 1.2), (-1.0, 0)),
        }[self.shape]
        d = "M" + "L".join(f"{num(x + dx * r)} {num(y + dy * r)}" for dx, dy in corners) + "Z"
        return f'<path d="{d}" {paint}/>'


@dataclass(frozen=True)
class Band:
    """A shaded rectangle behind a row."""

    x: float
    y: float
    w: float
    h: float
    fill: str = BAND

    def svg(self) -> str:
        return f'<rect x="{num(self.x)}" y="{num(self.y)}" width="{num(self.w)}" height="{num(self.h)}" fill="{self.fill}"/>'


@dataclass
class Scene:
    """Everything one chart draws, in drawing order, with its plot area and legend boxes."""

    name: str  # file stem, also the prefix of the SVG's ids
    title: str
    desc: str
    width: float = WIDTH
    height: float = 0.0
    plot: Box | None = None
    legend: list[Box] = field(default_factory=list)
    items: list = field(default_factory=list)

    def texts(self, *roles: str) -> list[Text]:
        return [i for i in self.items if isinstance(i, Text) and (not roles or i.role in roles)]

    def marks(self) -> list[Marker | Line]:
        """The data marks: markers and interval whiskers."""
        return [i for i in self.items if (isinstance(i, Marker) and i.role == "data")
                or (isinstance(i, Line) and i.role == "whisker")]


def render(scene: Scene) -> bytes:
    """The scene as a self-contained SVG document (no script, no external font or image)."""
    ident = re.sub(r"[^a-z0-9]+", "-", scene.name.lower()).strip("-") or "chart"
    w, h = num(scene.width), num(scene.height)
    lines = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        f'role="img" aria-labelledby="{ident}-title {ident}-desc" font-family="{FONT_FAMILY}">',
        f'<title id="{ident}-title">{html_text(scene.title)}</title>',
        f'<desc id="{ident}-desc">{html_text(scene.desc)}</desc>',
        f'<rect width="{w}" height="{h}" fill="{WHITE}"/>',
    ]
    lines += [item.svg() for item in scene.items]
    lines.append("</svg>")
    return ("\n".join(lines) + "\n").encode("utf-8")


# --- layout helpers shared by the charts ----------------------------------------------

SWATCH = 22  # a legend entry's sample of line and marker
LEGEND_ROW = 16
LEGEND_GAP = 14  # between two entries on a row


def legend_layout(widths: list[float], top: float, left: float = PAD, right: float = WIDTH - PAD) -> list[Box]:
    """Boxes of legend entries of the given widths, placed in rows from `top` that wrap
    within `left`..`right`; an entry wider than a row is given the whole row."""
    boxes: list[Box] = []
    x, y = left, top
    for width in widths:
        width = min(width, right - left)
        if x > left and x + width > right:
            x, y = left, y + LEGEND_ROW
        boxes.append(Box(x, y, width, LEGEND_ROW))
        x += width + LEGEND_GAP
    return boxes


def _header(scene: Scene, title: str, note: str, top: float = PAD) -> float:
    """The chart's title (on up to two lines, then shortened) and its note (wrapped);
    returns the y below them."""
    lines = wrap_text(title, (WIDTH - 2 * PAD) / 1.1, TITLE_SIZE, max_lines=2)
    y = top
    for line in lines:
        y += TITLE_SIZE + (LINE_GAP if y > top else 0)
        shortened = line.endswith("…") and not title.endswith("…")
        scene.items.append(Text(PAD, y, line, TITLE_SIZE, bold=True, tooltip=title if shortened else "", role="title"))
    for line in wrap_text(note, WIDTH - 2 * PAD, SMALL_SIZE):
        y += SMALL_SIZE + LINE_GAP + 1
        scene.items.append(Text(PAD, y, line, SMALL_SIZE, colour=MUTED, role="note"))
    return y + 0.25 * SMALL_SIZE


def _legend(scene: Scene, entries: list[tuple[str, Style, str]], top: float) -> float:
    """Legend entries (label, style, kind) in wrapped rows from `top`; returns the y below.
    kind "line" draws a line sample with its marker, "dashed" a dashed line with a hollow
    marker (a baseline), "filled"/"hollow" a marker alone."""
    widths = [SWATCH + 5 + text_width(label, TEXT_SIZE) for label, _, _ in entries]
    boxes = legend_layout(widths, top)
    for (label, style, kind), box in zip(entries, boxes, strict=True):
        mid = box.y + LEGEND_ROW / 2
        if kind in ("line", "dashed"):
            dash = BASELINE_DASH if kind == "dashed" else style.dash
            width = 1.25 if kind == "dashed" else 1.75
            scene.items.append(Line(box.x, mid, box.x + SWATCH, mid, style.colour, width, dash, role="legend"))
        scene.items.append(Marker(box.x + SWATCH / 2, mid, style.marker, style.colour, 3.5,
                                  filled=kind in ("line", "filled"), role="legend"))
        shown = fit_text(label, box.w - SWATCH - 5, TEXT_SIZE)
        scene.items.append(Text(box.x + SWATCH + 5, mid + 0.36 * TEXT_SIZE, shown, TEXT_SIZE,
                                tooltip=label if shown != label else "", role="legend"))
    scene.legend = boxes
    return (boxes[-1].bottom if boxes else top) + 4


def _y_grid(scene: Scene, plot: Box, y_of, ticks=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0)) -> None:
    """Horizontal grid lines with their labels left of the plot."""
    for tick in ticks:
        y = y_of(tick)
        scene.items.append(Line(plot.x, y, plot.right, y, INK if tick == 0 else GRID, 1.0, role="axis" if tick == 0 else "grid"))
        scene.items.append(Text(plot.x - 4, y + 0.35 * SMALL_SIZE, f"{tick:g}", SMALL_SIZE, "end", MUTED, role="tick"))


def _thin_labels(labels: list[Text], keep_last: bool = True) -> list[Text]:
    """The labels that fit side by side: the first, the last, and greedily those between."""
    if len(labels) <= 1:
        return labels
    kept = [labels[0]]
    last = labels[-1] if keep_last else None
    for label in labels[1:]:
        gap_ok = label.box.x >= kept[-1].box.right + 4
        clear_of_last = last is None or label is last or label.box.right + 4 <= last.box.x
        if gap_ok and clear_of_last:
            kept.append(label)
    if last is not None and kept[-1] is not last:
        kept.append(last)
    return kept


def _empty(scene: Scene, top: float, message: str) -> Scene:
    scene.items.append(Text(PAD, top + TEXT_SIZE + 4, message, TEXT_SIZE, colour=MUTED, role="label"))
    scene.height = top + TEXT_SIZE + 4 + PAD + 4
    return scene


def _style_of_run(position: int, count: int) -> Style:
    """The style of the run at `position` among `count` runs ordered oldest first."""
    return RUN_STYLES[(count - 1 - position) % len(RUN_STYLES)]


# --- 1. metric against k, small multiples ---------------------------------------------


def sweep_layouts(runs: list[dict]) -> list[Scene]:
    """The scenes of `sweep_panels` (one per metric of SWEEP_METRICS)."""
    shown = runs[-MAX_SWEEP_RUNS:]
    ks = sorted({k for run in shown for metric in SWEEP_METRICS for k, _ in run["points"].get(metric, [])})
    return [_sweep_panel(metric, shown, ks, len(runs)) for metric in SWEEP_METRICS]


def _sweep_panel(metric: str, runs: list[dict], ks: list[int], total: int) -> Scene:
    """One panel: `runs` are the runs drawn (oldest first) of `total` runs given."""
    title = f"{METRIC_TITLES[metric]} against k"
    scene = Scene(f"sweep-{metric}", title, "")
    headline_ks = sorted({run["headline_k"] for run in runs if run["headline_k"] in ks})
    note = "Slice all. Large marker, dotted line: headline k."
    if total > len(runs):
        counted = f"the newest {len(runs)} of {total} runs"
        note = f"The newest {len(runs)} of {total} runs. {note}"
    else:
        counted = f"{len(runs)} run" + ("s" if len(runs) != 1 else "")
    top = _header(scene, title, note)
    points_of = [sorted((k, mean) for k, mean in run["points"].get(metric, []) if mean is not None) for run in runs]
    values = ", ".join(
        f"{run['run_id']}: " + (", ".join(f"k={k} {mean:.3f}" for k, mean in points) or "no figures")
        + f" (headline k={run['headline_k']})"
        for run, points in zip(runs, points_of, strict=True)
    )
    scene.desc = (f"Line chart of {METRIC_TITLES[metric]} (0 to 1) against k for {counted}, "
                  f"oldest first. {values}.")
    if not any(points_of):
        scene.desc = f"{METRIC_TITLES[metric]} against k: no figures to draw."
        return _empty(scene, top, "No figures to draw.")

    entries = [(run["run_id"], _style_of_run(i, len(runs)), "line") for i, run in enumerate(runs)]
    top = _legend(scene, entries, top + 2)
    guide_label_y = top + SMALL_SIZE + 1
    plot = Box(PAD + 28, guide_label_y + 5, WIDTH - 2 * PAD - 28, 170)
    scene.plot = plot
    x_of = _k_scale(ks, plot)

    def y_of(value: float) -> float:
        return plot.bottom - max(0.0, min(1.0, value)) * plot.h

    _y_grid(scene, plot, y_of)
    guide_labels = []
    for k in headline_ks:
        x = x_of(k)
        scene.items.append(Line(x, plot.y, x, plot.bottom, MUTED, 1.0, "2 3", role="guide"))
        text = f"headline k={k}"
        half = text_width(text, SMALL_SIZE) / 2  # centred on the guide, kept inside the chart
        centre = min(max(x, PAD + half), WIDTH - PAD - half)
        guide_labels.append(Text(centre, guide_label_y, text, SMALL_SIZE, "middle", MUTED, role="axis"))
    scene.items += _thin_labels(guide_labels, keep_last=False)

    for i, (run, points) in enumerate(zip(runs, points_of, strict=True)):
        style = _style_of_run(i, len(runs))
        if len(points) > 1:
            scene.items.append(Polyline(tuple((x_of(k), y_of(m)) for k, m in points), style.colour, 1.75, style.dash))
        for k, mean in points:
            big = k == run["headline_k"]
            scene.items.append(Marker(x_of(k), y_of(mean), style.marker, style.colour, 5.5 if big else 3.2))

    tick_y = plot.bottom + 4 + SMALL_SIZE
    for k in ks:
        scene.items.append(Line(x_of(k), plot.bottom, x_of(k), plot.bottom + 3, INK, 1.0, role="axis"))
    scene.items += _thin_labels([Text(x_of(k), tick_y, str(k), SMALL_SIZE, "middle", MUTED, role="tick") for k in ks])
    axis_y = tick_y + SMALL_SIZE + LINE_GAP
    scene.items.append(Text(plot.x + plot.w / 2, axis_y, "k (cut-off rank)", SMALL_SIZE, "middle", MUTED, role="axis"))
    scene.height = axis_y + 0.25 * SMALL_SIZE + PAD
    return scene


def _k_scale(ks: list[int], plot: Box):
    """x of k: linear, or logarithmic when the ks span more than a factor of 20 (so that
    k = 1, 2, 5 stay apart beside k = 100); a single k sits in the middle."""
    inner_left, inner_width = plot.x + 8, plot.w - 16
    low, high = ks[0], ks[-1]
    if high == low:
        return lambda k: plot.x + plot.w / 2
    scale = math.log if low > 0 and high / low > 20 else float
    span = scale(high) - scale(low)
    return lambda k: inner_left + (scale(k) - scale(low)) / span * inner_width


def sweep_panels(runs: list[dict]) -> list[tuple[str, bytes]]:
    """Metric against k as small multiples: one panel (name, SVG bytes) per metric, in the
    order hit@k, recall@k, nDCG@k; names are "sweep-hit_at_k" and so on.

    runs: oldest first, `[{"run_id": str, "headline_k": int, "points": {"hit_at_k":
    [(k, mean), ...], "recall_at_k": [...], "ndcg_at_k": [...]}}]`; a mean may be None
    (not drawn). Only the newest MAX_SWEEP_RUNS runs are drawn, as the note and the
    description say; x shows the ks that occur; y is 0..1; each run's headline k has a
    larger marker and a dotted vertical guide.
    """
    return [(scene.name, render(scene)) for scene in sweep_layouts(runs)]


# --- 2. headline figures across runs --------------------------------------------------


def trend_layout(run_ids: list[str], series: dict[str, list], baseline: dict[str, float] | None = None) -> Scene:
    """The scene of `trend_chart`."""
    title = "Headline figures across runs"
    scene = Scene("trend", title, "")
    baseline = {m: v for m, v in (baseline or {}).items() if m in METRIC_STYLES and v is not None}
    metrics = [m for m in SWEEP_METRICS if any(v is not None for v in series.get(m, []))]
    note = "At each run's headline k, slice all, oldest run first" + ("; dashed: baseline." if baseline else ".")
    top = _header(scene, title, note)
    n = len(run_ids)
    if not metrics or n == 0:
        scene.desc = "Headline figures across runs: no figures to draw."
        return _empty(scene, top, "No figures to draw.")

    entries = [(METRIC_TITLES[m], METRIC_STYLES[m], "line") for m in metrics]
    entries += [(f"baseline {METRIC_TITLES[m]}", METRIC_STYLES[m], "dashed") for m in SWEEP_METRICS if m in baseline]
    top = _legend(scene, entries, top + 2)
    plot = Box(PAD + 28, top + 8, WIDTH - 2 * PAD - 28, 180)
    scene.plot = plot
    inner_left, inner_width = plot.x + 8, plot.w - 16

    def x_of(i: int) -> float:
        return plot.x + plot.w / 2 if n == 1 else inner_left + i * inner_width / (n - 1)

    def y_of(value: float) -> float:
        return plot.bottom - max(0.0, min(1.0, value)) * plot.h

    _y_grid(scene, plot, y_of)
    for metric in SWEEP_METRICS:
        if metric in baseline:
            style, y = METRIC_STYLES[metric], y_of(baseline[metric])
            scene.items.append(Line(plot.x, y, plot.right, y, style.colour, 1.25, BASELINE_DASH, role="baseline"))
            scene.items.append(Marker(plot.right, y, style.marker, style.colour, 3.5, filled=False))

    step = 1 if n <= DENSE_MARKERS else math.ceil(n / 12)
    for metric in metrics:
        style = METRIC_STYLES[metric]
        values = list(series.get(metric, [])) + [None] * (n - len(series.get(metric, [])))
        for segment in _segments(values[:n]):
            if len(segment) > 1:
                points = tuple((x_of(i), y_of(values[i])) for i in segment)
                scene.items.append(Polyline(points, style.colour, 1.75 if n > DENSE_MARKERS else 2.0, style.dash))
            for i in segment:
                if len(segment) == 1 or i % step == 0 or i == n - 1:
                    scene.items.append(Marker(x_of(i), y_of(values[i]), style.marker, style.colour, 3.5))

    tick_y = plot.bottom + 4 + SMALL_SIZE
    ticks = _run_ticks(n)
    for i in ticks:
        scene.items.append(Line(x_of(i), plot.bottom, x_of(i), plot.bottom + 3, INK, 1.0, role="axis"))
    scene.items += _thin_labels([Text(x_of(i), tick_y, str(i + 1), SMALL_SIZE, "middle", MUTED, role="tick") for i in ticks])
    y = tick_y + SMALL_SIZE + LINE_GAP
    scene.items.append(Text(plot.x + plot.w / 2, y, "run number, oldest first", SMALL_SIZE, "middle", MUTED, role="axis"))
    named = [(0, run_ids[0])] if n == 1 else [(0, run_ids[0]), (n - 1, run_ids[-1])]
    for i, run_id in named:
        y += SMALL_SIZE + LINE_GAP
        prefix = f"{i + 1} = "
        shown = fit_text(prefix + run_id, WIDTH - 2 * PAD, SMALL_SIZE)
        scene.items.append(Text(PAD, y, shown, SMALL_SIZE, colour=MUTED,
                                tooltip=prefix + run_id if shown != prefix + run_id else "", role="axis"))
    scene.height = y + 0.25 * SMALL_SIZE + PAD

    def describe(metric: str) -> str:
        values = [v for v in series.get(metric, []) if v is not None]
        latest = next((v for v in reversed(series.get(metric, [])) if v is not None), None)
        return (f"{METRIC_TITLES[metric]} from {min(values):.3f} to {max(values):.3f}, "
                f"latest {latest:.3f}")

    parts = [describe(m) for m in metrics]
    parts += [f"baseline {METRIC_TITLES[m]} {baseline[m]:.3f}" for m in SWEEP_METRICS if m in baseline]
    scene.desc = (f"Line chart of the headline figures (0 to 1) of {n} run" + ("s" if n != 1 else "")
                  + f", oldest first, from {run_ids[0]} to {run_ids[-1]}: " + "; ".join(parts) + ".")
    return scene


def _segments(values: list) -> list[list[int]]:
    """Indexes of the runs of consecutive values that are not None."""
    segments: list[list[int]] = []
    for i, value in enumerate(values):
        if value is None:
            continue
        if segments and segments[-1][-1] == i - 1:
            segments[-1].append(i)
        else:
            segments.append([i])
    return segments


def _run_ticks(n: int) -> list[int]:
    """Indexes of the runs whose number is written under the axis: all of up to 8 runs,
    else the first, the last and multiples of a round step between (about five labels)."""
    if n <= 8:
        return list(range(n))
    step = next(s for s in _round_steps() if n / s <= 5)
    return [0] + [number - 1 for number in range(step, n, step)] + [n - 1]


def _round_steps():
    """1, 2, 5, 10, 20, 50, 100, ..."""
    power = 1
    while True:
        yield from (power, 2 * power, 5 * power)
        power *= 10


def trend_chart(run_ids: list[str], series: dict[str, list], baseline: dict[str, float] | None = None) -> bytes:
    """Headline figures across runs, oldest first, as SVG bytes.

    run_ids: oldest first. series: `{"hit_at_k": [mean or None per run], "recall_at_k":
    [...], "ndcg_at_k": [...]}`, one value per run id (None leaves a gap). baseline:
    optional `{metric: value}`, drawn as dashed level lines with their own legend
    entries. The x axis numbers the runs (all of up to 8, else about five round numbers)
    and names the first and the last; more than DENSE_MARKERS runs get about a dozen
    markers per line instead of one per run.
    """
    return render(trend_layout(run_ids, series, baseline))


# --- 3. hit@k per slice value ---------------------------------------------------------

SUB_ROW = 15  # one run's row within a slice value
MAX_LABEL_WIDTH = 140.0  # the label column of the slice and delta charts; longer labels are shortened
LABEL_LINE = TEXT_SIZE + 3  # between the lines of a wrapped slice value
GROUP_PAD = 4  # above and below a slice value's rows
MARK_INSET = 7  # between the plot's edges and the ends of its axis, so that markers at 0 or 1 stay inside


def slice_layout(slice_name: str, rows: list[dict]) -> Scene:
    """The scene of `slice_chart`."""
    title = f"hit@k per {slice_name}"
    scene = Scene(f"slices-{slice_name}", title, "")
    order = _run_order(rows)
    shown = order[-MAX_SLICE_RUNS:]
    note = ("At each run's headline k: mean and 95% interval; n = labelled cases scored"
            + (f"; the newest {len(shown)} of {len(order)} runs." if len(order) > len(shown) else "."))
    top = _header(scene, title, note)
    if not rows or not shown:
        scene.desc = f"{title}: no figures to draw."
        return _empty(scene, top, "No figures to draw.")

    styles = {run_id: _style_of_run(i, len(shown)) for i, run_id in enumerate(shown)}
    top = _legend(scene, [(run_id, styles[run_id], "filled") for run_id in shown], top + 2)
    figures = [{run["run_id"]: run for run in row["runs"] if run.get("mean") is not None} for row in rows]

    n_width = max(text_width(f"n={run['n']}", SMALL_SIZE) for fig in figures for run in fig.values()) if any(figures) else 0
    n_width = max(n_width, text_width("n=00", SMALL_SIZE))
    label_width = min(max(text_width(row["slice_value"], TEXT_SIZE) for row in rows), MAX_LABEL_WIDTH)
    if len(shown) > 1:  # a label may take two lines: the column need only hold the longer part
        label_width = min(label_width, max(max(text_width(line, TEXT_SIZE) for line in wrap_text(
            row["slice_value"], MAX_LABEL_WIDTH, TEXT_SIZE, max_lines=2)) for row in rows))
    plot_left = PAD + label_width + 10
    plot_right = WIDTH - PAD - n_width - 10
    with_top_axis = len(rows) > 6
    top_ticks_y = top + SMALL_SIZE + 2
    rows_top = (top_ticks_y + 6) if with_top_axis else top + 4
    group_h = len(shown) * SUB_ROW + 2 * GROUP_PAD
    plot = Box(plot_left, rows_top, plot_right - plot_left, len(rows) * group_h)
    scene.plot = plot
    inner_left, inner_width = plot.x + MARK_INSET, plot.w - 2 * MARK_INSET

    low, ticks = _unit_range([run["ci_low"] for fig in figures for run in fig.values()])

    def x_of(value: float) -> float:
        return inner_left + (max(low, min(1.0, value)) - low) / (1.0 - low) * inner_width

    for g, row in enumerate(rows):
        if g % 2 == 0:
            scene.items.append(Band(PAD, rows_top + g * group_h, WIDTH - 2 * PAD, group_h))
    for tick in ticks:
        scene.items.append(Line(x_of(tick), plot.y, x_of(tick), plot.bottom, GRID, 1.0))
    bottom_ticks_y = plot.bottom + 4 + SMALL_SIZE
    for y in (bottom_ticks_y, top_ticks_y) if with_top_axis else (bottom_ticks_y,):
        scene.items += _thin_labels([Text(x_of(t), y, f"{t:g}", SMALL_SIZE, "middle", MUTED, role="tick") for t in ticks])

    described = []
    for g, (row, by_run) in enumerate(zip(rows, figures, strict=True)):
        group_top = rows_top + g * group_h
        value = row["slice_value"]
        lines = wrap_text(value, label_width, TEXT_SIZE, max_lines=max(1, int((group_h - 4) // LABEL_LINE)))
        shortened = "".join(lines).replace(" ", "") != value.replace(" ", "")
        first_y = group_top + group_h / 2 - (len(lines) - 1) * LABEL_LINE / 2 + 0.36 * TEXT_SIZE
        for j, line in enumerate(lines):
            scene.items.append(Text(PAD, first_y + j * LABEL_LINE, line, TEXT_SIZE,
                                    tooltip=value if shortened else "", role="label"))
        parts = []
        for s, run_id in enumerate(shown):
            y = group_top + GROUP_PAD + s * SUB_ROW + SUB_ROW / 2
            run = by_run.get(run_id)
            n_text = f"n={run['n']}" if run else "—"
            scene.items.append(Text(WIDTH - PAD, y + 0.36 * SMALL_SIZE, n_text, SMALL_SIZE, "end", MUTED, role="n"))
            if run is None:
                parts.append(f"{run_id} no figure")
                continue
            style = styles[run_id]
            _whisker(scene, x_of(run["ci_low"]), x_of(run["ci_high"]), y, style.colour)
            scene.items.append(Marker(x_of(run["mean"]), y, style.marker, style.colour, 4.2))
            parts.append(f"{run_id} {run['mean']:.3f} ({run['ci_low']:.2f}–{run['ci_high']:.2f}), n={run['n']}")
        described.append(f"{value}: " + "; ".join(parts))
    axis_y = bottom_ticks_y + SMALL_SIZE + LINE_GAP
    axis_title = "hit@k (95% interval)" + (f", axis from {low:g}" if low > 0 else "")
    scene.items.append(Text(plot.x + plot.w / 2, axis_y, axis_title, SMALL_SIZE, "middle", MUTED, role="axis"))
    scene.height = axis_y + 0.25 * SMALL_SIZE + PAD
    scene.desc = (f"Dot-and-whisker chart of hit@k ({low:g} to 1) per {slice_name} at each run's headline k, "
                  f"for {', '.join(shown)}. " + ". ".join(described) + ".")
    return scene


def _unit_range(lows: list[float]) -> tuple[float, list[float]]:
    """The start of an axis that ends at 1 and its ticks: the highest round number a
    little below every interval (0 when some interval reaches below 0.4). A dot and
    its whisker are read by position, so the axis need not start at 0."""
    least = min(lows, default=0.0)
    for low, step in ((0.9, 0.05), (0.8, 0.05), (0.6, 0.1), (0.4, 0.2), (0.0, 0.25)):
        if least >= low + 0.02:
            break
    return low, [round(low + i * step, 2) for i in range(round((1.0 - low) / step) + 1)]


def _whisker(scene: Scene, x1: float, x2: float, y: float, colour: str, width: float = 1.6) -> None:
    """An interval: a horizontal line with short end caps."""
    scene.items.append(Line(x1, y, x2, y, colour, width, role="whisker"))
    for x in (x1, x2):
        scene.items.append(Line(x, y - 3, x, y + 3, colour, width, role="whisker"))


def _run_order(rows: list[dict]) -> list[str]:
    """Run ids oldest first, merged from the rows' own orders (a row may lack a run)."""
    order: list[str] = []
    for row in rows:
        at = -1
        for run in row["runs"]:
            if run["run_id"] in order:
                at = order.index(run["run_id"])
            else:
                at += 1
                order.insert(at, run["run_id"])
    return order


def slice_chart(slice_name: str, rows: list[dict]) -> bytes:
    """hit@k per value of one slice (locale, category, ...) as SVG bytes: one row per
    value, label at left, each run's mean as a marker with its 95% whisker, n at right.

    rows: `[{"slice_value": str, "runs": [{"run_id": str, "mean": float, "ci_low":
    float, "ci_high": float, "n": int}, ...]}, ...]`, runs oldest first. The newest
    MAX_SLICE_RUNS runs are drawn; a run missing at a value shows "—" in the n column.
    Labels wider than the label column are shortened with an ellipsis, the full text
    kept as a tooltip (<title>). More than 6 values repeat the axis labels at the top.
    """
    return render(slice_layout(slice_name, rows))


# --- 4. forest plot of changes --------------------------------------------------------

DELTA_ROW = 18
GROUP_HEADER = 17  # the row naming a group of changes ("pt-BR" of "pt-BR · hit@k")
ITEM_INDENT = 10  # rows of a group are indented under its header


def delta_layout(rows: list[dict], title: str, marked: str) -> Scene:
    """The scene of `delta_chart`."""
    scene = Scene(f"delta-{title}", title, "")
    top = _header(scene, title, "Change with its paired 95% interval; right of 0 is better.")
    rows = [row for row in rows if row.get("delta") is not None]
    if not rows:
        scene.desc = f"{title}: no changes to draw."
        return _empty(scene, top, "No changes to draw.")

    neutral = Style(MUTED, "circle", "")
    top = _legend(scene, [(f"{marked} (*)", neutral, "filled"), ("not significant", neutral, "hollow")], top + 2)
    ends = [abs(v) for row in rows for v in (row["delta"], row.get("ci_low"), row.get("ci_high")) if v is not None]
    half_range, ticks = _delta_axis(max(ends))

    # "group · item" labels: the group is written once, on a header row across the chart.
    split = [row["label"].rsplit(" · ", 1) if " · " in row["label"] else ["", row["label"]] for row in rows]
    value_width = max(text_width(signed(row["delta"]), SMALL_SIZE) for row in rows)
    star_width = text_width(" *", SMALL_SIZE)
    label_width = min(max(text_width(item, TEXT_SIZE) + (ITEM_INDENT if group else 0) for group, item in split),
                      MAX_LABEL_WIDTH)
    plot_left = PAD + label_width + 10
    plot_right = WIDTH - PAD - value_width - star_width - 10
    inner_left, inner_width = plot_left + MARK_INSET, plot_right - plot_left - 2 * MARK_INSET

    def x_of(value: float) -> float:
        return inner_left + (max(-half_range, min(half_range, value)) + half_range) / (2 * half_range) * inner_width

    # Blocks are a group (its header, then its rows) or one ungrouped row; they are
    # shaded in turn, and the grid runs through the rows of a block, not its header.
    y = top + 4
    blocks: list[list[float]] = []  # [top, top of the rows, bottom]
    row_y = []
    for r, (group, _) in enumerate(split):
        if r == 0 or not group or group != split[r - 1][0]:
            blocks.append([y, y + (GROUP_HEADER if group else 0), 0.0])
            if group:
                header = fit_text(group, WIDTH - 2 * PAD, TEXT_SIZE * 1.1)
                scene.items.append(Text(PAD, y + GROUP_HEADER / 2 + 0.36 * TEXT_SIZE + 1, header, TEXT_SIZE,
                                        bold=True, tooltip=group if header != group else "", role="label"))
                y += GROUP_HEADER
        row_y.append(y + DELTA_ROW / 2)
        y += DELTA_ROW
        blocks[-1][2] = y
    scene.plot = Box(plot_left, blocks[0][0], plot_right - plot_left, y - blocks[0][0])
    backdrop = []
    for b, (block_top, rows_top, bottom) in enumerate(blocks):
        if b % 2 == 0:
            backdrop.append(Band(PAD, block_top, WIDTH - 2 * PAD, bottom - block_top))
        for tick in ticks:
            zero = tick == 0
            backdrop.append(Line(x_of(tick), rows_top, x_of(tick), bottom, INK if zero else GRID, 1.0,
                                 role="axis" if zero else "grid"))
    scene.items[:0] = backdrop  # under the headers placed above
    tick_y = y + 4 + SMALL_SIZE
    tick_labels = [Text(x_of(t), tick_y, _signed_tick(t), SMALL_SIZE, "middle", MUTED, role="tick") for t in ticks]
    scene.items += _thin_labels(tick_labels)

    described = []
    for row, (group, item), y in zip(rows, split, row_y, strict=True):
        indent = ITEM_INDENT if group else 0
        shown = fit_text(item, label_width - indent, TEXT_SIZE)
        scene.items.append(Text(PAD + indent, y + 0.36 * TEXT_SIZE, shown, TEXT_SIZE,
                                tooltip=row["label"] if shown != item else "", role="label"))
        significant = bool(row.get("significant"))
        colour = (GAIN if row["delta"] > 0 else LOSS) if significant else MUTED
        low, high = row.get("ci_low"), row.get("ci_high")
        if low is not None and high is not None:
            _whisker(scene, x_of(low), x_of(high), y, colour)
        scene.items.append(Marker(x_of(row["delta"]), y, "circle", colour, 4.5, filled=significant))
        star_x = WIDTH - PAD - star_width
        scene.items.append(Text(star_x, y + 0.36 * SMALL_SIZE, signed(row["delta"]), SMALL_SIZE, "end",
                                INK if significant else MUTED, role="value"))
        if significant:
            scene.items.append(Text(WIDTH - PAD, y + 0.36 * SMALL_SIZE, "*", SMALL_SIZE, "end", INK, role="value"))
        interval = "" if low is None or high is None else f" ({signed(low)} to {signed(high)})"
        described.append(f"{row['label']} {signed(row['delta'])}{interval}" + (", significant" if significant else ""))
    axis_y = tick_y + SMALL_SIZE + LINE_GAP
    scene.items.append(Text(x_of(0), axis_y, "change", SMALL_SIZE, "middle", MUTED, role="axis"))
    scene.height = axis_y + 0.25 * SMALL_SIZE + PAD
    scene.desc = (f"Forest plot of {len(rows)} changes with paired 95% intervals around a zero line; "
                  f"significant ones ({marked}) have a filled marker and a star. " + "; ".join(described) + ".")
    return scene


def _delta_axis(largest: float) -> tuple[float, list[float]]:
    """The half-width of a symmetric axis that holds `largest` (with a little room; at
    least 0.01) and its ticks: multiples of a round step (1, 2, 5 × 10^n), at most three
    on each side of 0."""
    wanted = max(largest * 1.05, 0.01)
    power = 10 ** math.floor(math.log10(wanted))
    half_range = next(round(m * power, 10) for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * power >= wanted - 1e-12)
    steps = [m * 10.0**e for e in range(-6, 3) for m in (1, 2, 5)]
    step = next(s for s in steps if half_range / s <= 3 + 1e-9)
    count = math.floor(half_range / step + 1e-9)
    return half_range, [round(i * step, 10) for i in range(-count, count + 1)]


def _signed_tick(value: float) -> str:
    text = f"{abs(value):.4f}".rstrip("0").rstrip(".")
    return "0" if value == 0 else ("+" if value > 0 else "−") + text


def delta_chart(rows: list[dict], title: str, marked: str) -> bytes:
    """A forest plot of changes as SVG bytes: one row per change, its paired 95% interval
    as a whisker, a zero line, and significant changes drawn filled and starred.

    rows: `[{"label": str, "delta": float, "ci_low": float, "ci_high": float,
    "significant": bool}, ...]` in the order drawn, e.g. one per (slice value, metric)
    with labels like "pt-BR · hit@k"; an interval may be None (marker only) and a row
    whose delta is None is left out. The x range is symmetric around 0 and covers every
    interval; each row's delta is printed at right. The title names the comparison
    (it also names the SVG's ids, so two charts of one page need two titles). `marked` says
    what "significant" means, for the legend: e.g. "p < 0.05, Holm over the 30 comparisons".
    """
    return render(delta_layout(rows, title, marked))
