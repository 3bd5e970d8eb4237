"""The written report (SPEC 13): what changed first, in every rendering; the runs table and the
newest run in detail; the k sweep only when asked for; colour only on a terminal; charts that
are valid, small, self-contained and drawn the same twice; a self-contained report.html; the
`--json` document; KB warnings; nothing written when a read fails; long diagnostics cut to
the first 50; history kept when one run folder is added.

Expected figures are derived here from the warehouse's `case_metrics` and `cases` views
(the per-case rows), never read back from the report model they check."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest
from builders import (
    SAMPLE_BASELINE,
    SAMPLE_KB,
    SAMPLE_RUN_IDS,
    SAMPLE_RUNS,
    case,
    chunk,
    cli,
    evaluate,
    job_options,
    reader,
    write_run,
)
from retrieval_eval.flows.inputs.baseline_file import read_baseline
from retrieval_eval.flows.inputs.kb import read_kb
from retrieval_eval.flows.job.progress import Progress
from retrieval_eval.flows.outputs.reports import ReportOptions, write_report
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.transforms.errors import InputError
from retrieval_eval.transforms.report_render import (
    LISTED_CASES,
    render_json,
    render_markdown,
    render_terminal,
)
from retrieval_eval.transforms.tables import GREEN, RED, RESET

SVG = "{http://www.w3.org/2000/svg}"
K = 4  # the sample's headline k: every run has retrieval_top_k 4
KS = (1, 2, 3, 4, 5, 8, 10)
NEWEST, PREVIOUS = SAMPLE_RUN_IDS[-1], SAMPLE_RUN_IDS[-2]  # the run ids start with their dates
SWEEP_CHARTS = {"sweep-hit_at_k", "sweep-recall_at_k", "sweep-ndcg_at_k"}
ESCAPE = "\x1b["


def report_of(warehouse, folder, baseline=None, **options):
    """The report of a warehouse written to `folder` (against the baseline and KB files given, a KB
    as with --kb; without one, the newest run's own); returns its model."""
    options["baseline"] = None if baseline is None else read_baseline(baseline)
    options["kb"] = None if options.get("kb") is None else read_kb(options["kb"], given=True)
    return write_report(ReportOptions(Path(warehouse), Path(folder), **options), Warehouse(warehouse).state()).report


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample evaluated with a k sweep and the sample KB, by the real job, which also
    writes the report: (warehouse, report folder, report model)."""
    root = tmp_path_factory.mktemp("report")
    result = evaluate(job_options(SAMPLE_RUNS, root / "wh", ks=KS, kb=SAMPLE_KB))
    return root / "wh", result.report.markdown.parent, result.report.report


@pytest.fixture(scope="module")
def no_sweep(tmp_path_factory):
    """The sample evaluated at the headline k only (no --ks)."""
    root = tmp_path_factory.mktemp("report-no-sweep")
    result = evaluate(job_options(SAMPLE_RUNS, root / "wh"))
    return root / "wh", result.report.markdown.parent, result.report.report


def per_case(warehouse, run_id: str, k: int = K) -> dict[str, dict]:
    """case_id → its case_metrics row at k, with the case's gold and n_retrieved."""
    with reader(warehouse) as con:
        metrics = con.table("case_metrics").pl().filter((pl.col("run_id") == run_id) & (pl.col("k") == k))
        cases = con.table("cases").pl().filter(pl.col("run_id") == run_id).select("case_id", "gold", "n_retrieved")
    return {row["case_id"]: row for row in metrics.join(cases, on="case_id").iter_rows(named=True)}


def mean(rows, metric: str) -> float:
    rows = list(rows)
    return sum(row[metric] for row in rows) / len(rows)


def flips_of(before: dict, after: dict) -> list[dict]:
    """Cases whose hit@k changed, with the reason of the missing side (transforms/flips.py's
    order; asserted below that the earlier reasons do not apply to the sample's flips)."""
    out = []
    for case_id in sorted(before.keys() & after.keys()):
        was, now = before[case_id], after[case_id]
        if was["hit_at_k"] == now["hit_at_k"]:
            continue
        missing = now if now["hit_at_k"] < was["hit_at_k"] else was
        assert sorted(was["gold"]) == sorted(now["gold"]) and missing["n_retrieved"] > 0
        reason = "not_retrieved" if missing["first_relevant_rank"] is None else "below_k"
        out.append({"case_id": case_id, "locale": now["locale"], "to": "miss" if missing is now else "hit",
                    "reason": reason})
    return out


def signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


# ----------------------------------------------------------------------------- what changed


def test_every_rendering_opens_with_the_pt_br_change_and_its_significance(sample):
    warehouse, folder, report = sample
    newest, previous = per_case(warehouse, NEWEST), per_case(warehouse, PREVIOUS)
    # The gated metrics per slice, from the cases both runs scored: the largest |Δ| leads.
    deltas = {}
    for metric in ("hit_at_k", "recall_at_k", "ndcg_at_k"):
        for slice_ in ("all", "locale", "category"):
            for value in {"all"} if slice_ == "all" else {row[slice_] for row in newest.values()}:
                ids = [c for c in newest if slice_ == "all" or newest[c][slice_] == value]
                deltas[(slice_, value, metric)] = (mean((newest[c] for c in ids), metric)
                                                   - mean((previous[c] for c in ids), metric))
    largest = max(deltas, key=lambda key: abs(deltas[key]))
    assert largest == ("locale", "pt-BR", "hit_at_k")
    pt_br = [c for c in newest if newest[c]["locale"] == "pt-BR"]
    hits = (sum(previous[c]["hit_at_k"] for c in pt_br), sum(newest[c]["hit_at_k"] for c in pt_br))
    assert (len(pt_br), *hits) == (80, 68, 58)  # so Δ = −10/80 = −0.125 (0.850 → 0.725)
    assert deltas[largest] == pytest.approx(-10 / 80)

    first = (f"What changed in {NEWEST} since run {PREVIOUS}: pt-BR hit@4 {signed(deltas[largest])} (95% CI ")
    line = report.changes.lines.row(0, named=True)
    assert line["ci_low"] < deltas[largest] < line["ci_high"] < 0  # the paired interval excludes 0
    assert line["significant"] and line["p_adjusted"] < 0.05
    headline = f"{first}{signed(line['ci_low'])} … {signed(line['ci_high'])}) *"

    terminal = render_terminal(report, colour=False).splitlines()
    assert terminal[0] == headline

    markdown = (folder / "report.md").read_text(encoding="utf-8")
    blocks = markdown.split("\n\n")
    assert blocks[:3] == ["# Retrieval evaluation report", "## What changed", headline]
    table = next(b for b in blocks if b.startswith("| slice | metric |")).splitlines()
    assert table[2].startswith("| locale pt-BR | hit@4 | 0.850 | 0.725 | −0.125 * |")

    html = (folder / "report.html").read_text(encoding="utf-8")
    body = re.sub(r"\s+", " ", re.sub(r"<style>.*?</style>", "", html, flags=re.S))
    assert re.search(r"<body> <h1>Retrieval evaluation report</h1> <h2>What changed</h2> <p class=\"lead\">([^<]*)</p>",
                     body).group(1) == headline

    # The Prefect artifact: report.md without its images (the UI cannot show local files).
    prefect = render_markdown(report, with_images=False)
    assert "![" not in prefect and "](changes.svg)" in markdown
    assert prefect.split("\n\n") == [b for b in blocks if not b.startswith("![")]


def test_flipped_cases_are_counted_by_reason(sample):
    warehouse, folder, report = sample
    flips = flips_of(per_case(warehouse, PREVIOUS), per_case(warehouse, NEWEST))
    to_miss = [f for f in flips if f["to"] == "miss"]
    below, absent = (sum(f["reason"] == r for f in to_miss) for r in ("below_k", "not_retrieved"))
    # The sample's regression: 11 hit → miss (10 of them pt-BR), 1 miss → hit.
    assert (len(to_miss), below, absent, len(flips) - len(to_miss)) == (11, 6, 5, 1)
    summary = (f"{len(to_miss)} case(s) flipped hit → miss ({below} below_k, {absent} not_retrieved), "
               f"{len(flips) - len(to_miss)} miss → hit; 240 cases compared")
    assert render_terminal(report).splitlines()[2] == "  " + summary
    markdown = (folder / "report.md").read_text(encoding="utf-8")
    assert summary in markdown.split("\n\n")[:6]
    # the reasons table: the reasons some flip has (in the order they are tried), then the total
    assert "| hit → miss in | not_retrieved | below_k | total |" in markdown
    for locale in ("all", "pt-BR", "en"):
        mine = [f for f in to_miss if locale in ("all", f["locale"])]
        counts = [sum(f["reason"] == r for f in mine) for r in ("not_retrieved", "below_k")]
        assert f"| {locale} | {counts[0]} | {counts[1]} | {len(mine)} |" in markdown
    listed = re.findall(r"^\| ([\w-]+) \| [\w-]+ \| \w+ \| (hit|miss) → (?:hit|miss) \| (\w+) \|", markdown, re.M)
    assert sorted(listed) == sorted((f["case_id"], "miss" if f["to"] == "hit" else "hit", f["reason"]) for f in flips)


def test_a_first_run_opens_by_saying_there_is_nothing_to_compare(tmp_path):
    first = SAMPLE_RUN_IDS[0]
    result = evaluate(job_options(SAMPLE_RUNS / first, tmp_path / "wh"))
    report = result.report.report
    line = f"What changed in {first}: nothing to compare, there is no run before it"
    assert report.changes is None and render_terminal(report).splitlines()[0] == line
    markdown = result.report.markdown.read_text(encoding="utf-8")
    assert markdown.split("\n\n")[:3] == ["# Retrieval evaluation report", "## What changed", line]
    assert f'<p class="lead">{line}</p>' in result.report.html.read_text(encoding="utf-8")
    cases, meta = report.explorer
    assert meta["previous_run_id"] is None and cases["flip"].null_count() == cases.height == 240


def test_with_a_baseline_the_changes_are_against_it(sample, tmp_path):
    warehouse, _folder, _report = sample
    report = report_of(warehouse, tmp_path / "rep", baseline=SAMPLE_BASELINE)
    baseline = json.loads(SAMPLE_BASELINE.read_text())
    assert report.changes.reference == f"baseline {baseline['run_id']}"
    assert render_terminal(report).startswith(f"What changed in {NEWEST} since baseline {baseline['run_id']}: pt-BR hit@4")
    trend = ET.parse(tmp_path / "rep" / "trend.svg").getroot()
    assert "baseline hit@k" in ["".join(t.itertext()) for t in trend.iter(SVG + "text")]


def test_the_baseline_s_own_run_against_it_changed_nothing(tmp_path):
    # The snapshot keeps 10 places; paired unrounded, recall and nDCG differed by ~1e-11 in
    # every case alike, and the paired test gave p = 1e-5 on slices that did not move.
    run_id = json.loads(SAMPLE_BASELINE.read_text())["run_id"]
    evaluate(job_options(SAMPLE_RUNS / run_id, tmp_path / "wh"))
    report = report_of(tmp_path / "wh", tmp_path / "rep", baseline=SAMPLE_BASELINE)
    lines = report.changes.lines
    assert report.changes.reference == f"baseline {run_id}" and lines.height > 0
    assert lines["delta"].abs().max() == 0.0 and lines["p_value"].min() == 1.0 and not lines["significant"].any()
    assert report.changes.flips.height == 0


def runs_at_two_headline_ks(runs: Path) -> None:
    """Two runs that retrieve the very same lists, told apart only by their headline k (3, then
    5). Gold G sits at rank 1, 2, 4 and 6 of cases c1, c2, c4 and c6: at k=5 three of the four
    hit in both runs (nothing changed); at k=3 only two do."""
    cases = [case(f"c{rank}", [chunk(f"N{i}::00", f"N{i}") for i in range(1, rank)] + [chunk("G::00", "G")], ["G"])
             for rank in (1, 2, 4, 6)]
    write_run(runs, "older", cases, top_k=3, created_at="2026-11-01T00:00:00Z")
    write_run(runs, "newer", cases, top_k=5, created_at="2026-11-02T00:00:00Z")


@pytest.mark.parametrize("ks", [(), (3, 5)], ids=["each-run-at-its-own-k", "both-at-both-ks"])
def test_runs_of_different_headline_k_are_compared_at_the_newest_runs_k(tmp_path, ks):
    runs_at_two_headline_ks(tmp_path / "runs")
    report = evaluate(job_options(tmp_path / "runs", tmp_path / "wh", ks=ks)).report.report
    assert report.changes.k == 5
    hit = report.changes.lines.filter((pl.col("slice") == "all") & (pl.col("metric") == "hit_at_k")).row(0, named=True)
    assert (hit["reference_mean"], hit["mean"], hit["delta"]) == (0.75, 0.75, 0.0)  # 3 of 4 hit at k=5 in both
    assert report.changes.flips.height == 0
    computed = "" if ks else " (its figures at k=5 computed from its stored rankings)"
    assert report.changes.notes == (f"run older has headline k=3; both runs are compared at k=5{computed}",)
    assert "  note: " + report.changes.notes[0] in render_terminal(report).splitlines()
    cases, meta = report.explorer
    assert cases["flip"].null_count() == cases.height == 4
    assert dict(zip(cases["case_id"], cases["hit"])) == {"c1": 1, "c2": 1, "c4": 1, "c6": 0}


def test_a_baseline_at_another_k_is_said_to_be_left_aside(tmp_path):
    runs_at_two_headline_ks(tmp_path / "runs")
    evaluate(job_options(tmp_path / "runs" / "older", tmp_path / "wh"))
    assert cli("baseline", "refresh", "older", "--warehouse", str(tmp_path / "wh"),
               "--out", str(tmp_path / "baseline.json")).returncode == 0
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))  # adds the newer run
    report = report_of(tmp_path / "wh", tmp_path / "rep", baseline=tmp_path / "baseline.json")
    assert report.changes.reference == "run older"
    assert report.changes.notes[0] == "baseline older is at k=3, not at this run's headline k=5: compared with the run before instead"
    # with no run before, the report says the baseline was not compared
    evaluate(job_options(tmp_path / "runs" / "newer", tmp_path / "wh-newer"))
    alone = report_of(tmp_path / "wh-newer", tmp_path / "rep-newer", baseline=tmp_path / "baseline.json")
    assert alone.changes is None
    assert render_terminal(alone).splitlines()[:2] == [
        "What changed in newer: nothing to compare, there is no run before it",
        "  note: baseline older is at k=3, not at this run's headline k=5: not compared"]


def test_a_baseline_at_another_relevance_level_is_said_to_be_left_aside(tmp_path):
    # The same lists twice, at k=5; the newer run counts only grade >= 2 as gold, so the
    # baseline's cases (grade >= 1) are not its cases: it is compared with the run before.
    runs_at_two_headline_ks(tmp_path / "runs")
    evaluate(job_options(tmp_path / "runs" / "newer", tmp_path / "wh"))
    assert cli("baseline", "refresh", "newer", "--warehouse", str(tmp_path / "wh"),
               "--out", str(tmp_path / "baseline.json")).returncode == 0
    write_run(tmp_path / "runs2", "newest", [case("c1", [chunk("G::00", "G")], ["G"])], top_k=5,
              created_at="2026-11-03T00:00:00Z")
    evaluate(job_options(tmp_path / "runs2", tmp_path / "wh", relevance_level=2))
    report = report_of(tmp_path / "wh", tmp_path / "rep", baseline=tmp_path / "baseline.json")
    assert report.changes.reference == "run newer"
    assert report.changes.notes == (
        "baseline newer: the baseline counts grades >= 1 as relevant, run 'newest' was evaluated with "
        "--relevance-level 2: its gold is not the baseline's: compared with the run before instead",)


def test_user_values_cannot_break_a_line_of_the_report_or_become_markdown_html(tmp_path):
    # The odd case hits in the older run and retrieves nothing in the newer: it flips, and its
    # category moves most (−1.000), so both reach the first line and the tables.
    odd = {"case_id": "q</script><b>|x", "locale": "x|y", "category": "c\nd"}
    def run_cases(hit: bool) -> list[dict]:
        return [case(odd["case_id"], [chunk("G::00", "G")] if hit else [], ["G"], locale=odd["locale"],
                     category=odd["category"]),
                case("plain", [chunk("G::00", "G")], ["G"])]
    write_run(tmp_path / "runs", "older", run_cases(True), created_at="2026-11-01T00:00:00Z")
    write_run(tmp_path / "runs", "newer", run_cases(False), created_at="2026-11-02T00:00:00Z")
    result = evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    first = render_terminal(result.report.report).splitlines()[0]
    assert first.startswith("What changed in newer since run older: c\\nd hit@4 −1.000")
    markdown = result.report.markdown.read_text(encoding="utf-8")
    assert "<script" not in markdown and "<b>" not in markdown and "c\nd" not in markdown
    flipped = [line for line in markdown.splitlines() if "q&lt;/script>" in line]
    assert flipped and all(line.startswith("| ") and line.endswith(" |") for line in flipped)
    assert "| q&lt;/script>&lt;b>\\|x | x\\|y | c\\nd | hit → miss |" in markdown
    assert f'data-case-id="{odd["case_id"]}"' not in result.report.html.read_text(encoding="utf-8")  # escaped there


# ----------------------------------------------------------------------------- runs and detail


def test_the_runs_table_lists_every_run_and_the_newest_is_in_detail(sample):
    warehouse, folder, report = sample
    markdown = (folder / "report.md").read_text(encoding="utf-8")
    runs = next(b for b in markdown.split("\n\n") if b.startswith("| run |")).splitlines()[2:]
    hits = [mean(per_case(warehouse, run_id).values(), "hit_at_k") for run_id in SAMPLE_RUN_IDS]
    assert [row.split(" | ")[0].lstrip("| ") for row in runs] == SAMPLE_RUN_IDS  # oldest first
    for row, hit, before in zip(runs, hits, [None, *hits[:-1]], strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1:3] == [str(K), f"{hit:.3f}"] and cells[-2] == "240"
        assert cells[-1] == ("" if before is None else signed(hit - before))
    terminal = render_terminal(report)
    assert all(run_id in terminal for run_id in SAMPLE_RUN_IDS)

    # Only the newest run has the per-slice detail, each row with its n.
    assert markdown.count("## Newest run:") == 1 and f"## Newest run: {NEWEST}" in markdown
    detail = [b for b in markdown.split("\n\n") if b.startswith("| slice | hit@4 (95% CI) |")]
    assert len(detail) == 1
    rows = {cells[0]: cells for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in detail[0].splitlines()[2:])}
    newest = per_case(warehouse, NEWEST)
    for locale in ("en", "es-419", "pt-BR"):
        mine = [c for c in newest.values() if c["locale"] == locale]
        assert rows[f"locale {locale}"][1].startswith(f"{mean(mine, 'hit_at_k'):.3f} (")
        assert rows[f"locale {locale}"][-1] == str(len(mine))
    assert rows["all"][1].startswith(f"{mean(newest.values(), 'hit_at_k'):.3f} (") and rows["all"][-1] == "240"


def test_without_ks_there_is_no_k_sweep_and_with_ks_three_sweep_panels(sample, no_sweep):
    _wh, folder, report = no_sweep
    markdown = (folder / "report.md").read_text(encoding="utf-8")
    assert "k sweep" not in markdown and "k sweep" not in render_terminal(report)
    assert not SWEEP_CHARTS & set(report.charts) and not list(folder.glob("sweep*.svg"))
    assert set(report.charts) == {"changes", "trend", "locales", "categories"}

    _wh, folder, report = sample
    markdown = (folder / "report.md").read_text(encoding="utf-8")
    assert SWEEP_CHARTS <= set(report.charts)
    assert sorted(p.name for p in folder.glob("sweep*.svg")) == sorted(f"{name}.svg" for name in SWEEP_CHARTS)
    sweep = next(b for b in markdown.split("\n\n") if b.startswith("| k |")).splitlines()[2:]
    # the headline k's star is escaped as every cell is (transforms/escaping.py): it renders as `4*`
    assert [row.split(" | ")[0].lstrip("| ") for row in sweep] == [f"{k}\\*" if k == K else str(k) for k in KS]
    panels = next(b for b in markdown.split("\n\n") if "](sweep-" in b)
    assert re.findall(r"\]\((sweep-[\w_]+\.svg)\)", panels) == [
        "sweep-hit_at_k.svg", "sweep-recall_at_k.svg", "sweep-ndcg_at_k.svg"]
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert html.count('<figure aria-label="') == len(report.charts) == 7


# ----------------------------------------------------------------------------- colour


def test_the_terminal_is_coloured_only_when_asked(sample):
    _wh, _folder, report = sample
    assert ESCAPE not in render_terminal(report, colour=False)
    coloured = render_terminal(report, colour=True)
    # Δ hit of the runs table: 211/240 → 201/240 for the newest run (red), +0.125 for the second (green).
    assert f"{RED}{signed(201 / 240 - 211 / 240)}{RESET}" in coloured
    assert f"{GREEN}+0.125{RESET}" in coloured
    assert re.sub(r"\x1b\[\d+m", "", coloured) == render_terminal(report, colour=False)


def on_a_terminal(args: list[str], env: dict, cwd: Path, timeout: float = 120) -> str:
    """What `retrieval-eval ARGS` prints when its standard output is a terminal (a pty)."""
    leader, follower = pty.openpty()
    with tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, "-m", "retrieval_eval", *args], stdin=subprocess.DEVNULL,
                                   stdout=follower, stderr=err, cwd=cwd, env=env)
        os.close(follower)
        chunks = []
        try:
            while select.select([leader], [], [], timeout)[0]:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # EIO: the process closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
        finally:
            os.close(leader)
            assert process.wait(timeout=timeout) == 0, err.seek(0) or err.read().decode()
    return b"".join(chunks).decode("utf-8")


def test_the_cli_colours_a_terminal_unless_no_color_and_never_a_pipe(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PREFECT_API_URL")}
    args = ["run", str(SAMPLE_RUNS), "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep")]
    piped = cli(*args, cwd=tmp_path, env=env)
    assert piped.returncode == 0, piped.stderr
    assert "What changed in" in piped.stdout and ESCAPE not in piped.stdout
    # the terminal names both report files, which exist
    assert piped.stdout.endswith(f"\nReport written to {tmp_path / 'rep' / 'report.md'} and "
                                 f"{tmp_path / 'rep' / 'report.html'}\n")
    assert (tmp_path / "rep" / "report.md").is_file() and (tmp_path / "rep" / "report.html").is_file()

    coloured = on_a_terminal(args, env, tmp_path)  # the control: a terminal does get colour
    assert "What changed in" in coloured and ESCAPE in coloured
    plain = on_a_terminal(args, env | {"NO_COLOR": "1"}, tmp_path)
    assert "What changed in" in plain and ESCAPE not in plain
    assert plain.replace("\r\n", "\n") == piped.stdout


# ----------------------------------------------------------------------------- charts


def chart_root(path: Path) -> ET.Element:
    """An SVG chart's root, after checking that it is SVG, small, and fetches nothing."""
    text = path.read_text(encoding="utf-8")
    root = ET.fromstring(text)  # well-formed XML
    assert root.tag == SVG + "svg"
    width = float(root.get("width"))
    assert width <= 380 and root.get("viewBox").split()[2] == root.get("width")
    for node in root.iter():
        assert node.tag.rsplit("}", 1)[-1] not in ("script", "image", "foreignObject", "use", "a", "style"), node.tag
        assert not any(name.endswith("href") or name == "src" for name in node.attrib), node.attrib
    assert "url(" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    return root


def test_charts_are_valid_small_svg_without_external_references(sample):
    _wh, folder, report = sample
    markdown = (folder / "report.md").read_text(encoding="utf-8")
    assert sorted(p.name for p in folder.glob("*.svg")) == sorted(report.charts.values())
    for file_name in report.charts.values():
        chart_root(folder / file_name)
        assert f"]({file_name})" in markdown


def test_charts_are_byte_identical_when_written_twice_from_the_same_warehouse(sample, tmp_path):
    warehouse, _folder, _report = sample
    first = report_of(warehouse, tmp_path / "first", kb=SAMPLE_KB)
    second = report_of(warehouse, tmp_path / "second", kb=SAMPLE_KB)
    assert first.charts == second.charts and len(first.charts) == 7
    for file_name in first.charts.values():
        assert (tmp_path / "first" / file_name).read_bytes() == (tmp_path / "second" / file_name).read_bytes()
    html = (tmp_path / "first" / "report.html").read_text(encoding="utf-8")
    for file_name in first.charts.values():  # report.html holds each chart as written to its file
        assert (tmp_path / "first" / file_name).read_text(encoding="utf-8") in html


# ----------------------------------------------------------------------------- report.html


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.ids, self.scripts = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if "id" in attrs:
            self.ids.append(attrs["id"])
        if tag == "script":
            self.scripts.append(attrs)


def test_report_html_is_self_contained(sample):
    _wh, folder, report = sample
    html = (folder / "report.html").read_text(encoding="utf-8")
    page = _Page()
    page.feed(html)
    names = [tag for tag, _ in page.tags]
    assert "link" not in names and "iframe" not in names and "img" not in names
    assert page.scripts == [{"type": "application/json", "id": "retrieval-eval-cases"},
                            {"type": "application/json", "id": "retrieval-eval-meta"}, {}]  # inline, no src
    assert not [attrs for _, attrs in page.tags if "src" in attrs]
    assert not [attrs for _, attrs in page.tags if "href" in attrs and not attrs["href"].startswith("#")]
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", html)
    assert not re.search(r"@import|url\(\s*[\"']?(?:https?:)?//", html)
    assert names.count("svg") == len(report.charts)  # every chart inline
    assert len(page.ids) == len(set(page.ids))  # the inline charts' ids do not collide
    assert ('meta', {"name": "viewport", "content": "width=device-width, initial-scale=1"}) in page.tags
    cases = json.loads(re.search(r'<script type="application/json" id="retrieval-eval-cases">(.*?)</script>',
                                 html, re.S).group(1))
    assert len(cases) == 240 and {c["case_id"] for c in cases} == set(per_case(_wh, NEWEST))


# ----------------------------------------------------------------------------- --json


AGGREGATE_KEYS = {"k", "slice", "slice_value", "metric", "mean", "n", "ci_low", "ci_high"}
RUN_KEYS = {"run_id", "created_at", "headline_k", "ks", "n_cases", "n_labelled", "n_rejected", "vacuous",
            "warnings", "aggregates"}


def test_the_json_document_has_every_run_with_its_aggregates(sample):
    warehouse, _folder, report = sample
    document = json.loads(render_json(report))
    assert set(document) == {"runs"}
    assert [run["run_id"] for run in document["runs"]] == SAMPLE_RUN_IDS
    for run in document["runs"]:
        assert set(run) == RUN_KEYS and run["headline_k"] == K and run["ks"] == list(KS)
        assert run["n_labelled"] == 240 and run["n_rejected"] == 0
        assert all(set(a) == AGGREGATE_KEYS for a in run["aggregates"])
        # every slice at the headline k; slice all only at the other ks
        assert {a["slice"] for a in run["aggregates"] if a["k"] != K} == {"all"}
        at_k = {(a["slice"], a["slice_value"]) for a in run["aggregates"] if a["k"] == K}
        assert {("all", "all"), ("locale", "pt-BR"), ("category", "golden"), ("locale_category", "pt-BR/golden")} <= at_k
        assert {a["k"] for a in run["aggregates"]} == set(KS)
    newest = document["runs"][-1]
    assert newest["warnings"] == report.newest.warnings and newest["warnings"]  # k=10 beyond the capture
    assert [r["warnings"] for r in document["runs"][:-1]] == [[], [], []]
    hit = next(a for a in newest["aggregates"] if (a["k"], a["slice"], a["metric"]) == (K, "all", "hit_at_k"))
    assert hit["mean"] == pytest.approx(mean(per_case(warehouse, NEWEST).values(), "hit_at_k")) and hit["n"] == 240
    assert hit["ci_low"] < hit["mean"] < hit["ci_high"]


def test_run_json_prints_the_document_only(sample, tmp_path):
    warehouse, _folder, report = sample
    result = cli("run", str(SAMPLE_RUNS), "--warehouse", str(warehouse), "--report-dir", str(tmp_path / "rep"),
                 "--ks", ",".join(map(str, KS)), "--kb", str(SAMPLE_KB), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(render_json(report))  # nothing else on stdout


# ----------------------------------------------------------------------------- warnings


def test_gold_ids_missing_from_the_kb_are_flagged(tmp_path):
    write_run(tmp_path / "runs", "run-a", [
        case("ok", [chunk("A::00", "A")], ["A"]),
        case("orphan", [chunk("A::00", "A")], ["card-gone", "A"]),
    ])
    kb = tmp_path / "cards.jsonl"
    kb.write_text(json.dumps({"id": "A", "title": "A"}) + "\n")
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh", kb=kb))
    with_kb = report_of(tmp_path / "wh", tmp_path / "with-kb", kb=kb)
    flagged = f"1 gold id(s) in 1 case(s) are not cards of the knowledge base {kb}: those cases can never hit"
    assert any(flagged in w for w in with_kb.newest.warnings)
    assert flagged in (tmp_path / "with-kb" / "report.md").read_text(encoding="utf-8")
    kb.unlink()  # the run's own KB gone: no other judges its gold (tests/test_run_kb.py)
    without = report_of(tmp_path / "wh", tmp_path / "without")
    assert not any("knowledge base" in w for w in without.newest.warnings)


def test_a_flip_whose_gold_is_not_a_kb_card_says_so_in_what_changed(tmp_path):
    # "gone" hit in the older run (its retriever returned the card) and misses in the newer:
    # against a KB without that card, the report's flip says gold_not_in_kb, as the gate's does
    # (transforms/flips.py); the other flip, of a KB card, is not_retrieved.
    runs = tmp_path / "runs"
    write_run(runs, "run-a", [case("gone", [chunk("gone::00", "gone")], ["gone"]),
                              case("kept", [chunk("A::00", "A")], ["A"])], created_at="2026-11-01T00:00:00Z")
    write_run(runs, "run-b", [case("gone", [chunk("A::00", "A")], ["gone"]),
                              case("kept", [chunk("B::00", "B")], ["A"])], created_at="2026-11-02T00:00:00Z")
    kb = tmp_path / "cards.jsonl"
    kb.write_text(json.dumps({"id": "A", "title": "A"}) + "\n" + json.dumps({"id": "B", "title": "B"}) + "\n")
    evaluate(job_options(runs, tmp_path / "wh", kb=kb))
    reasons = {row["case_id"]: row["reason"] for row in
               report_of(tmp_path / "wh", tmp_path / "with-kb", charts=False).changes.flips.iter_rows(named=True)}
    assert reasons == {"gone": "gold_not_in_kb", "kept": "not_retrieved"}  # by the run's own KB
    kb.unlink()  # gone: no other KB judges the flips (tests/test_run_kb.py)
    without = report_of(tmp_path / "wh", tmp_path / "without", charts=False).changes.flips
    assert dict(without.select("case_id", "reason").iter_rows()) == {"gone": "not_retrieved", "kept": "not_retrieved"}


def test_a_kb_that_holds_every_gold_card_raises_no_warning(sample, tmp_path):
    warehouse, _folder, report = sample
    assert not any("knowledge base" in w for w in report.newest.warnings)  # the sample KB holds every gold card
    kb = tmp_path / "cards.jsonl"
    kb.write_text(json.dumps({"id": "card-nobody-cites", "title": "unused"}) + "\n")  # every gold id unknown
    other = report_of(warehouse, tmp_path / "rep", kb=kb, charts=False)
    # counted as check-kb counts them: one per gold id of each case (465 over the 240 labelled cases)
    cited = sum(len(c["gold"]) for c in per_case(warehouse, NEWEST).values())
    assert f"{cited} gold id(s) in 240 case(s) are not cards of the knowledge base {kb}:" in " ".join(other.newest.warnings)


@pytest.mark.parametrize("table", ["cases", "case_metrics"])
@pytest.mark.damages_warehouse
def test_a_report_is_not_written_when_a_read_fails(tmp_path, table):
    # The charts are drawn after every read: a read that fails must leave the report folder
    # as it was (here: not made at all), charts included.
    evaluate(job_options(SAMPLE_RUNS / "2026-11-02-dense", tmp_path / "wh"))
    next((tmp_path / "wh" / table).glob("run_id=*/*.parquet")).unlink()
    with pytest.raises(InputError) as raised:
        report_of(tmp_path / "wh", tmp_path / "ended")
    assert f"part of table {table} of run 2026-11-02-dense is missing" in str(raised.value)
    assert not (tmp_path / "ended").exists()


# ----------------------------------------------------------------------------- long diagnostics


def test_long_diagnostics_list_the_first_cases_and_say_where_the_rest_are(tmp_path):
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
    assert f"the first {LISTED_CASES} are listed" in markdown and "\\`case_metrics\\` view" in markdown
    listed = re.findall(r"^\| miss-(\d{3}) \|", markdown, flags=re.MULTILINE)
    assert listed == [f"{i:03d}" for i in range(LISTED_CASES)]  # in case id order


def test_a_long_list_of_flips_lists_the_first_cases(tmp_path):
    # 57 cases hit in run-a (gold A retrieved) and miss in run-b (only B retrieved): 57 flips.
    n_flips = LISTED_CASES + 7
    write_run(tmp_path / "runs", "run-a", [case(f"c-{i:03d}", [chunk("A::00", "A")], ["A"]) for i in range(n_flips)],
              created_at="2026-11-01T02:00:00Z")
    write_run(tmp_path / "runs", "run-b", [case(f"c-{i:03d}", [chunk("B::00", "B")], ["A"]) for i in range(n_flips)],
              created_at="2026-11-02T02:00:00Z")
    kb = tmp_path / "cards.jsonl"  # A and B are cards: the runs' own KB tells not_retrieved
    kb.write_text(json.dumps({"id": "A", "title": "A"}) + "\n" + json.dumps({"id": "B", "title": "B"}) + "\n")
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh", kb=kb))
    report = report_of(tmp_path / "wh", tmp_path / "reports", charts=False)
    assert report.changes.flips.height == n_flips
    markdown = (tmp_path / "reports" / "report.md").read_text()
    assert f"{n_flips} case(s) flipped hit → miss ({n_flips} not_retrieved), 0 miss → hit" in markdown
    assert f"{n_flips} flipped case(s) (the first {LISTED_CASES} are listed" in markdown
    assert f"| hit → miss in | not_retrieved | total |\n| --- | ---: | ---: |\n| all | {n_flips} | {n_flips} |" in markdown
    listed = re.findall(r"^\| c-(\d{3}) \| en \| golden \| hit → miss \| not_retrieved \|", markdown, flags=re.M)
    assert listed == [f"{i:03d}" for i in range(LISTED_CASES)]


# ----------------------------------------------------------------------------- history


def test_one_run_folder_added_to_a_warehouse_with_history_reports_the_history(sample_copy, tmp_path):
    later = tmp_path / "later"
    later.mkdir()
    shutil.move(sample_copy / "runs" / NEWEST, later / NEWEST)
    evaluate(job_options(sample_copy / "runs", tmp_path / "wh"))  # the three older runs
    result = cli("run", str(later / NEWEST), "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"),
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"What changed in {NEWEST} since run {PREVIOUS}: pt-BR hit@4 −0.125")
    assert all(run_id in result.stdout for run_id in SAMPLE_RUN_IDS)  # the runs table has every run
    markdown = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    runs = next(b for b in markdown.split("\n\n") if b.startswith("| run |")).splitlines()[2:]
    assert [row.split(" | ")[0].lstrip("| ") for row in runs] == SAMPLE_RUN_IDS
    trend = chart_root(tmp_path / "rep" / "trend.svg")  # a trend over every run
    assert f"of {len(SAMPLE_RUN_IDS)} runs, oldest first" in "".join(trend.find(SVG + "desc").itertext())
    lines = [node.get("points").split() for node in trend.iter(SVG + "polyline")]
    assert len(lines) == 3 and all(len(points) == len(SAMPLE_RUN_IDS) for points in lines)


# ----------------------------------------------------------------------------- progress


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



def test_the_explorer_data_written_in_chunks_is_one_script_safe_json_array(monkeypatch):
    from retrieval_eval.transforms import case_explorer

    monkeypatch.setattr(case_explorer, "CASES_PER_CHUNK", 3)
    cases = pl.DataFrame({"case_id": [f"c{i}" for i in range(7)],
                          "question": ["ends </script> or opens <!-- a comment", None, "\u2028", "a", "b", "c", "d"]})
    text = "".join(case_explorer._cases_json(cases))
    assert json.loads(text) == cases.to_dicts()  # 3 + 3 + 1 cases, joined into one array
    assert "</" not in text and "<!--" not in text and "\u2028" not in text
    assert "".join(case_explorer._cases_json(cases.head(0))) == "[]"
