"""The written report: content, charts, the self-contained HTML page, JSON, progress."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from flows.pipeline import EvaluationOptions, evaluate, read_report, report_files, write_report
from flows.progress import Progress
from flows.warehouse import Warehouse
from tests.conftest import SAMPLE_KB, SAMPLE_RUNS
from transforms.report_render import render_json, render_terminal

SVG = "{http://www.w3.org/2000/svg}"
SAMPLE_BASELINE = SAMPLE_RUNS.parent / "baselines" / "baseline.json"


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
    run_ids = evaluate(EvaluationOptions(runs=SAMPLE_RUNS, warehouse=root / "wh", ks=(1, 2, 8)))
    report = read_report(Warehouse(root / "wh"), run_ids)
    report = write_report(report, root / "reports", baseline=SAMPLE_BASELINE)
    return report, root / "reports"


def test_a_run_ends_with_the_same_report_when_its_charts_are_drawn_beside_the_queries(written, tmp_path):
    # `retrieval-eval run` writes the report with report_files (charts drawn on a thread
    # while the diagnostics are read); it must write what read_report + write_report write.
    report, folder = written
    warehouse = Warehouse(folder.parent / "wh")
    kb = SAMPLE_KB
    ended = report_files(warehouse, [run.run_id for run in report.runs], tmp_path / "ended", kb, baseline=SAMPLE_BASELINE)
    assert ended.charts == report.charts
    assert sorted(p.name for p in (tmp_path / "ended").iterdir()) == sorted(p.name for p in folder.iterdir())
    assert (tmp_path / "ended" / "report.md").read_text() == (folder / "report.md").read_text()
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    for file_name in report.charts.values():  # pygal gives every drawing a random uuid
        drawn, expected = (re.sub(uuid, "-", (f / file_name).read_text()) for f in (tmp_path / "ended", folder))
        assert drawn == expected, file_name
    with_kb = write_report(read_report(warehouse, [run.run_id for run in report.runs], kb), tmp_path / "kb")
    assert [run.warnings for run in ended.runs] == [run.warnings for run in with_kb.runs]


def test_a_run_ends_with_the_kb_check_of_the_kb_it_was_given(written, tmp_path):
    report, folder = written
    run_ids = [run.run_id for run in report.runs]
    kb = tmp_path / "cards.jsonl"
    kb.write_text(json.dumps({"id": "card-nobody-cites", "title": "unused"}) + "\n")  # every gold id is unknown
    ended = report_files(Warehouse(folder.parent / "wh"), run_ids, tmp_path / "ended", kb, charts=False)
    for run in ended.runs:
        assert any("are not cards of the knowledge base" in w for w in run.warnings), run.run_id
    assert not any("knowledge base" in w for run in report.runs for w in run.warnings)  # no KB given there


@pytest.mark.parametrize("spoil", ["kb with a repeated id", "unreadable baseline", "missing case_metrics part"])
def test_a_run_ends_writing_no_report_file_when_a_read_fails(tmp_path, spoil):
    # The charts are drawn beside the diagnostics' queries: a read that fails must leave
    # the report folder as it was (here: not made at all), charts included.
    from transforms.errors import InputError

    run_ids = evaluate(EvaluationOptions(runs=SAMPLE_RUNS / "2026-11-02-dense", warehouse=tmp_path / "wh"))
    kb = baseline = None
    if spoil == "kb with a repeated id":
        kb = tmp_path / "cards.jsonl"
        kb.write_text(json.dumps({"id": "A", "title": "a"}) + "\n" + json.dumps({"id": "A", "title": "b"}) + "\n")
    elif spoil == "unreadable baseline":
        baseline = tmp_path / "baseline.json"
        baseline.write_text("{not json")
    else:
        next((tmp_path / "wh" / "case_metrics").glob("run_id=*/*.parquet")).unlink()
    with pytest.raises(Exception) as raised:
        report_files(Warehouse(tmp_path / "wh"), run_ids, tmp_path / "ended", kb, baseline=baseline)
    if spoil != "missing case_metrics part":
        assert isinstance(raised.value, InputError)
    assert not (tmp_path / "ended").exists()


def test_markdown_has_n_beside_every_figure_and_the_caveats(written):
    report, folder = written
    markdown = (folder / "report.md").read_text()
    assert "recall@k is a lower bound" in markdown and "indicative" in markdown
    tables = [block for block in markdown.split("\n\n") if block.startswith("| slice |")]
    assert len(tables) == len(report.runs) == 4
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
    assert page.tables >= 2 * len(report.runs)
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
        progress.batch(1, 100_000)
        progress.end_run()
    assert piped.getvalue() == ""
    assert "[1/1] big (524 MB)" in terminal.getvalue() and "batch 1: 100,000 cases" in terminal.getvalue()
    small = _Terminal()
    progress = Progress(1, small)
    progress.start_run(1, "small", 1024)
    progress.end_run()
    assert small.getvalue() == ""


def test_gold_ids_missing_from_the_kb_are_flagged(tmp_path):
    from tests.conftest import case, chunk, write_run

    write_run(tmp_path / "runs", "run-a", [
        case("ok", [chunk("A::00", "A")], ["A"]),
        case("orphan", [chunk("A::00", "A")], ["card-gone", "A"]),
    ])
    kb = tmp_path / "cards.jsonl"
    kb.write_text(json.dumps({"id": "A", "title": "A"}) + "\n")
    run_ids = evaluate(EvaluationOptions(runs=tmp_path / "runs", warehouse=tmp_path / "wh"))
    with_kb = read_report(Warehouse(tmp_path / "wh"), run_ids, kb)
    assert any("1 gold id(s) in 1 case(s) are not cards of the knowledge base" in w for w in with_kb.runs[0].warnings)
    without = read_report(Warehouse(tmp_path / "wh"), run_ids)
    assert not any("knowledge base" in w for w in without.runs[0].warnings)


def test_without_a_sweep_there_is_no_k_curve(tmp_path):
    run_ids = evaluate(EvaluationOptions(runs=SAMPLE_RUNS / "2026-11-02-dense", warehouse=tmp_path / "wh"))
    report = write_report(read_report(Warehouse(tmp_path / "wh"), run_ids), tmp_path / "reports")
    assert set(report.charts) == {"trend", "locales", "categories"}
    assert not (tmp_path / "reports" / "sweep.svg").exists()


def test_long_diagnostics_list_the_first_cases_and_say_where_the_rest_are(tmp_path):
    from tests.conftest import case, chunk, write_run
    from transforms.report_render import LISTED_CASES

    n_never = LISTED_CASES + 7
    write_run(tmp_path / "runs", "run-a", [
        *[case(f"miss-{i:03d}", [chunk("A::00", "A")], ["B"]) for i in range(n_never)],
        case("hit", [chunk("A::00", "A")], ["A"]),
    ])
    run_ids = evaluate(EvaluationOptions(runs=tmp_path / "runs", warehouse=tmp_path / "wh"))
    report = write_report(read_report(Warehouse(tmp_path / "wh"), run_ids), tmp_path / "reports", charts=False)
    assert report.never_hit.height == n_never  # the model keeps every case
    markdown = (tmp_path / "reports" / "report.md").read_text()
    assert f"{n_never} labelled case(s) never met a gold card" in markdown
    assert f"the first {LISTED_CASES} are listed" in markdown and "`case_metrics` view" in markdown
    listed = re.findall(r"^\| miss-(\d{3}) \|", markdown, flags=re.MULTILINE)
    assert listed == [f"{i:03d}" for i in range(LISTED_CASES)]  # in case id order
