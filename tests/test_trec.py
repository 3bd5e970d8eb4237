"""TREC in and out (SPEC 12): the reading rules of run files and qrels (transforms/trec.py)
rule by rule, `run --trec-run --qrels` through the command, its agreement with trec_eval
(pytrec-eval-terrier) on random topics, and `export` back to trec_eval's formats, checked
against pytrec_eval and by a round trip through `run --trec-run`."""

from __future__ import annotations

import gzip
import math
import os
import random
import re
from pathlib import Path

import polars as pl
import pytest
import pytrec_eval
from builders import (
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from retrieval_eval.flows.sources import trec_files
from retrieval_eval.flows.job.run_steps import Loaded, Reused
from retrieval_eval.flows.sources.trec_files import TrecRunRead, read_qrels, run_id_of
from retrieval_eval.flows.storage.hashing import file_digest
from retrieval_eval.transforms.errors import InputError, Reject
from retrieval_eval.transforms.trec import TopicCameBack

KS = (1, 3, 5, 10)
TREC_NAMES = {"success": "hit_at_k", "recall": "recall_at_k", "P": "precision_at_k", "ndcg_cut": "ndcg_at_k"}
METRIC_COLUMNS = ["case_id", "k", "n_gold", "hit_at_k", "recall_at_k", "ndcg_at_k", "precision_at_k",
                  "reciprocal_rank_at_k", "first_relevant_rank", "k_beyond_depth"]


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def run_lines(rows, sep=" ") -> str:
    return "".join(sep.join([q, "Q0", d, str(i + 1), repr(s), "tag"]) + "\n" for i, (q, d, s) in enumerate(rows))


def topics(path: Path, **options) -> tuple[dict[str, list[tuple[str, float]]], TrecRunRead]:
    """Every topic of a run file as {qid: [(docno, score), ...]} in rank order, read as the
    ingest reads it (in file order, by topic when a topic comes back), and the read."""
    try:
        read = TrecRunRead(path, **options)
        frames = list(read.topics(in_file_order=True))
    except TopicCameBack:
        read = TrecRunRead(path, **options)
        frames = list(read.topics(in_file_order=False))
    ranked = {}
    for frame in frames:
        for case_id, items in frame.select("case_id", "retrieved_context").iter_rows():
            assert case_id not in ranked, f"topic {case_id} in two frames"
            ranked[case_id] = [(item["id"], item["score"]) for item in items]
    return ranked, read


def run_trec(tmp_path: Path, run: Path, qrels: Path, *args: str):
    """`retrieval-eval run --trec-run RUN --qrels QRELS ARGS` into tmp_path/warehouse."""
    return cli("run", "--trec-run", str(run), "--qrels", str(qrels), "--warehouse", str(tmp_path / "warehouse"),
               "--report-dir", str(tmp_path / "report"), "--quiet", *args)


def view(warehouse: Path, name: str) -> pl.DataFrame:
    with reader(warehouse) as con:
        return con.table(name).pl()


# ---------------------------------------------------------------- the reading rules, one by one


def test_ties_rank_by_docno_descending(tmp_path):
    # trec_eval breaks score ties by docno descending in byte order: "d9" > "d10" > "D9".
    path = write(tmp_path / "run", run_lines([("q", "d10", 1.0), ("q", "D9", 1.0), ("q", "d9", 1.0), ("q", "a", 2.0)]))
    ranked, _ = topics(path)
    assert ranked == {"q": [("a", 2.0), ("d9", 1.0), ("d10", 1.0), ("D9", 1.0)]}


def test_score_order_ignores_the_rank_column_and_file_order(tmp_path):
    ranked, _ = topics(write(tmp_path / "run", "q Q0 low 1 0.5 t\nq Q0 high 2 7e1 t\nq Q0 mid 3 -1 t\n"))
    assert [d for d, _ in ranked["q"]] == ["high", "low", "mid"]


def test_comments_and_blank_lines_are_skipped_but_counted(tmp_path):
    text = "# run of 2026\n\nq Q0 a 1 2 t\n   \n  # indented comment\n\t\nq Q0 b 2 1 t\n#q Q0 c 3 0 t\n"
    ranked, read = topics(write(tmp_path / "run", text))
    assert ranked == {"q": [("a", 2.0), ("b", 1.0)]}
    assert read.lines == 8 and read.rejects == []


def test_extra_fields_are_ignored(tmp_path):
    ranked, read = topics(write(tmp_path / "run", "q Q0 a 1 2 tag extra fields here\nq Q0 b 2 1 tag 3.5\n"))
    assert ranked == {"q": [("a", 2.0), ("b", 1.0)]} and read.rejects == []


def test_duplicates_keep_the_first_in_ranking_order_and_are_counted(tmp_path):
    # "a" comes first in the file with 1.0 and later with 3.0: ranking order puts 3.0 first.
    text = run_lines([("q", "a", 1.0), ("q", "b", 2.0), ("q", "a", 3.0), ("q", "b", 2.0), ("r", "x", 1.0)])
    ranked, read = topics(write(tmp_path / "run", text))
    assert ranked == {"q": [("a", 3.0), ("b", 2.0)], "r": [("x", 1.0)]}
    assert read.n_duplicates == 2


def test_tabs_and_runs_of_spaces_split_like_single_spaces(tmp_path):
    rows = [("q1", "a", 0.5), ("q1", "b", 1.5), ("q2", "c", 2.0)]
    expected, _ = topics(write(tmp_path / "plain", run_lines(rows)))
    for name, text in {
        "tabs": run_lines(rows, sep="\t"),
        "spaces": run_lines(rows, sep="   "),
        "mixed": "  q1 \t Q0  a 1\t0.5 t\nq1\tQ0 b\t\t2   1.5\ttag \nq2 Q0 c 1 2.0 t\t\n",
        "crlf": run_lines(rows).replace("\n", "\r\n"),
        "vertical_tab_and_form_feed": "q1\vQ0\fa 1 0.5 t\nq1 Q0 b 1 1.5 t\nq2 Q0 c 1 2 t",
    }.items():
        ranked, read = topics(write(tmp_path / name, text))
        assert ranked == expected, name
        assert read.rejects == [], name


def test_malformed_run_lines_are_named_by_line_and_the_rest_is_read(tmp_path):
    text = (
        "# header\n"  # 1
        "q Q0 a 1 2.5 t\n"  # 2
        "q Q0 b 2 1.5\n"  # 3: five fields
        "\n"  # 4
        "q Q0 c 3 high t\n"  # 5: not a number
        "q Q0 d 4 nan t\n"  # 6: not finite
        "q\tQ0\te\t5\tinf\tt\n"  # 7: not finite, tab-separated
        "q Q0 f 6 -1e999 t\n"  # 8: overflows to -inf
        "q\n"  # 9: one field
        "q Q0 g 7 0.5 t\n"  # 10
    )
    ranked, read = topics(write(tmp_path / "run", text), display_name="runs/x.run")
    assert ranked == {"q": [("a", 2.5), ("g", 0.5)]}
    assert [r.describe() for r in read.rejects] == [
        "runs/x.run:3: expected 6 fields (qid Q0 docno rank score tag), found 5",
        "runs/x.run:5: score is not a number: 'high'",
        "runs/x.run:6: score is not finite: 'nan'",
        "runs/x.run:7: score is not finite: 'inf'",
        "runs/x.run:8: score is not finite: '-1e999'",
        "runs/x.run:9: expected 6 fields (qid Q0 docno rank score tag), found 1",
    ]
    assert read.rejects[3] == Reject("runs/x.run", 7, "score is not finite: 'inf'", "q\tQ0\te\t5\tinf\tt")
    assert read.lines == 10


def test_lines_that_are_not_utf8_are_rejects(tmp_path):
    ranked, read = topics(write(tmp_path / "run", b"q Q0 a 1 2 t\nq Q0 \xff\xfe 2 1 t\nq Q0 b 3 0 t\n"))
    assert ranked == {"q": [("a", 2.0), ("b", 0.0)]}
    assert [(r.line, r.reason.split(" (")[0]) for r in read.rejects] == [(2, "not valid UTF-8")]


def test_an_overlong_line_is_a_reject_and_never_held_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(trec_files, "MAX_LINE_BYTES", 100)
    path = write(tmp_path / "run", "q Q0 a 1 2 t\nq Q0 " + "x" * 500 + " 2 1 t\nq Q0 b 3 0 t\n")
    ranked, read = topics(path, block_bytes=16)
    assert ranked == {"q": [("a", 2.0), ("b", 0.0)]}
    assert [(r.line, r.reason) for r in read.rejects] == [(2, "line longer than 100 bytes")]
    assert len(read.rejects[0].raw) <= trec_files.RAW_KEEP_BYTES and read.lines == 3


def test_gzip_run_file_and_its_digest_is_of_the_bytes_as_stored(tmp_path):
    path = write(tmp_path / "run.gz", gzip.compress(run_lines([("q", "a", 1.0), ("q", "b", 2.0)]).encode()))
    ranked, read = topics(path)
    assert ranked == {"q": [("b", 2.0), ("a", 1.0)]}
    assert read.digest == file_digest(path)


def test_interleaved_topics_are_read_again_in_topic_order(tmp_path):
    rng = random.Random(7)
    rows = [(f"t{q}", f"doc{rng.randrange(50)}", round(rng.uniform(0, 5), 1)) for q in range(40) for _ in range(30)]
    lines = [" ".join([q, "Q0", d, "0", repr(s), "run"]) + "\n" for q, d, s in rows]
    grouped = write(tmp_path / "grouped", "".join(lines))
    rng.shuffle(lines)
    interleaved = write(tmp_path / "interleaved", "# shuffled\n" + "".join(lines))
    with pytest.raises(TopicCameBack):
        list(TrecRunRead(interleaved, block_bytes=500).topics(in_file_order=True))
    expected, grouped_read = topics(grouped, block_bytes=500)
    got, read = topics(interleaved, block_bytes=500)
    assert got == expected
    assert read.n_duplicates == grouped_read.n_duplicates > 0
    assert read.lines == grouped_read.lines + 1


@pytest.mark.parametrize("block_bytes", [1 << 20, 16], ids=["one block", "a block per line"])
def test_a_topic_that_comes_back_is_not_contiguous(tmp_path, block_bytes):
    path = write(tmp_path / "run", run_lines([("a", "x", 1.0), ("b", "y", 1.0), ("a", "z", 2.0)]))
    with pytest.raises(TopicCameBack):
        list(TrecRunRead(path, block_bytes=block_bytes).topics(in_file_order=True))
    ranked, _ = topics(path, block_bytes=block_bytes)
    assert ranked == {"a": [("z", 2.0), ("x", 1.0)], "b": [("y", 1.0)]}


def test_one_topic_longer_than_many_blocks(tmp_path):
    rows = [("big", f"d{i:04d}", float(i % 10)) for i in range(3000)] + [("small", "x", 1.0)]
    ranked, _ = topics(write(tmp_path / "run", run_lines(rows)), block_bytes=256)
    assert len(ranked["big"]) == 3000 and ranked["small"] == [("x", 1.0)]
    assert ranked["big"][:2] == [("d2999", 9.0), ("d2989", 9.0)]


def test_qrels_grade_negative_as_zero_and_a_repeated_judgment_takes_the_last(tmp_path):
    text = "1 0 a 2\n1 0 b -1\n\n# judged again below\n1 0 a 0\n2 0 c 1\n2\t0   d  3\r\n1 0 a 1\n"
    qrels = read_qrels(write(tmp_path / "qrels", text))
    assert qrels.rejects == []
    assert qrels.judged.rows() == [
        ("1", [{"card_id": "a", "grade": 1}, {"card_id": "b", "grade": 0}]),
        ("2", [{"card_id": "c", "grade": 1}, {"card_id": "d", "grade": 3}]),
    ]


def test_malformed_qrels_lines_are_named_by_line(tmp_path):
    text = "1 0 a 1\n1 0 b\n1 0 c 1 extra\n1 0 d 1.5\n1 0 e high\n1 0 f +2\n"
    qrels = read_qrels(write(tmp_path / "qrels", text), display_name="qrels.txt")
    assert qrels.judged.rows() == [("1", [{"card_id": "a", "grade": 1}, {"card_id": "f", "grade": 2}])]
    assert [r.describe() for r in qrels.rejects] == [
        "qrels.txt:2: expected 4 fields (qid iter docno rel), found 3",
        "qrels.txt:3: expected 4 fields (qid iter docno rel), found 5",
        "qrels.txt:4: relevance is not an integer: '1.5'",
        "qrels.txt:5: relevance is not an integer: 'high'",
    ]


def test_a_qrels_file_without_judgments_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="holds no judgments"):
        read_qrels(write(tmp_path / "qrels", "# nothing\n\n"))


def test_the_run_id_is_the_file_name_without_its_extension():
    assert run_id_of(Path("runs/bm25.run")) == "bm25"
    assert run_id_of(Path("bm25.run.gz")) == "bm25"
    assert run_id_of(Path("input.splade-v3.txt")) == "input.splade-v3"
    assert run_id_of(Path("run")) == "run"


TOKEN = st.text(alphabet="abcXYZ019-_.", min_size=1, max_size=4)
SEPARATOR = st.sampled_from([" ", "  ", "\t", " \t", "\t\t"])
SCORE = st.one_of(st.sampled_from(["1", "1.0", "2", "-0.5", "1e1", "nan", "x"]), st.floats(-5, 5).map(repr))


@st.composite
def run_texts(draw):
    """Run files with random separators, comments, blanks, short lines, bad scores, and
    topics that may come back."""
    lines = []
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["record"] * 6 + ["blank", "comment", "short"]))
        if kind == "blank":
            lines.append(draw(st.sampled_from(["", "  ", "\t"])))
        elif kind == "comment":
            lines.append(draw(st.sampled_from(["#", "# c d", "  #x"])))
        else:
            fields = [draw(st.sampled_from(["q1", "q2", "q3"])), "Q0", draw(TOKEN), "1", draw(SCORE), "t"]
            fields += draw(st.lists(TOKEN, max_size=2))
            if kind == "short":
                fields = fields[: draw(st.integers(1, 5))]
            seps = [draw(SEPARATOR) for _ in fields]
            lead = draw(st.sampled_from(["", "", " ", "\t"]))
            lines.append(lead + "".join(f + s for f, s in zip(fields, seps, strict=True)).rstrip(" \t")
                         + draw(st.sampled_from(["", " "])))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


def rules_by_hand(text: str):
    """The rules written line by line, as a second reading of the same file."""
    per_topic: dict[str, dict[str, float]] = {}
    dropped = 0
    rejected = []
    for number, line in enumerate(text.split("\n"), start=1):
        fields = [f for f in re.split(r"[ \t\n\v\f\r]+", line) if f]
        if not fields or fields[0].startswith("#"):
            continue
        try:
            score = float(fields[4]) if len(fields) >= 6 else None
        except ValueError:
            score = None
        if score is None or not math.isfinite(score):
            rejected.append(number)
            continue
        docs = per_topic.setdefault(fields[0], {})
        dropped += fields[2] in docs
        docs[fields[2]] = max(score, docs.get(fields[2], -math.inf))  # the first in ranking order is the best
    ranked = {
        qid: sorted(docs.items(), key=lambda item: (item[1], item[0].encode()), reverse=True)
        for qid, docs in per_topic.items()
    }
    return ranked, dropped, rejected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=run_texts(), block_bytes=st.sampled_from([8, 64, 1 << 20]))
def test_random_run_files_follow_the_rules(tmp_path, text, block_bytes):
    ranked, read = topics(write(tmp_path / "run", text), block_bytes=block_bytes)
    expected, dropped, rejected = rules_by_hand(text)
    assert ranked == expected
    assert [r.line for r in read.rejects] == rejected
    assert read.n_duplicates == dropped
    assert read.lines == text.count("\n") + (0 if text.endswith("\n") or not text else 1)


# ---------------------------------------------------------------- `run --trec-run` through the command

RULES_RUN = (
    "# a comment line, skipped\n"
    "q1 Q0 d10 1 1.0 bm25\n"
    "q1 Q0 d9 2 1.0 bm25\n"  # tied with d10: docno descending puts d9 first
    "q1 Q0 top 3 2.5 bm25\n"  # the rank column is not the ranking: 2.5 is the best score
    "\n"
    "q1 Q0 d10 4 0.1 bm25\n"  # d10 again, lower: dropped, its first occurrence in ranking order stands
    "q2 Q0 x 1 3 bm25\n"
    "q2 Q0 y 2 2 bm25\n"
    "q3 Q0 u 1 1 bm25\n"
)
RULES_QRELS = (
    "q1 0 d10 2\n"
    "q1 0 top 0\n"  # judged, not relevant: no gain
    "q2 0 y 1\n"
    "q3 0 u 0\n"  # q3 has no relevant document: no metric rows
    "q4 0 w 1\n"  # q4 is judged but not in the run: it retrieved nothing, scores 0 and counts
)


def test_run_trec_follows_the_reading_rules(tmp_path):
    run = write(tmp_path / "bm25.run", RULES_RUN)
    qrels = write(tmp_path / "qrels.txt", RULES_QRELS)
    os.utime(run, (1_795_600_000, 1_795_600_000))
    result = run_trec(tmp_path, run, qrels, "--ks", "1,2")
    assert result.returncode == 0, result.stderr
    warehouse = tmp_path / "warehouse"
    runs = view(warehouse, "runs").row(0, named=True)
    assert runs["run_id"] == "bm25" and runs["headline_k"] == 10 and runs["ks"] == [1, 2, 10]
    assert runs["created_at"] == "2026-11-25T09:46:40Z"  # the run file's mtime: 1_795_600_000 s = 20782 days + 9 h 46 min 40 s
    assert (runs["n_cases"], runs["n_labelled"], runs["n_rejected"]) == (4, 3, 0)
    retrieved = view(warehouse, "retrieved").sort("case_id", "rank")
    assert retrieved.select("case_id", "rank", "card_id", "score").rows() == [
        ("q1", 1, "top", 2.5), ("q1", 2, "d9", 1.0), ("q1", 3, "d10", 1.0),
        ("q2", 1, "x", 3.0), ("q2", 2, "y", 2.0),
        ("q3", 1, "u", 1.0),
    ]
    cases = {row["case_id"]: row for row in view(warehouse, "cases").iter_rows(named=True)}
    assert {c: (row["n_gold"], row["n_retrieved"]) for c, row in cases.items()} == {
        "q1": (1, 3), "q2": (1, 2), "q3": (0, 1), "q4": (1, 0)}
    assert {(c["locale"], c["category"]) for c in cases.values()} == {("und", "trec")}
    metrics = view(warehouse, "case_metrics").filter(pl.col("k") == 2).sort("case_id")
    # q1 at k=2: top (grade 0), d9 (unjudged): no hit; d10 (grade 2) is at rank 3.
    # q2 at k=2: y (grade 1) at rank 2: hit, recall 1, RR 1/2, precision 1/2,
    #            nDCG = (1 / log2(3)) / (1 / log2(2)) = 0.6309.
    # q4: retrieved nothing, scores 0; q3 has no row.
    assert metrics.select("case_id", "hit_at_k", "recall_at_k", "reciprocal_rank_at_k", "precision_at_k",
                          "first_relevant_rank").rows() == [
        ("q1", 0.0, 0.0, 0.0, 0.0, 3), ("q2", 1.0, 1.0, 0.5, 0.5, 2), ("q4", 0.0, 0.0, 0.0, 0.0, None)]
    assert metrics["ndcg_at_k"].to_list() == pytest.approx([0.0, 1 / math.log2(3), 0.0], abs=1e-12)


def test_malformed_lines_refuse_the_run_and_land_in_rejects(tmp_path):
    run = write(tmp_path / "bad.run", "q1 Q0 a 1 2 t\nq1 Q0 b 2 high t\nq1 Q0 c\nq2 Q0 d 1 1 t\n")
    qrels = write(tmp_path / "qrels", "q1 0 a 1\nq1 0 b one\nq2 0 d 1\n")
    refused = run_trec(tmp_path, run, qrels)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"{run}:2: score is not a number: 'high'" in refused.stderr
    assert f"{run}:3: expected 6 fields (qid Q0 docno rank score tag), found 3" in refused.stderr
    assert f"{qrels}:2: relevance is not an integer: 'one'" in refused.stderr
    assert "use --allow-rejects" in refused.stderr
    with reader(tmp_path / "warehouse") as con:  # nothing of the run is loaded but its rejects
        assert con.execute("select view_name from duckdb_views() where not internal").fetchall() == [("rejects",)]
        assert con.execute("select source_file, line, raw from rejects order by source_file, line").fetchall() == [
            (str(run), 2, "q1 Q0 b 2 high t"), (str(run), 3, "q1 Q0 c"), (str(qrels), 2, "q1 0 b one")]

    loaded = run_trec(tmp_path, run, qrels, "--allow-rejects")
    assert loaded.returncode == 0, loaded.stderr
    with reader(tmp_path / "warehouse") as con:
        assert con.execute("select n_cases, n_labelled, n_rejected from runs").fetchone() == (2, 2, 3)
        assert con.execute("select count(*) from rejects").fetchone() == (3,)
        assert con.execute("select case_id, hit_at_k from case_metrics where k = 10 order by case_id").fetchall() == [
            ("q1", 1.0), ("q2", 1.0)]


@pytest.mark.parametrize("args, message", [
    (("--trec-run", "{run}"), "--trec-run needs --qrels FILE"),
    (("--qrels", "{qrels}"), "--qrels is only for --trec-run FILE"),
    (("--qrels", "{qrels}", "--run-id", "x"), "--qrels and --run-id are only for --trec-run FILE"),
    (("{runs}", "--trec-run", "{run}", "--qrels", "{qrels}"), "give either RUNS"),
    (("--trec-run", "{tmp}/missing.run", "--qrels", "{qrels}"), "missing.run: no such file (--trec-run)"),
    (("--trec-run", "{run}", "--qrels", "{tmp}/nope"), "nope: no such file (--qrels)"),
    (("--trec-run", "{run}", "--qrels", "{qrels}", "--run-id", "a/b"), "--run-id: run id 'a/b' is not a safe name"),
    (("--trec-run", "{odd}", "--qrels", "{qrels}"), "is not a safe name ([A-Za-z0-9._-]+); give one with --run-id"),
    (("--trec-run", "{empty}", "--qrels", "{qrels}"), "holds no run lines"),
])
def test_bad_trec_arguments_are_usage_errors(tmp_path, args, message):
    paths = {"run": write(tmp_path / "r.run", "q Q0 a 1 1 t\n"), "qrels": write(tmp_path / "q", "q 0 a 1\n"),
             "odd": write(tmp_path / "my run.txt", "q Q0 a 1 1 t\n"), "empty": write(tmp_path / "empty.run", "# no lines\n"),
             "runs": SAMPLE_RUNS, "tmp": tmp_path}
    result = cli("run", *(arg.format(**paths) for arg in args), "--warehouse", str(tmp_path / "wh"), "--quiet")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_the_evaluation_key_covers_both_files(tmp_path):
    run = write(tmp_path / "r.run", "q Q0 a 1 2 t\nq Q0 b 2 1 t\n")
    qrels = write(tmp_path / "qrels", "q 0 a 1\n")
    options = job_options(tmp_path / "no-runs", tmp_path / "warehouse", trec_run=run, qrels=qrels, k=2)
    first = evaluate(options).outcomes[0]
    assert isinstance(first, Loaded)
    assert isinstance(evaluate(options).outcomes[0], Reused)  # neither file changed
    os.utime(qrels, ns=(qrels.stat().st_atime_ns, qrels.stat().st_mtime_ns))  # a new ctime, the same bytes
    again = evaluate(options).outcomes[0]
    assert isinstance(again, Reused) and again.why == "same bytes"
    write(qrels, "q 0 b 1\n")  # only the qrels change: b is at rank 2
    changed = evaluate(options).outcomes[0]
    assert isinstance(changed, Loaded) and changed.commit.evaluation_key != first.commit.evaluation_key
    assert view(tmp_path / "warehouse", "case_metrics")["reciprocal_rank_at_k"].to_list() == [0.5]


# ---------------------------------------------------------------- against trec_eval, through the job


def random_trec_files(rng: random.Random, n_topics: int):
    """A duplicate-free run with many score ties and graded qrels: topics without any
    relevant document, topics only in the run and topics only in the qrels."""
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for t in range(n_topics):
        qid = str(t)
        pool = list(dict.fromkeys(f"D{rng.randrange(10**6):x}" for _ in range(40)))
        if t % 23 != 0:  # every 23rd topic is only in the qrels
            docs = rng.sample(pool, rng.randint(1, 25))
            run[qid] = {d: float(rng.choice([0.5, 1.0, 1.5, 2.0, rng.uniform(-3, 3)])) for d in docs}
        if t % 17 != 0:  # every 17th topic is only in the run
            no_relevant = t % 11 == 0
            qrels[qid] = {d: 0 if no_relevant else rng.choice([0, 0, 1, 2, 3]) for d in rng.sample(pool, rng.randint(1, 12))}
    return run, qrels


def write_trec_files(tmp_path: Path, run, qrels, rng: random.Random, order: str) -> tuple[Path, Path]:
    lines = []
    for qid, docs in run.items():
        items = list(docs.items())
        rng.shuffle(items)  # file order is not rank order
        lines += [rng.choice([" ", " ", "\t", "  "]).join([qid, "Q0", d, str(i), repr(s), "rnd"]) + "\n"
                  for i, (d, s) in enumerate(items)]
    if order == "shuffled":
        rng.shuffle(lines)
    elif order == "one topic back at the end":
        lines.append(lines.pop(0))
    run_path = write(tmp_path / "rnd.run", "".join(lines))
    qrels_path = write(tmp_path / "qrels", "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    return run_path, qrels_path


@pytest.mark.parametrize("order", ["grouped", "one topic back at the end", "shuffled"])
def test_agrees_with_trec_eval_on_random_topics(tmp_path, monkeypatch, order):
    rng = random.Random(20261201)
    run, qrels = random_trec_files(rng, 2000)
    run_path, qrels_path = write_trec_files(tmp_path, run, qrels, rng, order)
    # Small blocks and batches: many of them, and where a topic comes back at the end, a
    # first attempt whose batches are dropped once the file is read again in topic order.
    monkeypatch.setattr(trec_files, "BLOCK_BYTES", 1 << 14)
    evaluate(job_options(tmp_path / "no-runs", tmp_path / "warehouse", trec_run=run_path, qrels=qrels_path,
                         k=KS[0], ks=KS, batch_items=5_000))
    ours = view(tmp_path / "warehouse", "case_metrics")
    measures = {f"{name}.{','.join(map(str, KS))}" for name in TREC_NAMES}
    reference = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    relevant = {q for q, docs in qrels.items() if max(docs.values()) >= 1}
    # A topic without a relevant document has no rows in ours (trec_eval scores it 0).
    assert set(ours["case_id"]) == relevant
    rows = {(r["case_id"], r["k"]): r for r in ours.iter_rows(named=True)}
    compared = 0
    for qid in relevant:
        for k in KS:
            mine = rows[(qid, k)]
            if qid not in run:  # judged, not in the run: trec_eval -c scores it 0, as we do
                assert all(mine[m] == 0.0 for m in TREC_NAMES.values())
                continue
            for trec_name, name in TREC_NAMES.items():
                assert mine[name] == pytest.approx(reference[qid][f"{trec_name}_{k}"], abs=1e-9), (qid, k, name)
                compared += 1
    assert compared > 1500 * len(KS) * len(TREC_NAMES)
    # trec_eval's recip_rank has no cutoff: with -M k it sees the first k of its ranking.
    for k in KS:
        cut = {q: dict(sorted(docs.items(), key=lambda d: (d[1], d[0].encode()), reverse=True)[:k]) for q, docs in run.items()}
        rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
        for qid in relevant & set(run):
            assert rows[(qid, k)]["reciprocal_rank_at_k"] == pytest.approx(rr[qid]["recip_rank"], abs=1e-9), (qid, k)
    # The fixture is not degenerate: ties, and hits as well as misses.
    assert sum(len(set(d.values())) < len(d) for d in run.values()) > 500
    assert 0.05 < ours.filter(pl.col("k") == 3)["hit_at_k"].mean() < 0.95


# ---------------------------------------------------------------- export, and back


@pytest.fixture(scope="module")
def sample_warehouse(tmp_path_factory) -> Path:
    """The committed sample through `retrieval-eval run`, with a k sweep."""
    root = tmp_path_factory.mktemp("sample")
    result = cli("run", str(SAMPLE_RUNS), "--ks", "1,2,3", "--warehouse", str(root / "warehouse"),
                 "--report-dir", str(root / "report"), "--quiet")
    assert result.returncode == 0, result.stderr
    return root / "warehouse"


def gold_qrels(warehouse: Path, run_id: str, path: Path) -> Path:
    """Qrels of a run's gold (grade 1 each), from its `cases` rows."""
    gold = view(warehouse, "cases").filter(pl.col("run_id") == run_id).select("case_id", "gold").explode("gold")
    return write(path, "".join(f"{case_id} 0 {card} 1\n" for case_id, card in gold.drop_nulls().iter_rows()))


def parse_run_file(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        qid, _, docno, _, score, _ = line.split(" ")
        assert docno not in run.setdefault(qid, {}), "a docno twice in a topic"
        run[qid][docno] = float(score)
    return run


@pytest.mark.parametrize("run_id", SAMPLE_RUN_IDS)
def test_export_trec_run_and_back_gives_the_same_case_metrics(sample_warehouse, tmp_path, run_id):
    exported = tmp_path / f"{run_id}.run"
    result = cli("export", run_id, "--format", "trec-run", "--out", str(exported), "--warehouse", str(sample_warehouse))
    assert result.returncode == 0, result.stderr
    qrels = gold_qrels(sample_warehouse, run_id, tmp_path / "qrels")
    back = run_trec(tmp_path, exported, qrels, "--run-id", "back", "--k", "4", "--ks", "1,2,3")
    assert back.returncode == 0, back.stderr
    original = view(sample_warehouse, "case_metrics").filter(pl.col("run_id") == run_id).select(METRIC_COLUMNS)
    again = view(tmp_path / "warehouse", "case_metrics").select(METRIC_COLUMNS)
    assert again.sort("case_id", "k").equals(original.sort("case_id", "k"))
    assert original.height == 240 * 4


@pytest.mark.parametrize("run_id", SAMPLE_RUN_IDS)
def test_export_trec_eval_agrees_with_trec_eval_on_the_same_ranking(sample_warehouse, tmp_path, run_id):
    run_file, figures = tmp_path / "run", tmp_path / "figures"
    for fmt, out in (("trec-run", run_file), ("trec-eval", figures)):
        result = cli("export", run_id, "--format", fmt, "--out", str(out), "--warehouse", str(sample_warehouse))
        assert result.returncode == 0, result.stderr
    run = parse_run_file(run_file)
    qrels = {}
    for line in gold_qrels(sample_warehouse, run_id, tmp_path / "qrels").read_text().splitlines():
        qid, _, docno, _ = line.split()
        qrels.setdefault(qid, {})[docno] = 1
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"success.4", "recall.4", "P.4", "ndcg_cut.4"}).evaluate(run)
    cut = {q: dict(sorted(docs.items(), key=lambda d: (d[1], d[0].encode()), reverse=True)[:4]) for q, docs in run.items()}
    for qid, values in pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut).items():
        reference[qid]["recip_rank_4"] = values["recip_rank"]  # our name for trec_eval -M 4 recip_rank
    lines = [line.split("\t") for line in figures.read_text().splitlines()]
    assert all(len(name) == 22 for name, _, _ in lines)
    per_topic = {(name.strip(), topic): float(value) for name, topic, value in lines if topic != "all"}
    summary = {name.strip(): value for name, topic, value in lines if topic == "all"}
    assert summary["runid"] == run_id and int(summary["num_q"]) == len(qrels) == 240
    for qid in qrels:
        for name in ("success_4", "recall_4", "P_4", "ndcg_cut_4", "recip_rank_4"):
            expected = reference[qid][name] if qid in reference else 0.0  # not in the run: trec_eval -c's 0
            assert per_topic[(name, qid)] == pytest.approx(expected, abs=1e-4), (qid, name)
    for name in ("success_4", "recall_4", "P_4", "ndcg_cut_4", "recip_rank_4"):
        mean = sum(reference[q][name] if q in reference else 0.0 for q in qrels) / len(qrels)
        assert float(summary[name]) == pytest.approx(mean, abs=1e-4)
    # In trec_eval's order within a topic; topics in byte order of their ids.
    first_topic = [name.strip() for name, topic, _ in lines if topic == lines[0][1]]
    assert first_topic == ["recip_rank_4", "P_4", "recall_4", "ndcg_cut_4", "success_4"]
    topics_in_order = list(dict.fromkeys(topic for _, topic, _ in lines if topic != "all"))
    assert topics_in_order == sorted(topics_in_order, key=str.encode)


def test_export_case_metrics_as_csv_and_parquet(sample_warehouse, tmp_path):
    run_id = SAMPLE_RUN_IDS[0]
    expected = view(sample_warehouse, "case_metrics").filter(pl.col("run_id") == run_id).drop("gains_at_k").sort("case_id", "k")
    as_csv = cli("export", run_id, "--format", "csv", "--warehouse", str(sample_warehouse))  # stdout
    assert as_csv.returncode == 0, as_csv.stderr
    from io import StringIO

    got = pl.read_csv(StringIO(as_csv.stdout), schema=expected.schema)
    assert got.equals(expected) and got.height == 240 * 4
    at_k = cli("export", run_id, "--format", "parquet", "--k", "2", "--out", str(tmp_path / "m.parquet"),
               "--warehouse", str(sample_warehouse))
    assert at_k.returncode == 0, at_k.stderr
    assert pl.read_parquet(tmp_path / "m.parquet").equals(expected.filter(pl.col("k") == 2))
    assert not list(tmp_path.glob(".*partial"))


@pytest.mark.parametrize("run_id, args, message", [
    (SAMPLE_RUN_IDS[0], ("--format", "parquet"), "export --format parquet writes a file: give --out FILE"),
    (SAMPLE_RUN_IDS[0], ("--format", "trec-eval", "--k", "7"), "has case metrics at k in [1, 2, 3, 4], not at --k 7"),
    ("nope", ("--format", "trec-run"), "export: run 'nope' is not in"),
    (SAMPLE_RUN_IDS[0], ("--format", "trec"), "invalid choice: 'trec'"),
])
def test_bad_export_arguments_are_usage_errors(sample_warehouse, run_id, args, message):
    result = cli("export", run_id, *args, "--warehouse", str(sample_warehouse))
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_trec_run_score_rule_and_ids_a_run_file_cannot_hold(tmp_path):
    runs = tmp_path / "runs"
    # a: scores strictly fall with rank: kept. b: a tie, c: a missing score, d: chunks of one
    # card (the card's score is its first chunk's) and a rise: written as n - rank + 1.
    write_run(runs, "run-a", [
        case("a", [chunk("x", score=0.9), chunk("y", score=0.5)], ["x"]),
        case("b", [chunk("x", score=0.5), chunk("y", score=0.5)], ["y"]),
        case("c", [chunk("x", score=0.5), chunk("y")], ["y"]),
        case("d", [chunk("d::0", "d", 0.2), chunk("d::1", "d", 0.9), chunk("e", score=0.3)], ["e"]),
        case("e", [], ["x"]),
    ])
    evaluate(job_options(runs, tmp_path / "warehouse"))
    result = cli("export", "run-a", "--format", "trec-run", "--warehouse", str(tmp_path / "warehouse"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "a Q0 x 1 0.9 run-a", "a Q0 y 2 0.5 run-a",
        "b Q0 x 1 2.0 run-a", "b Q0 y 2 1.0 run-a",
        "c Q0 x 1 2.0 run-a", "c Q0 y 2 1.0 run-a",
        "d Q0 d 1 2.0 run-a", "d Q0 e 2 1.0 run-a",
    ]  # e retrieved nothing: no line (trec_eval -c scores it 0)
    write_run(runs, "run-b", [case("has space", [chunk("x")], ["x"])])
    evaluate(job_options(runs / "run-b", tmp_path / "warehouse"))
    refused = cli("export", "run-b", "--format", "trec-run", "--warehouse", str(tmp_path / "warehouse"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "run run-b cannot be a TREC run file: case id 'has space'" in refused.stderr
    # trec_eval -q lines are `measure<TAB>topic<TAB>value`: a topic holding whitespace would
    # split into more fields (a tab) or read as two words (a space)
    refused = cli("export", "run-b", "--format", "trec-eval", "--warehouse", str(tmp_path / "warehouse"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and refused.stdout == ""
    assert "run run-b cannot be written in trec_eval's -q layout: case id 'has space' (whitespace" in refused.stderr
