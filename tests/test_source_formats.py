"""Each format reader of SPEC 15 (flows/sources/formats/) on a fixture in the tool's own
shape (tests/fixtures/sources/, README there cites the tool's code): the cases expected by
hand from the fixture, one bad record rejected under its origin while the others are read,
the identity counts, and the rules every format shares (row-N, und and the format's name,
qrels-only queries, --qrels required where the input holds no gold)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from retrieval_eval.flows.sources.format_sources import FORMAT_SOURCES
from retrieval_eval.flows.sources.formats import READERS
from retrieval_eval.flows.sources.formats.input_rows import PARQUET_BATCH_ROWS
from retrieval_eval.flows.sources.formats.identity import content_id
from retrieval_eval.flows.sources.formats.record import IdentityCounts
from retrieval_eval.transforms.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "sources"


def read(format_name: str, name: str, qrels: str | None = None, folder: Path = FIXTURES):
    records = list(READERS[format_name](folder / name, qrels=FIXTURES / qrels if qrels else None))
    cases = {record.case["case_id"]: record for record in records if record.case is not None}
    rejects = {record.origin.removeprefix(str(FIXTURES) + "/"): record.reject for record in records if record.reject}
    return cases, rejects


def ranking(record) -> list[str]:
    return [item["id"] for item in record.case["retrieved_context"]]


def test_beir_ranks_by_score_then_doc_id_descending_and_counts_qrels_only_queries():
    cases, rejects = read("beir", "beir/results.json", "beir/qrels.tsv")
    assert ranking(cases["q1"]) == ["d1", "d3", "d2"]  # d3 and d2 tie at 0.5: d3 first
    assert cases["q1"].case["relevance"] == {"d3": 1, "d9": 2}
    assert ranking(cases["q2"]) == ["d4", "d5"] and cases["q2"].case["relevance"] == {"d5": 1}
    assert ranking(cases["q3"]) == [] and "relevance" not in cases["q3"].case  # unjudged: unlabelled
    assert cases["q4"].case["retrieved_context"] == [] and cases["q4"].case["relevance"] == {"d1": 1}
    assert (cases["q1"].case["locale"], cases["q1"].case["category"]) == ("und", "beir")
    assert cases["q1"].retrieved_by == IdentityCounts(id=3) and cases["q1"].gold_by == IdentityCounts(id=2)
    assert rejects == {"beir/results.json:row 4": "query 'qbad': the score of doc 'd1' is not a finite number",
                       "beir/qrels.tsv:line 6": "score 'one' is not an integer grade"}


@pytest.mark.parametrize(("run", "qrels", "bad_origin"), [
    ("ranx/run.json", "ranx/qrels.json", "ranx/run.json:row 3"),
    ("ranx/run.trec", "ranx/qrels.trec", "ranx/run.trec:line 6"),
])
def test_ranx_json_and_trec_runs_give_the_same_cases(run, qrels, bad_origin):
    cases, rejects = read("ranx", run, qrels)
    assert ranking(cases["q1"]) == ["d3", "d1", "d2"]
    assert ranking(cases["q2"]) == ["d8", "d7"]  # a tie at 0.5: doc id descending
    assert cases["q1"].case["relevance"] == {"d1": 2, "d2": 1}
    assert cases["q9"].case["retrieved_context"] == [] and cases["q9"].case["relevance"] == {"d1": 1}
    assert set(cases) == {"q1", "q2", "q9"}
    assert list(rejects) == [bad_origin]


def test_ragas_jsonl_reads_ids_beside_texts_and_the_older_names():
    cases, rejects = read("ragas", "ragas/dataset.jsonl")
    paris = cases["row-1"]
    assert ranking(paris) == [content_id("Paris is in France."), content_id("Lyon is in France.")]
    assert paris.case["must_cite_one_of"] == [content_id("Paris is in France.")]  # "Paris  is in\tFrance.\n"
    assert paris.case["question"] == "Where is Paris?"
    assert paris.case["retrieved_context"][0]["text"] == "Paris is in France."
    assert paris.retrieved_by == IdentityCounts(content=2) and paris.gold_by == IdentityCounts(content=1)
    by_id = cases["7"]  # the `id` column, an integer, as text
    assert ranking(by_id) == ["c1", "2"] and by_id.case["must_cite_one_of"] == ["2"]
    assert by_id.retrieved_by == IdentityCounts(id=2)
    old = cases["row-4"]  # question / contexts / ground_truths; locale and category of the row
    assert old.case["question"] == "Old names?"
    assert old.case["must_cite_one_of"] == [content_id("Old text two")]
    assert (old.case["locale"], old.case["category"]) == ("pt-BR", "golden")
    assert rejects == {"ragas/dataset.jsonl:line 3": "field retrieved_context_ids has 1 entries and retrieved_contexts 2"}
    assert "row-3" not in cases  # the rejected record still counts in row-N


def test_ragas_csv_list_cells_are_python_literals():
    cases, rejects = read("ragas", "ragas/dataset.csv")
    assert ranking(cases["row-1"]) == [content_id("Paris is in France."), content_id("Lyon's centre is old.")]
    assert cases["row-1"].case["must_cite_one_of"] == [content_id("Paris is in France.")]
    assert "must_cite_one_of" not in cases["row-3"].case  # an empty reference cell: unlabelled
    assert rejects == {"ragas/dataset.csv:row 2": "column retrieved_contexts: not a list (a Python literal or JSON)"}


def test_ragas_parquet_is_read_in_row_batches(tmp_path, monkeypatch):
    rows = [{"user_input": "q", "retrieved_contexts": ["x", "y"], "reference_contexts": ["y"]}] * 1500
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "dataset.parquet", row_group_size=500)
    batches: list[int] = []
    iter_batches = pq.ParquetFile.iter_batches

    def counted(self, *args, **kwargs):  # the real iter_batches, each batch's row count noted
        for batch in iter_batches(self, *args, **kwargs):
            batches.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted)
    cases, rejects = read("ragas", "dataset.parquet", folder=tmp_path)
    assert len(cases) == 1500 and not rejects
    # Never the whole file at once: batches of at most PARQUET_BATCH_ROWS (1024) rows, within
    # row groups of 500 rows.
    assert len(batches) > 1 and max(batches) <= PARQUET_BATCH_ROWS and sum(batches) == 1500
    assert ranking(cases["row-1500"]) == [content_id("x"), content_id("y")]


def test_mlflow_log_table_identifies_by_doc_uri_else_content():
    cases, rejects = read("mlflow", "mlflow/eval_results_table.json")
    assert ranking(cases["r1"]) == ["docs/a.md", "docs/b.md"] and cases["r1"].case["must_cite_one_of"] == ["docs/b.md"]
    assert cases["r1"].retrieved_by == IdentityCounts(metadata=2) and cases["r1"].gold_by == IdentityCounts(metadata=1)
    assert cases["r2"].case["must_cite_one_of"] == [ranking(cases["r2"])[0]]  # "Same\u00a0 text" is "Same text"
    assert cases["r2"].retrieved_by == IdentityCounts(content=2)
    assert ranking(cases["row-4"]) == ["id-1", "id-2"] and cases["row-4"].retrieved_by == IdentityCounts(id=2)
    assert cases["r1"].case["question"] == "What is MLflow?"
    assert rejects == {"mlflow/eval_results_table.json:row 3": "field retrieved_context must be a list"}


def test_deepeval_test_run_cases_are_identified_by_content():
    cases, rejects = read("deepeval", "deepeval/latest_test_run.json")
    alpha = cases["test_case_0"]
    assert ranking(alpha) == [content_id("Alpha is first."), content_id("Beta is second.")]
    assert alpha.case["must_cite_one_of"] == [content_id("Beta is second.")]
    assert alpha.case["question"] == "What is alpha?"
    assert cases["row-3"].case["must_cite_one_of"] == [content_id("Epsilon.")]  # a text no chunk matches: a miss
    assert rejects == {"deepeval/latest_test_run.json:row 2": "retrievalContext[1] has no id and no text to identify it by"}


def test_openinference_reads_retriever_spans_nested_and_flattened():
    cases, rejects = read("openinference", "openinference/spans.jsonl", "openinference/qrels.jsonl")
    assert set(cases) == {"c1", "t2", "c3"}  # the LLM span is no case; c3 is only in the qrels
    assert ranking(cases["c1"]) == ["d1", "d2"] and cases["c1"].case["must_cite_one_of"] == ["d2"]
    assert [item["score"] for item in cases["c1"].case["retrieved_context"]] == [0.9, 0.4]
    flat = cases["t2"]  # the trace id, no metadata.case_id
    assert ranking(flat) == [content_id("Some text"), "kb/7"] and flat.case["relevant_ids"] == ["kb/7"]
    assert flat.retrieved_by == IdentityCounts(metadata=1, content=1)
    assert cases["c3"].case["retrieved_context"] == []
    assert set(rejects) == {"openinference/spans.jsonl:line 4", "openinference/spans.jsonl:line 5"}
    assert rejects["openinference/spans.jsonl:line 4"].startswith("a RETRIEVER span with no metadata.case_id")


def test_openinference_parquet_in_phoenix_dataframe_columns(tmp_path):
    documents = [{"document.id": "a", "document.score": 2.0, "document.content": "A.", "document.metadata": None},
                 {"document.id": None, "document.score": 1.0, "document.content": "B  text", "document.metadata": None}]
    table = pa.table({
        "context.trace_id": ["t1", "t2"],
        "span_kind": ["RETRIEVER", "LLM"],
        "attributes.input.value": ["Q?", "Q?"],
        "attributes.retrieval.documents": [documents, None],
    })
    pq.write_table(table, tmp_path / "spans.parquet")
    (tmp_path / "qrels.trec").write_text("t1 0 a 1\n")
    records = list(READERS["openinference"](tmp_path / "spans.parquet", qrels=tmp_path / "qrels.trec"))
    assert [record.origin for record in records] == [f"{tmp_path}/spans.parquet:row 1"]
    assert ranking(records[0]) == ["a", content_id("B text")]
    assert records[0].case["relevance"] == {"a": 1} and records[0].case["question"] == "Q?"


@pytest.mark.parametrize(("format_name", "name"), [
    ("openinference", "openinference/spans.jsonl"), ("beir", "beir/results.json"), ("ranx", "ranx/run.json")])
def test_a_format_without_gold_needs_qrels(format_name, name):
    # The rule is the source's (format_sources.py `needs_qrels`), checked before any reading.
    with pytest.raises(InputError, match=f"^{FIXTURES / name}: a {format_name} input holds no gold: .*--qrels"):
        FORMAT_SOURCES[format_name](FIXTURES / name, top_k=10)
    (with_gold,) = FORMAT_SOURCES["ragas"](FIXTURES / "ragas/dataset.jsonl", top_k=10)
    assert with_gold.qrels is None


def test_qrels_given_to_a_format_with_gold_replace_its_gold(tmp_path):
    qrels = tmp_path / "gold.jsonl"
    qrels.write_text(json.dumps({"case_id": "r1", "must_cite_one_of": ["docs/a.md"]}) + "\n")
    cases, _ = read("mlflow", "mlflow/eval_results_table.json")
    records = list(READERS["mlflow"](FIXTURES / "mlflow/eval_results_table.json", qrels=qrels))
    replaced = {record.case["case_id"]: record.case for record in records if record.case}
    assert replaced["r1"]["must_cite_one_of"] == ["docs/a.md"]
    assert "must_cite_one_of" not in replaced["r2"]  # not judged by the qrels: unlabelled
    assert set(replaced) == set(cases)


def test_an_input_of_another_kind_is_bad_input(tmp_path):
    (tmp_path / "export.xlsx").write_text("x")
    with pytest.raises(InputError, match="export.xlsx"):
        list(READERS["ragas"](tmp_path / "export.xlsx", qrels=None))
    with pytest.raises(InputError, match="no such file"):
        list(READERS["deepeval"](tmp_path / "missing.json", qrels=None))
