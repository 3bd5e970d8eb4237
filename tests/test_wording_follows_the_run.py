"""The report, the gate and the TREC files say what is true of the run they describe (issue
32, items 5 and 19): a miss → hit flip is worded as the reference's miss; a TREC run's `runid`
is its tag column, as trec_eval takes it; "recall is a lower bound" is said only where gold is
disjunctive (`must_cite_one_of`), never for qrels, graded gold or `relevant_ids`, which list
every relevant card."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from builders import cli, reader
from retrieval_eval.transforms.report import CI_NOTE, LOCALE_CAVEAT, RECALL_CAVEAT, report_notes

REPO = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def trec_run(tmp_path):
    """A TREC run `bm25.run` whose lines carry the tag `first-tag` and then, on the last
    line, `last-tag` (trec_eval prints the last line's tag as runid), evaluated with --quiet."""
    run = write(tmp_path / "bm25.run",
                "q1 Q0 d1 1 3.0 first-tag\n"
                "q1 Q0 d2 2 2.0 first-tag\n"
                "q2 Q0 d3 1 1.5 first-tag\n"
                "q2 Q0 d4 2 0.5 last-tag extra-field\n")
    qrels = write(tmp_path / "qrels.txt", "q1 0 d2 1\nq2 0 d9 1\n")
    result = cli("run", "--trec-run", str(run), "--qrels", str(qrels), "--warehouse", str(tmp_path / "wh"),
                 "--report-dir", str(tmp_path / "rep"), "--quiet")
    assert result.returncode == 0, result.stderr
    return tmp_path


def test_a_trec_runs_runid_is_the_tag_of_its_last_line(trec_run):
    warehouse = trec_run / "wh"
    with reader(warehouse) as con:
        config = json.loads(con.execute("select config from runs where run_id = 'bm25'").fetchone()[0])
    assert config["tag"] == "last-tag"  # the sixth field only: what follows it is not the tag
    figures = cli("export", "bm25", "--format", "trec-eval", "--warehouse", str(warehouse))
    assert figures.returncode == 0, figures.stderr
    summary = {name.strip(): value for name, topic, value in (line.split("\t") for line in figures.stdout.splitlines())
               if topic == "all"}
    assert summary["runid"] == "last-tag"
    ranking = cli("export", "bm25", "--format", "trec-run", "--warehouse", str(warehouse))
    assert ranking.returncode == 0, ranking.stderr
    assert {line.split()[5] for line in ranking.stdout.splitlines()} == {"last-tag"}


def test_a_run_without_a_tag_is_named_by_its_run_id_in_trec_files(sample_copy, tmp_path):
    warehouse = tmp_path / "wh"
    run_id = "2026-11-16-hybrid-rerank"
    result = cli("run", str(sample_copy / "runs" / run_id), "--kb", str(sample_copy / "kb" / "cards.jsonl"),
                 "--warehouse", str(warehouse), "--report-dir", str(tmp_path / "rep"), "--quiet")
    assert result.returncode == 0, result.stderr
    figures = cli("export", run_id, "--format", "trec-eval", "--warehouse", str(warehouse))
    assert f"runid                 \tall\t{run_id}" in figures.stdout.splitlines()


def test_the_recall_caveat_is_said_only_where_gold_is_disjunctive():
    def notes(*sources: str) -> tuple[str, ...]:
        return report_notes(pl.Series("gold_source", sources, pl.String))

    assert notes("must_cite_one_of", "must_cite_one_of") == (RECALL_CAVEAT, LOCALE_CAVEAT, CI_NOTE)
    assert notes("relevance", "relevance") == (LOCALE_CAVEAT, CI_NOTE)  # graded gold, and every TREC qrels
    assert notes("relevant_ids") == (LOCALE_CAVEAT, CI_NOTE)
    assert notes() == (LOCALE_CAVEAT, CI_NOTE)  # nothing labelled: nothing to caveat
    mixed = notes("must_cite_one_of", "relevant_ids", "relevance")
    assert mixed[0] == "For the 1 of 3 labelled cases whose gold is must_cite_one_of, " + RECALL_CAVEAT
    assert mixed[1:] == (LOCALE_CAVEAT, CI_NOTE)


def test_a_trec_runs_report_does_not_call_recall_a_lower_bound(trec_run):
    for name in ("report.md", "report.html"):
        text = (trec_run / "rep" / name).read_text(encoding="utf-8")
        assert "disjunctive" not in text and "lower bound" not in text, name


def test_the_samples_report_keeps_the_recall_caveat(sample_copy, tmp_path):
    result = cli("run", str(sample_copy / "runs"), "--kb", str(sample_copy / "kb" / "cards.jsonl"),
                 "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"), "--quiet")
    assert result.returncode == 0, result.stderr
    assert "recall@k is a lower bound: gold is disjunctive" in (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")


def test_the_gate_words_a_miss_to_hit_flip_as_the_baselines_miss(sample_copy, tmp_path):
    # In the sample, es-419-expanded_domain-025 retrieved no gold card in the baseline's run
    # and a gold card within k = 4 in the regression run: the reason is the baseline's miss.
    warehouse = tmp_path / "wh"
    result = cli("run", str(sample_copy / "runs"), "--kb", str(sample_copy / "kb" / "cards.jsonl"),
                 "--warehouse", str(warehouse), "--report-dir", str(tmp_path / "rep"), "--quiet")
    assert result.returncode == 0, result.stderr
    gate = cli("gate", "2026-11-23-hybrid-rerank-ptbr-regression", "--warehouse", str(warehouse),
               "--baseline", str(REPO / "data" / "baselines" / "baseline.json"), "--decision", "significant")
    assert gate.returncode == 1, gate.stderr
    lines = gate.stdout.splitlines()
    after = lines[lines.index("1 case(s) flipped miss → hit:") + 1]
    assert after == "  es-419-expanded_domain-025 (es-419, expanded_domain): the baseline missed: not_retrieved"
    assert "  pt-BR-golden-003 (pt-BR, golden): below_k, now first at rank 5" in lines
    # a p below what three decimals show reads as a bound, not as "p <0.001"
    assert ("  - ndcg_at_k on locale=pt-BR: 0.415 < 0.535 − 0.08, and p < 0.001 < 0.05 (Holm over the 12 gated lines)"
            in lines)
