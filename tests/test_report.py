"""The written report: content, charts, the self-contained HTML page, JSON, progress."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from builders import SAMPLE_BASELINE, SAMPLE_KB, SAMPLE_RUNS, evaluate, job_options
from retrieval_eval.flows.progress import Progress
from retrieval_eval.flows.reports import ReportOptions, write_report
from retrieval_eval.flows.warehouse import Warehouse
from retrieval_eval.transforms.errors import InputError
from retrieval_eval.transforms.report_render import render_json, render_terminal

SVG = "{http://www.w3.org/2000/svg}"


def report_of(warehouse, folder, **options):
    """The report of a warehouse written to `folder`; returns its model."""
    return write_report(ReportOptions(Path(warehouse), Path(folder), **options), Warehouse(warehouse).state()).report


def svg_texts(path) -> list[str]:
    """The text of an SVG chart, after checking that it is SVG and fetches nothing."""
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg"
    for node in root.iter():  # no script, style or image from elsewhere
        assert not any(name.endswith("href") or name == "src" for name in node.attrib), node.attrib
    return ["".join(node.itertext()).strip() for node in root.iter(SVG + "text")]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    evaluate(job_options(SAMPLE_RUNS, root / "wh", ks=(1, 2, 8)))
    report = report_of(root / "wh", root / "reports", baseline=SAMPLE_BASELINE)
    return report, root / "reports"


def test_a_report_checks_gold_ids_against_the_kb_it_was_given(written, tmp_path):
    report, folder = written
    kb = tmp_path / "cards.jsonl"
    kb.write_text(json.dumps({"id": "card-nobody-cites", "title": "unused"}) + "\n")  # every gold id is unknown
    with_kb = report_of(folder.parent / "wh", tmp_path / "ended", kb=kb, charts=False)
    assert any("are not cards of the knowledge base" in w for w in with_kb.runs[-1].warnings)
    assert not any("knowledge base" in w for run in report.runs for w in run.warnings)  # no KB given there
    sample_kb = report_of(folder.parent / "wh", tmp_path / "sample-kb", kb=SAMPLE_KB, charts=False)
    assert not any("knowledge base" in w for w in sample_kb.runs[-1].warnings)


@pytest.mark.parametrize("spoil", ["kb with a repeated id", "unreadable baseline", "missing case_metrics part"])
@pytest.mark.damages_warehouse
def test_a_report_is_not_written_when_a_read_fails(tmp_path, spoil):
    # The charts are drawn beside the detail's queries: a read that fails must leave the
    # report folder as it was (here: not made at all), charts included.
    evaluate(job_options(SAMPLE_RUNS / "2026-11-02-dense", tmp_path / "wh"))
    options = {}
    if spoil == "kb with a repeated id":
        options["kb"] = tmp_path / "cards.jsonl"
        options["kb"].write_text(json.dumps({"id": "A", "title": "a"}) + "\n" + json.dumps({"id": "A", "title": "b"}) + "\n")
    elif spoil == "unreadable baseline":
        options["baseline"] = tmp_path / "baseline.json"
        options["baseline"].write_text("{not json")
    else:
        next((tmp_path / "wh" / "case_metrics").glob("run_id=*/*.parquet")).unlink()
    with pytest.raises(InputError) as raised:
        report_of(tmp_path / "wh", tmp_path / "ended", **options)
    if spoil == "missing case_metrics part":
        assert "part of table case_metrics of run 2026-11-02-dense is missing" in str(raised.value)
    assert not (tmp_path / "ended").exists()


def test_markdown_has_n_beside_every_figure_and_the_caveats(written):
    report, folder = written
    markdown = (folder / "report.md").read_text()
    assert "recall@k is a lower bound" in markdown and "indicative" in markdown
    tables = [block for block in markdown.split("\n\n") if block.startswith("| slice |")]
    assert len(tables) == 1 and len(report.runs) == 4  # the newest run in detail, every run in the runs table
    for table in tables:
        header, _, *rows = table.splitlines()
        assert header.split("|")[-2].strip() == "n"
        assert all(re.fullmatch(r"\d+", row.split("|")[-2].strip()) for row in rows)
    assert "| 4* |" in markdown  # the headline k is marked in each sweep
    assert "changed hit@k between 2026-11-16-hybrid-rerank and 2026-11-23-hybrid-rerank-ptbr-regression" in markdown


def test_every_chart_is_an_svg_and_is_referenced(written):
    report, folder = written
    markdown = (folder / "report.md").read_text()
    assert set(report.charts) == {"sweep", "trend", "locales", "categories"}
    for file_name in report.charts.values():
        svg_texts(folder / file_name)
        assert f"]({file_name})" in markdown


def test_charts_show_every_run_and_slice_with_its_interval(written):
    report, folder = written
    run_ids = [run.run_id for run in report.runs]
    locales = svg_texts(folder / report.charts["locales"])
    assert set(run_ids) <= set(locales)  # the legend names every run
    assert {"en", "es-419", "pt-BR"} <= set(locales)  # an x label per locale
    root = ET.parse(folder / report.charts["locales"]).getroot()
    intervals = [n for n in root.iter() if "ci" in n.get("class", "").split()]
    assert len(intervals) == 3 * len(run_ids)  # a 95% interval on every bar
    headline = report.runs[0].figure("hit_at_k", "locale", "en")
    assert f"n={headline['n']}" in locales  # and its n
    trend = svg_texts(folder / report.charts["trend"])
    assert "baseline hit@k" in trend and set(run_ids) <= set(trend)
    sweep = svg_texts(folder / report.charts["sweep"])
    assert f"{run_ids[0]} · hit@k" in sweep


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.links, self.tables = [], [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag in ("link", "script", "a", "iframe"):
            self.links.append(attrs)
        if tag == "table":
            self.tables += 1


def test_html_is_self_contained_with_every_chart_inline(written):
    report, folder = written
    html = (folder / "report.html").read_text()
    page = _Page()
    page.feed(html)
    assert len(page.images) == len(report.charts) == 4
    assert all(src.startswith("data:image/svg+xml;base64,") for src in page.images)
    assert page.links == []  # no stylesheet, script or link to fetch
    assert not re.search(r"(?:src|href)=\"(?:https?:)?//", html)
    assert page.tables >= 3
    assert '<meta name="viewport"' in html


def test_json_output_carries_every_slice_at_the_headline_k(written):
    report, _ = written
    document = json.loads(render_json(report))
    run = document["runs"][-1]
    at_headline = {(a["slice"], a["slice_value"]) for a in run["aggregates"] if a["k"] == run["headline_k"]}
    assert ("all", "all") in at_headline and ("locale", "pt-BR") in at_headline
    assert ("locale_category", "pt-BR/golden") in at_headline
    assert {a["k"] for a in run["aggregates"]} == {1, 2, 4, 8}


def test_terminal_colours_only_when_asked(written):
    report, _ = written
    assert "\x1b[" not in render_terminal(report, colour=False)
    coloured = render_terminal(report, colour=True)
    assert "\x1b[31m-0.042" in coloured and "\x1b[32m+0.125" in coloured


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_shows_on_a_terminal_for_large_runs_only():
    piped, terminal = io.StringIO(), _Terminal()
    for stream in (piped, terminal):
        progress = Progress(1, stream)
        progress.start_run(1, "big", 500 * 1024 * 1024)
        assert list(progress.batches(["first", "second"])) == ["first", "second"]
        progress.end_run()
    assert piped.getvalue() == ""
    assert "[1/1] big (524 MB)" in terminal.getvalue() and "batch 2" in terminal.getvalue()
    small = _Terminal()
    progress = Progress(1, small)
    progress.start_run(1, "small", 1024)
    progress.end_run()
    assert small.getvalue() == ""


def test_gold_ids_missing_from_the_kb_are_flagged(tmp_path):
    from builders import case, chunk, write_run

    write_run(tmp_path / "runs", "run-a", [
        case("ok", [chunk("A::00", "A")], ["A"]),
        case("orphan", [chunk("A::00", "A")], ["card-gone", "A"]),
    ])
    kb = tmp_path / "cards.jsonl"
    kb.write_text(json.dumps({"id": "A", "title": "A"}) + "\n")
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    with_kb = report_of(tmp_path / "wh", tmp_path / "with-kb", kb=kb)
    assert any("1 gold id(s) in 1 case(s) are not cards of the knowledge base" in w for w in with_kb.runs[0].warnings)
    without = report_of(tmp_path / "wh", tmp_path / "without")
    assert not any("knowledge base" in w for w in without.runs[0].warnings)


def test_without_a_sweep_there_is_no_k_curve(tmp_path):
    evaluate(job_options(SAMPLE_RUNS / "2026-11-02-dense", tmp_path / "wh"))
    report = report_of(tmp_path / "wh", tmp_path / "reports")
    assert set(report.charts) == {"trend", "locales", "categories"}
    assert not (tmp_path / "reports" / "sweep.svg").exists()


def test_long_diagnostics_list_the_first_cases_and_say_where_the_rest_are(tmp_path):
    from builders import case, chunk, write_run
    from retrieval_eval.transforms.report_render import LISTED_CASES

    n_never = LISTED_CASES + 7
    write_run(tmp_path / "runs", "run-a", [
        *[case(f"miss-{i:03d}", [chunk("A::00", "A")], ["B"]) for i in range(n_never)],
        case("hit", [chunk("A::00", "A")], ["A"]),
    ])
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    report = report_of(tmp_path / "wh", tmp_path / "reports", charts=False)
    assert report.never_hit.height == n_never  # the model keeps every case
    markdown = (tmp_path / "reports" / "report.md").read_text()
    assert f"{n_never} labelled case(s) never met a gold card" in markdown
    assert f"the first {LISTED_CASES} are listed" in markdown and "`case_metrics` view" in markdown
    listed = re.findall(r"^\| miss-(\d{3}) \|", markdown, flags=re.MULTILINE)
    assert listed == [f"{i:03d}" for i in range(LISTED_CASES)]  # in case id order
