"""A user's text escaped for where it is printed (SPEC 16): the terminal, markdown, HTML and
SVG, and JSON inside an HTML <script> element. Every renderer of the report, the gate, the
comparison, `check-kb` and `query` passes the values of the data (ids, locales, categories,
titles, questions, run ids, config values) through one of these, so none of them can move the
cursor, start a heading or a link, or close an element."""

from __future__ import annotations

import json
import re
from html import escape

# Characters shown as escapes in every medium: C0 controls, DEL and C1 controls (ESC starts a
# terminal's control sequence, a newline would start a line of our output), the Unicode line
# and paragraph separators, and the bidirectional overrides and isolates, which reorder what a
# reader sees ("Trojan Source").
_CONTROLS = [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_VISIBLE_CONTROLS = {code: (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}") for code in _CONTROLS} | {
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


def terminal_text(text: str) -> str:
    """`text` for a terminal: control characters shown as escapes (`\\x1b`, `\\n`), so a
    value keeps to its line and cannot move the cursor, clear the screen or change colour."""
    return text.translate(_VISIBLE_CONTROLS)


# Markdown (CommonMark with GitHub's extensions): what a value may not form, and how.
#   anywhere: `\` escapes, `` ` `` code spans, `*` `_` emphasis, `~` strikethrough, `[` `]`
#   links, images and footnotes, `|` table cells, `$` math, `#` a heading's closing marks,
#   `<` tags and autolinks, `&` entities, and GitHub's bare autolinks (`scheme://`, `www.`,
#   `name@domain.tld`);
#   at the start of a block (after `- `, `> ` or on a line of its own): headings, quotes,
#   lists (`-`, `+`, `*`, `1.`, `1)`), thematic breaks, fences, HTML blocks and indented code.
# `_` between two letters or digits opens and closes nothing, so `not_retrieved` stays as it is;
# a `*` between two spaces neither (the star of a significant change, "−0.125 *").
_SPACE = r"[^\S\x00-\x1f\x7f-\x9f\u2028\u2029]"  # white space that stays so (a newline becomes `\n`)
_MARKDOWN_ANYWHERE = re.compile(
    r"[\\`~\[\]|$#]"                       # always backslash-escaped
    rf"|(?<!{_SPACE})\*|\*(?!{_SPACE}|\Z)"    # `*` that could open or close emphasis (not " * ")
    r"|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])"  # `_` that could open or close emphasis
    r"|@(?=[A-Za-z0-9_-]+\.)"               # the @ of an e-mail address (not of hit@4)
    r"|(?<=[A-Za-z0-9]):(?=//)"             # scheme://
    r"|(?<![A-Za-z0-9])(?i:www)\."          # www.
)
_MARKDOWN_BLOCK_START = re.compile(r"\A(?:[-+=>*]|\d{1,9}[.)](?= |\Z))")
_MARKDOWN_HTML = re.compile(r"<(?=\S)|&(?=[A-Za-z#])")


def _markdown_escape(match: re.Match) -> str:
    found = match.group()
    if found.lower() == "www.":
        return found[:3] + "\\."
    return "\\" + found


def markdown_inline(text: str) -> str:
    """`text` as plain inline markdown, for a place no block can start (a table cell, the
    text of a heading, the middle of a line): it renders as exactly `text`, with control
    characters shown as escapes, and forms no link, image, HTML, code span, emphasis or cell
    break."""
    text = _MARKDOWN_ANYWHERE.sub(_markdown_escape, text).translate(_VISIBLE_CONTROLS)
    return _MARKDOWN_HTML.sub(lambda m: "&lt;" if m.group() == "<" else "&amp;", text)


def markdown_text(text: str) -> str:
    """`text` as markdown that may start a block (a paragraph, a list item, a quote): as
    `markdown_inline`, and its first characters cannot open a heading, list, quote, fence,
    HTML block or indented code. Leading spaces are written as `&#32;`, which renders as a
    space and opens nothing."""
    body = text.lstrip(" ")
    lead = "&#32;" * (len(text) - len(body))
    escaped = markdown_inline(body)
    start = _MARKDOWN_BLOCK_START.match(escaped)
    if start:  # the mark that would open a block: `-` of a list, `.` of `1.`, `>` of a quote
        at = start.end() - 1
        escaped = escaped[:at] + "\\" + escaped[at:]
    return lead + escaped


def markdown_code_span(text: str) -> str:
    """`text` as a markdown code span (shown in a fixed-width font, never read as markdown):
    control characters as escapes, fenced by one more backtick than its longest run of
    backticks."""
    text = terminal_text(text)
    fence = "`" * (1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    padded = f" {text} " if text.startswith("`") or text.endswith("`") or not text.strip() else text
    return f"{fence}{padded}{fence}"


def html_text(text: str) -> str:
    """`text` for HTML or SVG, as element text or a quoted attribute: `<`, `>`, `&` and both
    quotes as references, control characters shown as escapes (XML forbids most of them even
    as references, so a standalone SVG would not parse)."""
    return escape(text.translate(_VISIBLE_CONTROLS), quote=True)


def embedded_json(value) -> str:
    """JSON that is safe as the text of a <script type="application/json"> element.

    A string holding "</script" would end the element and "<!--" followed by "<script"
    would keep the real end tag from ending it, so every "<" is written as the JSON escape
    \\u003c, which JSON.parse reads back unchanged. U+2028 and U+2029 are escaped too, so
    the text stays valid if it is ever read as JavaScript source.
    """
    return script_safe(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def script_safe(text: str) -> str:
    """JSON text made safe as a <script> element's text (see `embedded_json`): "<" only occurs
    inside JSON strings, where \\u003c means the same. Tens of MB at 100k cases: the
    replacements run only when there is something to replace."""
    if "<" in text:
        text = text.replace("<", "\\u003c")
    if not text.isascii():
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return text
