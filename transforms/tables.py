"""Tables as rows of cells, laid out for a terminal, markdown or HTML: every rendering of the
report, the gate and the comparison builds its tables once and lays them out here, so the
renderings cannot disagree."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .escaping import html_text, markdown_inline, terminal_text

GREEN, RED, BOLD, RESET = "\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[0m"


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]
    align_right_from: int = 1  # first column whose cells are right-aligned (numbers)


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def signed(value: float | None) -> str:
    """+0.125 / −0.125 (a true minus sign); float noise prints as +0.000, never −0.000."""
    if value is None:
        return "—"
    return f"{round(value, 3) + 0.0:+.3f}".replace("-", "−")


def fmt_p(value: float | None, alpha: float | None = None) -> str:
    """A p-value as every rendering prints it: three decimals, "<0.001" below that. Given the
    `alpha` its star is judged at (significant: p < alpha), the printed p reads on the same side
    of alpha as p itself: 0.0499 prints as 0.0499, never 0.050 beside a star."""
    if value is None or math.isnan(value):
        return "—"
    if value < 0.001 and (alpha is None or alpha > 0.001):
        return "<0.001"
    for digits in range(3, 18):
        text = f"{value:.{digits}f}" if value >= 0.001 else f"{value:.{digits - 2}g}"
        if alpha is None or (float(text) < alpha) == (value < alpha):
            return text
    return repr(value)


def layout_text(table: Table, colour_cells: dict[tuple[int, int], str] | None = None) -> str:
    """Aligned columns; `colour_cells` maps (row, column) to an ANSI colour."""
    table = replace(table, header=[terminal_text(h) for h in table.header],
                    rows=[[terminal_text(c) for c in row] for row in table.rows])
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
        return "| " + " | ".join(markdown_inline(c) for c in cells) + " |"

    aligns = ["---" if i < table.align_right_from else "---:" for i in range(len(table.header))]
    return "\n".join([line(table.header), line(aligns)] + [line(r) for r in table.rows])


def layout_html(table: Table) -> str:
    def cell(tag: str, text: str, col: int) -> str:
        cls = ' class="num"' if col >= table.align_right_from else ""
        return f"<{tag}{cls}>{html_text(text)}</{tag}>"

    head = "".join(cell("th", h, i) for i, h in enumerate(table.header))
    body = "".join("<tr>" + "".join(cell("td", c, i) for i, c in enumerate(row)) + "</tr>" for row in table.rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def indent(text: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in text.splitlines())
