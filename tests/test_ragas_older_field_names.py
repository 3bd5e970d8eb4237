"""ragas' older field names (`question`, `contexts`, `ground_truths`, `reference`) are read
only from a row that holds none of the current ones (`user_input`, `retrieved_contexts`,
`reference_contexts`, `retrieved_context_ids`, `reference_context_ids`), SPEC 15. In a current
row `reference` is the reference answer (ragas `src/ragas/dataset_schema.py`,
`SingleTurnSample.reference: t.Optional[str]`, "the reference (golden label) answer"), never
gold: a current row without `reference_contexts` or `reference_context_ids` is unlabelled."""

from __future__ import annotations

import json

from retrieval_eval.flows.sources.formats import READERS
from retrieval_eval.flows.sources.formats.identity import content_id
from retrieval_eval.flows.sources.formats.record import IdentityCounts


def read_rows(tmp_path, rows: list[dict]) -> dict:
    path = tmp_path / "dataset.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return {record.case["case_id"]: record for record in READERS["ragas"](path, qrels=None)}


def test_a_current_row_with_a_reference_answer_and_no_reference_contexts_is_unlabelled(tmp_path):
    cases = read_rows(tmp_path, [
        {"user_input": "Where is Paris?", "retrieved_contexts": ["Paris is in France."], "response": "France.",
         "reference": "Paris is in France."},
        {"retrieved_context_ids": ["d1"], "reference": "d1"},  # the ids alone make it a current row
    ])
    for case_id in ("row-1", "row-2"):
        assert "must_cite_one_of" not in cases[case_id].case
        assert cases[case_id].gold_by == IdentityCounts()
    assert cases["row-1"].case["question"] == "Where is Paris?"


def test_a_current_row_reads_its_gold_from_reference_contexts_not_reference(tmp_path):
    cases = read_rows(tmp_path, [{"user_input": "q", "retrieved_contexts": ["A.", "B."], "reference_contexts": ["B."],
                                  "reference": "A."}])
    assert cases["row-1"].case["must_cite_one_of"] == [content_id("B.")]


def test_an_older_row_reads_question_contexts_and_ground_truths_else_reference(tmp_path):
    cases = read_rows(tmp_path, [
        {"question": "Old?", "contexts": ["A.", "B."], "ground_truths": ["B."], "reference": "A."},
        {"question": "Older?", "contexts": ["A.", "B."], "reference": "A."},
    ])
    assert cases["row-1"].case["must_cite_one_of"] == [content_id("B.")]  # ground_truths comes first
    assert cases["row-1"].case["question"] == "Old?"
    assert cases["row-2"].case["must_cite_one_of"] == [content_id("A.")]  # `reference`, one text
    assert cases["row-2"].gold_by == IdentityCounts(content=1)


def test_a_current_row_does_not_mix_in_older_names(tmp_path):
    cases = read_rows(tmp_path, [{"user_input": "new", "question": "old", "contexts": ["A."], "ground_truths": ["A."]}])
    case = cases["row-1"].case
    assert case["question"] == "new" and case["retrieved_context"] == [] and "must_cite_one_of" not in case
