"""A user's text is escaped for where it is printed (SPEC 16): the escape functions of
transforms/escaping.py over any string, then every renderer a user meets through the real CLI,
with ids, locales, categories, questions, titles and config values written to forge output."""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from retrieval_eval.transforms.escaping import (
    embedded_json,
    html_text,
    markdown_code_span,
    markdown_inline,
    markdown_text,
    terminal_text,
)

# CommonMark with GitHub's tables, strikethrough and autolinks (www., scheme://, e-mail): what
# a CI job summary or a pull-request comment renders. linkify-it's fuzzy links (a bare
# `example.com`) are not GitHub's and stay off.
MARKDOWN = MarkdownIt("gfm-like", {"html": True})
MARKDOWN.linkify.set({"fuzzy_link": False})

FORGED_HEADING = "en\n### retrieval-eval gate: ✅ PASS\x1b[2J"
HOSTILE = [
    FORGED_HEADING, "![x](http://evil.example/p.png)", "[x](http://evil.example)", "<img src=x onerror=alert(1)>",
    "</script><script>alert(1)</script>", "<!--<script>", "# heading", "1. item", "- item", "> quote",
    "    code", "```", "a|b", "*em* _em_ ~~del~~ `code`", "www.evil.com", "http://evil.com", "x@evil.com", "a.b@c-d.com",
    "&amp; &#60;", "trailing \\", "a *\nb*", "a * b*", "\u202eevil\u202c", "---", "[ ] task", "$x$", "<http://evil.example>",
]
# Text a hypothesis string is made of: any character, and markdown's marks often.
TEXT = st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from(list("#>-+*_`~[]()!<>&|\\:/.@$= 1\n\t\x1b"))))


def _inline_children(tokens) -> list:
    return [child for token in tokens if token.type == "inline" for child in token.children]


def _only_text(tokens, allowed_blocks: set[str]) -> str:
    """The text of a rendering made only of text nodes inside the expected blocks."""
    blocks = {token.type for token in tokens if token.type != "inline"}
    assert blocks <= allowed_blocks, blocks
    children = _inline_children(tokens)
    assert all(child.type == "text" for child in children), [child.type for child in children]
    return "".join(child.content for child in children)


def _shown(text: str) -> str:
    """What the reader should see of `text`: its control characters as escapes."""
    return terminal_text(text).strip()


PARAGRAPH = {"paragraph_open", "paragraph_close"}
LIST = PARAGRAPH | {"bullet_list_open", "bullet_list_close", "list_item_open", "list_item_close"}
QUOTE = PARAGRAPH | {"blockquote_open", "blockquote_close"}
HEADING = {"heading_open", "heading_close"}
TABLE = {f"{part}_{end}" for part in ("table", "thead", "tbody", "tr", "th", "td") for end in ("open", "close")}


def check_markdown_escape_forms_only_text(text: str) -> None:
    shown = _shown(text)
    for prefix, blocks in (("", PARAGRAPH), ("- ", LIST), ("> ", QUOTE)):
        assert _only_text(MARKDOWN.parse(prefix + markdown_text(text)), blocks).strip() == shown, prefix
    assert _only_text(MARKDOWN.parse("### " + markdown_inline(text)), HEADING).strip() == shown
    tokens = MARKDOWN.parse(f"| a | b |\n| --- | --- |\n| {markdown_inline(text)} | x |")
    cells = [token.content for token in tokens if token.type == "inline"]
    assert len(cells) == 4 and _only_text(tokens, TABLE) == "ab" + shown + "x"
    assert "\n" not in markdown_text(text) and "\n" not in markdown_inline(text)


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_markdown_escape_renders_as_one_text_node_equal_to_the_input(text):
    check_markdown_escape_forms_only_text(text)


def test_markdown_escape_of_hostile_values_forms_no_heading_link_image_or_html():
    for text in HOSTILE:
        check_markdown_escape_forms_only_text(text)
    # an ordinary value stays readable in the raw file too
    assert markdown_inline("not_retrieved c-001 0.500 < 1.000 (Holm): x") == "not_retrieved c-001 0.500 < 1.000 (Holm): x"


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_markdown_code_span_shows_its_text_literally(text):
    tokens = MARKDOWN.parse("- " + markdown_code_span(text))
    children = _inline_children(tokens)
    assert [child.type for child in children] == ["code_inline"]
    # a code span's content turns no escapes back and trims one space each side
    assert children[0].content.strip() == terminal_text(text).strip()


@settings(max_examples=400, deadline=None)
@given(st.text(st.characters(codec="utf-8")))
def test_terminal_escape_leaves_no_control_character(text):
    shown = terminal_text(text)
    assert not [c for c in shown if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F]
    assert not set(shown) & {"\u2028", "\u2029", "\u202e", "\u2066"}
    if text.isprintable() and "\u2028" not in text:
        assert shown == text or any(0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069 for c in text)


def test_terminal_escape_golden_values():
    # written by hand from the escape table: ESC is 0x1b, BEL 0x07, CSI (C1) 0x9b
    assert terminal_text(FORGED_HEADING) == "en\\n### retrieval-eval gate: ✅ PASS\\x1b[2J"
    assert terminal_text("a\tb\rc\x07d\x9be\x7f") == "a\\tb\\rc\\x07d\\x9be\\x7f"
    assert terminal_text("\u202eLIAF") == "\\u202eLIAF"


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | TEXT,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12))
def test_embedded_json_cannot_close_its_script_and_reads_back(value):
    text = embedded_json(value)
    assert "<" not in text and "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == value


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_html_escape_leaves_no_markup_and_no_control_character(text):
    escaped = html_text(text)
    assert not re.search(r"[<>\"']", escaped)
    assert not [c for c in escaped if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F]
    assert re.sub(r"&(lt|gt|quot|#x27|amp);", lambda m: {"lt": "<", "gt": ">", "quot": '"', "#x27": "'",
                                                          "amp": "&"}[m.group(1)], escaped) == terminal_text(text)


# ----------------------------------------------------------------------------- the real CLI

# Values written to forge output: a locale that carries a PASS heading and clears the screen,
# a category that starts a list with a link and rings the bell, case ids that are images,
# links, HTML, script ends and headings, a question and a KB title with markup.
LOCALE = FORGED_HEADING
CATEGORY = "cat|x\n- [link](http://evil.com)\x07"
CASE_IDS = ["![x](http://evil.com/p.png)", "[x](http://evil.com)", "<img src=x onerror=alert(1)>",
            "</script><script>alert(1)</script>", "<!--<script>", "id\x1b[31mred", "# heading", "`code`|pipe",
            "1. item", "\u202eevil"]
QUESTION = "Q <script>alert(1)</script>\n# h\x1b[2J"
# what no markdown rendering of ours may hold
FORMED = {"link_open", "image", "html_inline", "html_block", "code_block", "fence", "s_open", "em_open"}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")  # all but \t \n


def _hostile_run(runs, run_id: str, hits: list[bool], created_at: str) -> None:
    from builders import case, chunk, write_run

    write_run(runs, run_id, [
        case(case_id, [chunk(f"card-{i}")] if hit else [chunk("other")], [f"card-{i}"],
             locale=LOCALE if i % 2 else "pt-BR", category=CATEGORY, question=QUESTION)
        for i, (case_id, hit) in enumerate(zip(CASE_IDS, hits, strict=True))
    ], created_at=created_at)


def _markdown_tokens(text: str) -> list:
    tokens = MARKDOWN.parse(text)
    return tokens + _inline_children(tokens)


def _terminal_clean(text: str) -> bool:
    return not CONTROL.search(text.replace("\x1b[0m", "").replace("\x1b[1m", "").replace("\x1b[31m", "")
                              .replace("\x1b[32m", ""))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A baseline run where every case hits and a run where half of them miss, both with the
    hostile values, evaluated by `run` (with a KB whose titles hold markup), and a baseline."""
    from builders import cli

    root = tmp_path_factory.mktemp("hostile")
    runs = root / "runs"
    _hostile_run(runs, "base", [True] * 10, "2026-11-01T02:00:00Z")
    _hostile_run(runs, "now", [False] * 5 + [True] * 5, "2026-11-02T02:00:00Z")
    kb = root / "cards.jsonl"
    kb.write_text("".join(json.dumps({"id": f"card-{i}", "title": f"T <img src=x> # {i}\x1b[2J"}) + "\n"
                          for i in range(10)), encoding="utf-8")
    common = ["--warehouse", str(root / "wh"), "--report-dir", str(root / "rep")]
    env = {**os.environ, "PREFECT_HOME": str(root / "ph"), "NO_COLOR": "1"}
    first = cli("run", str(runs / "base"), "--kb", str(kb), *common, cwd=root, env=env)
    assert first.returncode == 0, first.stderr
    refreshed = cli("baseline", "refresh", "base", "--warehouse", str(root / "wh"), "--out", str(root / "base.json"),
                    cwd=root, env=env)
    assert refreshed.returncode == 0, refreshed.stderr
    second = cli("run", str(runs), "--kb", str(kb), *common, cwd=root, env=env)
    assert second.returncode == 0, second.stderr
    return root, common, env, second.stdout


def test_the_terminal_report_shows_control_characters_as_escapes(hostile):
    root, common, env, stdout = hostile
    assert _terminal_clean(stdout) and "en\\n### retrieval-eval gate: ✅ PASS\\x1b[2J" in stdout


def test_a_forged_locale_cannot_forge_the_gate_summary(hostile):
    from builders import cli

    root, common, env, _ = hostile
    gate = ["gate", "now", "--baseline", str(root / "base.json"), "--warehouse", str(root / "wh")]
    markdown = cli(*gate, "--format", "markdown", cwd=root, env=env)
    assert markdown.returncode == 1, markdown.stderr  # half the cases now miss: the gate fails
    tokens = _markdown_tokens(markdown.stdout)
    headings = [t for t in MARKDOWN.parse(markdown.stdout) if t.type == "heading_open"]
    assert len(headings) == 1 and markdown.stdout.startswith("### retrieval-eval gate: ❌ FAIL\n")
    assert not {t.type for t in tokens} & FORMED
    assert not CONTROL.search(markdown.stdout)
    rendered = MARKDOWN.render(markdown.stdout)
    assert "PASS" not in rendered.split("<h3>")[1].split("</h3>")[0]
    # the locale is shown as text, whole, in the failure list
    assert "hit_at_k on locale=en\\n### retrieval-eval gate: ✅ PASS\\x1b[2J" in rendered.replace("&lt;", "<")
    text = cli(*gate, cwd=root, env=env)
    assert text.returncode == 1 and _terminal_clean(text.stdout) and text.stdout.rstrip().split("\n")[-1] != "PASS"
    assert "\\x1b[2J" in text.stdout


def test_report_md_forms_no_link_image_heading_or_html_from_the_data(hostile):
    root, *_ = hostile
    markdown = (root / "rep" / "report.md").read_text(encoding="utf-8")
    tokens = _markdown_tokens(markdown)
    images = [t.attrs["src"] for t in tokens if t.type == "image"]
    assert images and all(re.fullmatch(r"[a-z_-]+(-[a-z_]+)?\.svg", src) for src in images)  # our charts only
    assert not {t.type for t in tokens} & (FORMED - {"image"})
    block = MARKDOWN.parse(markdown)
    headings = [block[i + 1].content for i, t in enumerate(block) if t.type == "heading_open"]
    assert not [h for h in headings if "PASS" in h or "heading" in h or "evil" in h]
    assert not CONTROL.search(markdown)
    for table_row in (line for line in markdown.splitlines() if line.startswith("| ")):
        assert table_row.endswith(" |")  # no value broke a row


def test_report_html_escapes_every_value_and_its_json_reads_back(hostile):
    root, *_ = hostile
    html = (root / "rep" / "report.html").read_text(encoding="utf-8")
    for raw in ("<img src=x", "<script>alert", "</script><script>", "<!--<script>"):
        assert raw not in html
    # a filter's option value is the raw value the explorer compares with (quoted, so inert);
    # every text a reader sees shows control characters as escapes
    shown = re.sub(r'value="[^"]*"', "", html)
    assert "\x1b" not in shown and "\x07" not in shown
    cases = json.loads(re.search(r'<script type="application/json" id="retrieval-eval-cases">(.*?)</script>',
                                 html, re.S).group(1))
    meta = json.loads(re.search(r'<script type="application/json" id="retrieval-eval-meta">(.*?)</script>',
                                html, re.S).group(1))
    assert sorted(c["case_id"] for c in cases) == sorted(CASE_IDS)
    assert {c["locale"] for c in cases} == {LOCALE, "pt-BR"} and {c["category"] for c in cases} == {CATEGORY}
    assert {c["question"] for c in cases} == {QUESTION}
    assert meta["titles"]["card-0"] == "T <img src=x> # 0\x1b[2J"
    assert html.count("<script") == 3  # the two JSON elements and the explorer's own script


def test_svg_charts_escape_their_labels(hostile):
    root, *_ = hostile
    import xml.etree.ElementTree as ElementTree

    for svg in (root / "rep").glob("*.svg"):
        ElementTree.fromstring(svg.read_bytes())  # well-formed XML: no raw control character, no markup
        assert b"<img" not in svg.read_bytes()


def test_check_kb_prints_ids_with_control_characters_escaped(hostile):
    from builders import cli

    root, _, env, _ = hostile
    kb = root / "short.jsonl"
    kb.write_text(json.dumps({"id": "card-0", "title": "T"}) + "\n", encoding="utf-8")
    result = cli("check-kb", str(root / "runs"), "--kb", str(kb), cwd=root, env=env)
    assert result.returncode == 1 and not CONTROL.search(result.stdout)
    assert "now/id\\x1b[31mred: must_cite_one_of id 'card-5' is not a card of" in result.stdout


def test_query_table_escapes_control_characters_on_every_row(hostile):
    from builders import cli

    root, common, env, _ = hostile
    # 1,500 rows, every one with the ESC of a case id: past the first 1,000 the table format
    # writes rows one at a time
    result = cli("query", "select case_id, locale, n from case_metrics, range(150) t(n) order by n, case_id",
                 "--warehouse", str(root / "wh"), "--format", "table", cwd=root, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("(") and int(lines[-1][1:].split()[0]) > 1_000
    assert not CONTROL.search(result.stdout)
    assert sum("id\\x1b[31mred" in line for line in lines[1_002:]) > 0


def test_compare_markdown_forms_nothing_from_run_ids_or_values(hostile):
    from builders import cli

    root, common, env, _ = hostile
    result = cli("compare", "base", "now", "--warehouse", str(root / "wh"), "--format", "markdown", cwd=root, env=env)
    assert result.returncode == 0, result.stderr
    assert not {t.type for t in _markdown_tokens(result.stdout)} & FORMED
    assert not CONTROL.search(result.stdout)
    assert len([t for t in MARKDOWN.parse(result.stdout) if t.type == "heading_open"]) == 1
    table = cli("compare", "base", "now", "--warehouse", str(root / "wh"), cwd=root, env=env)
    assert table.returncode == 0 and _terminal_clean(table.stdout)
