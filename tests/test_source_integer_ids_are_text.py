"""An integer id equals its decimal string (SPEC 15 "Ids are text"), in every id field of
every format: the JSONL gold of --qrels (`case_id`, the entries of `relevant_ids` and
`must_cite_one_of`), ragas `case_id` / `id` and `*_context_ids`, MLflow `request_id` and ids
in its context lists, DeepEval `name`, OpenInference `metadata.case_id` and document ids. (BEIR
and ranx ids are JSON object keys, text by JSON's grammar.) So gold written `[7]` matches an
item retrieved as `"7"` or `7`, and a case `42` is judged by the gold line of case `42`."""

from __future__ import annotations

import json

import retrieval_eval
from retrieval_eval.flows.sources.formats import READERS


def write_lines(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def cases_of(records) -> dict[str, dict]:
    found = {}
    for record in records:
        assert record.reject is None, (record.origin, record.reject)
        found[record.case["case_id"]] = record.case
    return found


def hits(cases: dict[str, dict]) -> dict[str, float]:
    metrics = retrieval_eval.evaluate(list(cases.values()), k=10).case_metrics.filter(k=10)
    return {row["case_id"]: row["hit_at_k"] for row in metrics.iter_rows(named=True)}


def test_jsonl_gold_with_integer_case_id_and_ids_judges_the_case_of_that_decimal_string(tmp_path):
    span = {"context": {"trace_id": "t1"}, "attributes": {
        "openinference.span.kind": "RETRIEVER", "metadata": json.dumps({"case_id": 42}),
        "retrieval": {"documents": [{"document": {"id": 3}}, {"document": {"id": 7}}]}}}
    spans = write_lines(tmp_path / "spans.jsonl", [span])
    gold = write_lines(tmp_path / "gold.jsonl", [{"case_id": 42, "relevant_ids": [7]},
                                                 {"case_id": 43, "must_cite_one_of": [8, "x"]}])
    cases = cases_of(READERS["openinference"](spans, qrels=gold))
    assert cases["42"]["relevant_ids"] == ["7"]
    assert [item["id"] for item in cases["42"]["retrieved_context"]] == ["3", "7"]
    assert cases["43"]["must_cite_one_of"] == ["8", "x"] and cases["43"]["retrieved_context"] == []
    assert hits(cases) == {"42": 1.0, "43": 0.0}  # 7 at rank 2; 43 only in the gold file


def test_ragas_mlflow_and_deepeval_integer_ids(tmp_path):
    ragas = write_lines(tmp_path / "ragas.jsonl", [
        {"case_id": 5, "user_input": "q", "retrieved_context_ids": [1, 2], "reference_context_ids": [2]},
        {"id": 6, "user_input": "q", "retrieved_context_ids": ["1"], "reference_context_ids": [1]}])
    cases = cases_of(READERS["ragas"](ragas, qrels=None))
    assert {case_id: case["must_cite_one_of"] for case_id, case in cases.items()} == {"5": ["2"], "6": ["1"]}
    assert hits(cases) == {"5": 1.0, "6": 1.0}

    table = tmp_path / "table.json"
    table.write_text(json.dumps({"columns": ["request_id", "retrieved_context", "expected_retrieved_context"],
                                 "data": [[9, [3, {"doc_uri": "u"}], [3]]]}))
    cases = cases_of(READERS["mlflow"](table, qrels=None))
    assert [item["id"] for item in cases["9"]["retrieved_context"]] == ["3", "u"]
    assert hits(cases) == {"9": 1.0}

    run = tmp_path / "latest_test_run.json"
    run.write_text(json.dumps({"testRunData": {"testCases": [
        {"name": 11, "retrievalContext": ["A."], "context": ["A."]}]}}))
    assert hits(cases_of(READERS["deepeval"](run, qrels=None))) == {"11": 1.0}


def test_beir_ids_are_object_keys_and_match_the_qrels_text(tmp_path):
    results = tmp_path / "results.json"
    results.write_text('{"42": {"7": 1.5, "8": 0.5}}')
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n42\t8\t1\n")
    cases = cases_of(READERS["beir"](results, qrels=qrels))
    assert cases["42"]["relevance"] == {"8": 1}
    assert hits(cases) == {"42": 1.0}
