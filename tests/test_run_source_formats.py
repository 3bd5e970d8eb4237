"""`run --source FORMAT INPUT [--qrels FILE]` (SPEC 15) through the real command, on each
format's fixture (tests/fixtures/sources/README.md): the figures in the warehouse and the
identity counts of the `runs` row equal those worked out by hand from the fixture below
(tests/test_source_formats_reference.py holds the readers' cases to trec_eval); the
fixture's bad record refuses the run (exit 2) naming the reader's origin, and lands in the
`rejects` view; a format that stores no gold needs --qrels; an input in a bucket reads as a
local one, and an unchanged re-run reads nothing; the `runs` row counts how cards were
identified (null for run folders); the explorer shows the text of a content-identified
card, escaped."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from builders import cli, reader, write_run
from retrieval_eval.flows.sources.formats.identity import content_id
from retrieval_eval.flows.storage import open_store
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.transforms.run_summary import IDENTITY_COUNTS
from test_inputs_on_object_storage import gets_of, moto_log
from test_source_formats_reference import FIXTURES, INPUTS, K

METRICS = ("hit_at_k", "recall_at_k", "ndcg_at_k", "precision_at_k", "reciprocal_rank_at_k", "first_relevant_rank")
# The figures at k = 10 of a case (METRICS' order), by hand (SPEC 2.6, precision divided by
# k = 10): one gold card, found at rank 1 or at rank 2 (nDCG 1 / log2(3): IDCG is 1); or none
# found, or nothing retrieved (a case only the qrels know).
AT_1 = (1.0, 1.0, 1.0, 0.1, 1.0, 1)
AT_2 = (1.0, 1.0, 1 / math.log2(3), 0.1, 0.5, 2)
MISS = (0.0, 0.0, 0.0, 0.0, 0.0, None)
# ranx q1: d3, d1, d2 with grades d1 = 2, d2 = 1: both found, first at rank 2;
# DCG = 2/log2(3) + 1/log2(4), IDCG = 2/log2(2) + 1/log2(3).
RANX_Q1 = (1.0, 1.0, (2 / math.log2(3) + 0.5) / (2 + 1 / math.log2(3)), 0.2, 0.5, 2)
RANX = ({"q1": RANX_Q1, "q2": AT_2, "q9": MISS},  # q2: d8, d7 (a tie, doc id descending), gold d7
        {"retrieved_by_id": 5, "gold_by_id": 4})  # retrieved q1 3 + q2 2; judged q1 2 + q2 1 + q9 1
# Each fixture's valid cases (its bad record left out), and the identity counts of the `runs`
# row (a count not named is 0), with where each comes from.
EXPECTED = {
    # q1: d1, d3, d2 (d3 and d2 tie: doc id descending); gold d3 (grade 1) and d9 (grade 2, never
    # retrieved): recall 1/2, DCG 1/log2(3), IDCG 2/log2(2) + 1/log2(3). q2: d4, d5, gold d5. q3:
    # unjudged, no row. q4: only in the qrels. Retrieved q1 3 + q2 2 ids; judged q1 2 + q2 1 + q4 1
    # (the qrels line giving q2 d6 the grade "one" is rejected).
    "beir/results.json": ({"q1": (1.0, 0.5, (1 / math.log2(3)) / (2 + 1 / math.log2(3)), 0.1, 0.5, 2),
                           "q2": AT_2, "q4": MISS},
                          {"retrieved_by_id": 5, "gold_by_id": 4}),
    "ranx/run.json": RANX,
    "ranx/run.trec": RANX,  # the same run as TREC lines; line 6 (d9, no score) is rejected
    # row-1: reference_contexts "Paris  is in\tFrance.\n" is the first retrieved text once
    # normalised; row with id 7: ids c1, 2, gold 2; row-4 (older names): gold "Old text two" at
    # rank 2. Retrieved: row-1 2 texts, id 7 2 ids, row-4 2 texts; gold: 1 text, 1 id, 1 text.
    "ragas/dataset.jsonl": ({"row-1": AT_1, "7": AT_2, "row-4": AT_2},
                            {"retrieved_by_id": 2, "retrieved_by_content": 4, "gold_by_id": 1,
                             "gold_by_content": 2}),
    # row-1: gold "Paris is in France." retrieved first; row-3 has no reference: no row.
    # Retrieved row-1 2 + row-3 1 texts; gold 1 text.
    "ragas/dataset.csv": ({"row-1": AT_1}, {"retrieved_by_content": 3, "gold_by_content": 1}),
    # r1: docs/a.md, docs/b.md, gold docs/b.md (doc_uri: metadata); r2: "Same\u00a0 text" is
    # "Same text", retrieved first (content); row-4: ids id-1, id-2, gold id-2.
    "mlflow/eval_results_table.json": ({"r1": AT_2, "r2": AT_1, "row-4": AT_2},
                                       {"retrieved_by_id": 2, "retrieved_by_metadata": 2, "retrieved_by_content": 2,
                                        "gold_by_id": 1, "gold_by_metadata": 1, "gold_by_content": 1}),
    # test_case_0: Alpha, Beta, gold Beta; row-3: Delta, gold Epsilon, a miss. Texts: retrieved
    # 2 + 1, gold 1 + 1.
    "deepeval/latest_test_run.json": ({"test_case_0": AT_2, "row-3": MISS},
                                      {"retrieved_by_content": 3, "gold_by_content": 2}),
    # c1: d1, d2, gold d2; t2 (its trace id): "Some  text" then kb/7 (metadata doc_uri), gold
    # kb/7; c3: only in the qrels. Retrieved 2 ids, 1 metadata, 1 text; the qrels' 3 ids.
    "openinference/spans.jsonl": ({"c1": AT_2, "t2": AT_2, "c3": MISS},
                                  {"retrieved_by_id": 2, "retrieved_by_metadata": 1, "retrieved_by_content": 1,
                                   "gold_by_id": 3}),
}
# Each fixture's bad record (tests/test_source_formats.py names the same ones at the reader):
# the file it is in, the line or row number the `rejects` view holds, and how the message names it.
BAD_RECORDS = {
    "beir/results.json": ("beir/results.json", 4, "beir/results.json:row 4: query 'qbad'"),
    "ranx/run.json": ("ranx/run.json", 3, "ranx/run.json:row 3: query 'q3'"),
    "ranx/run.trec": ("ranx/run.trec", 6, "ranx/run.trec:6: score is not a number"),
    "ragas/dataset.jsonl": ("ragas/dataset.jsonl", 3, "ragas/dataset.jsonl:3: field retrieved_context_ids has 1"),
    "ragas/dataset.csv": ("ragas/dataset.csv", 2, "ragas/dataset.csv:row 2: column retrieved_contexts"),
    "mlflow/eval_results_table.json": ("mlflow/eval_results_table.json", 3,
                                       "eval_results_table.json:row 3: field retrieved_context must be a list"),
    "deepeval/latest_test_run.json": ("deepeval/latest_test_run.json", 2,
                                      "latest_test_run.json:row 2: retrievalContext[1] has no id and no text"),
    "openinference/spans.jsonl": ("openinference/spans.jsonl", 4, "spans.jsonl:4: a RETRIEVER span with no"),
}


def source_args(format_name: str, name: str, qrels: str | None, base: Path | str = FIXTURES) -> list[str]:
    args = ["--source", format_name, f"{base}/{name}", "--run-id", "r1"]
    return args + (["--qrels", f"{base}/{qrels}"] if qrels else [])


@pytest.mark.parametrize(("format_name", "name", "qrels"), INPUTS, ids=[name for _, name, _ in INPUTS])
def test_each_format_end_to_end(tmp_path, format_name, name, qrels):
    warehouse, reports = str(tmp_path / "wh"), str(tmp_path / "rep")
    where = ["--warehouse", warehouse, "--report-dir", reports]

    refused = cli("run", *source_args(format_name, name, qrels), *where)
    bad_file, bad_line, named = BAD_RECORDS[name]
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "run r1:" in refused.stderr and named in refused.stderr, refused.stderr
    with reader(warehouse) as con:
        rejects = con.execute("select source_file, line, unit from rejects where run_id = 'r1'").fetchall()
    unit = "line" if name.endswith((".jsonl", ".trec")) else "row"
    assert (str(FIXTURES / bad_file), bad_line, unit) in rejects

    loaded = cli("run", *source_args(format_name, name, qrels), *where, "--allow-rejects", "--quiet")
    assert loaded.returncode == 0, loaded.stderr
    expected, identity = EXPECTED[name]
    with reader(warehouse) as con:
        rows = con.execute("select case_id, hit_at_k, recall_at_k, ndcg_at_k, precision_at_k, reciprocal_rank_at_k,"
                           " first_relevant_rank from case_metrics where run_id = ? and k = ?", ["r1", K]).fetchall()
        run = con.execute("select headline_k, retrieved_by_id, retrieved_by_metadata, retrieved_by_content, gold_by_id,"
                          " gold_by_metadata, gold_by_content from runs where run_id = ?", ["r1"]).fetchone()
    ours = {row[0]: row[1:] for row in rows}
    assert set(ours) == set(expected)
    for case_id, figures in ours.items():
        assert figures == pytest.approx(expected[case_id], abs=1e-12), case_id
    assert run[0] == K  # the headline k without --k
    expected_identity = {count: identity.get(count, 0) for count in IDENTITY_COUNTS}
    assert dict(zip(IDENTITY_COUNTS, run[1:], strict=True)) == expected_identity


@pytest.mark.parametrize(("format_name", "name"), [("beir", "beir/results.json"), ("ranx", "ranx/run.json"),
                                                   ("openinference", "openinference/spans.jsonl")])
def test_a_format_without_gold_needs_qrels(tmp_path, format_name, name):
    result = cli("run", "--source", format_name, str(FIXTURES / name), "--warehouse", str(tmp_path / "wh"),
                 "--report-dir", str(tmp_path / "rep"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"retrieval-eval: {FIXTURES / name}: a {format_name} input holds no gold: give the judgments with --qrels FILE"]
    assert not (tmp_path / "wh").exists()


def test_a_case_whose_gold_text_matches_nothing_is_a_miss(tmp_path):
    dataset = tmp_path / "texts.jsonl"
    dataset.write_text(json.dumps({"user_input": "q", "retrieved_contexts": ["Delta."],
                                   "reference_contexts": ["Epsilon."]}) + "\n")
    result = cli("run", "--source", "ragas", str(dataset), "--warehouse", str(tmp_path / "wh"),
                 "--report-dir", str(tmp_path / "rep"), "--quiet")
    assert result.returncode == 0, result.stderr
    with reader(tmp_path / "wh") as con:
        assert con.execute("select hit_at_k, first_relevant_rank from case_metrics").fetchall() == [(0.0, None)]


def test_an_input_in_a_bucket_reads_as_a_local_one_and_an_unchanged_rerun_reads_nothing(tmp_path, s3_bucket,
                                                                                        tmp_path_factory):
    store, prefix = open_store(f"s3://{s3_bucket}/exports")
    for name in ("beir/results.json", "beir/qrels.tsv"):
        store.put(f"{prefix}/{name}", FIXTURES / name)
    base = f"s3://{s3_bucket}/exports"
    warehouse = tmp_path / "wh"
    where = ["--warehouse", str(warehouse), "--report-dir", str(tmp_path / "rep"), "--allow-rejects", "--quiet"]
    first = cli("run", *source_args("beir", "beir/results.json", "beir/qrels.tsv", base), *where)
    assert first.returncode == 0, first.stderr
    expected, _ = EXPECTED["beir/results.json"]
    with reader(warehouse) as con:
        rows = con.execute("select case_id, hit_at_k, ndcg_at_k from case_metrics where k = 10").fetchall()
        rejected = con.execute("select source_file, line from rejects").fetchall()
    assert {row[0]: row[1:] for row in rows} == {
        case_id: (figures[0], pytest.approx(figures[2])) for case_id, figures in expected.items()}
    assert (f"{base}/beir/results.json", 4) in rejected and (f"{base}/beir/qrels.tsv", 6) in rejected

    log = moto_log(tmp_path_factory)
    reads = gets_of(log, s3_bucket, "results.json"), gets_of(log, s3_bucket, "qrels.tsv")
    version = Warehouse(warehouse).state().version
    again = cli("run", *source_args("beir", "beir/results.json", "beir/qrels.tsv", base), *where)
    assert again.returncode == 0, again.stderr
    assert (gets_of(log, s3_bucket, "results.json"), gets_of(log, s3_bucket, "qrels.tsv")) == reads
    assert Warehouse(warehouse).state().version == version  # nothing committed


def test_a_run_folder_has_no_identity_counts(tmp_path):
    write_run(tmp_path / "runs", "native", [{"case_id": "c1", "locale": "en", "category": "golden",
                                             "must_cite_one_of": ["a"], "retrieved_context": [{"id": "a"}]}])
    result = cli("run", str(tmp_path / "runs"), "--warehouse", str(tmp_path / "wh"), "--report-dir",
                 str(tmp_path / "rep"), "--quiet")
    assert result.returncode == 0, result.stderr
    with reader(tmp_path / "wh") as con:
        assert con.execute("select retrieved_by_id, retrieved_by_metadata, retrieved_by_content, gold_by_id,"
                           " gold_by_metadata, gold_by_content from runs").fetchall() == [(None,) * 6]


class ScriptData(HTMLParser):
    """The text of each `<script type="application/json">` element of a page, by id."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, str] = {}
        self._id: str | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "script" and attributes.get("type") == "application/json":
            self._id = attributes.get("id")
            self.found[self._id] = ""

    def handle_data(self, data):
        if self._id is not None:
            self.found[self._id] += data

    def handle_endtag(self, tag):
        self._id = None


def test_the_explorer_shows_the_text_of_a_content_identified_card_escaped(tmp_path):
    hostile = "Paris </script><script>alert(1)</script> is in France."
    dataset = tmp_path / "texts.jsonl"
    dataset.write_text(json.dumps({"case_id": "c1", "user_input": "Where is Paris?",
                                   "retrieved_contexts": ["Lyon is in France.", hostile],
                                   "reference_contexts": [hostile]}) + "\n")
    result = cli("run", "--source", "ragas", str(dataset), "--warehouse", str(tmp_path / "wh"),
                 "--report-dir", str(tmp_path / "rep"))
    assert result.returncode == 0, result.stderr
    assert "Most cards of this run were identified by their text" in result.stdout
    assert "retrieved 2 (id 0, metadata 0, content 2); gold 1 (id 0, metadata 0, content 1)" in result.stdout
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page
    data = ScriptData()
    data.feed(page)
    meta = json.loads(data.found["retrieval-eval-meta"])
    assert meta["texts"] == {content_id(hostile): hostile, content_id("Lyon is in France."): "Lyon is in France."}
    (case,) = json.loads(data.found["retrieval-eval-cases"])
    assert case["retrieved"] == [content_id("Lyon is in France."), content_id(hostile)] and case["hit"] == 1
    script = (Path(__file__).parents[1] / "transforms" / "assets" / "explorer.js").read_text(encoding="utf-8")
    assert re.search(r'el\("q", "cx-card-content", texts\[cardId\]\)', script)  # set as textContent, never as HTML
