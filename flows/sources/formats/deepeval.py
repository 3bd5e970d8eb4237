"""DeepEval test runs (SPEC 15 `deepeval`): the JSON DeepEval saves as
`.deepeval/.latest_test_run.json`, `{"testRunData": <TestRun by alias>}`
(deepeval/test_run/test_run.py, LATEST_TEST_RUN_DATA_KEY), or a TestRun saved bare (its
older `save`, `{"testCases": [...]}`). Each of `testCases` is a case: `name` its case id
(else `row-N`), `input` the question, `retrievalContext` the ranking and `context` the
gold, all texts (LLMApiTestCase's camelCase aliases), identified by content."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ....transforms.errors import InputError
from .identity import id_text
from .input_rows import json_document
from .qrels import judged_by
from .record import FormatRecord, IdentityCounts, case_of, item_of, must_cite, row_case_id, row_origin
from .side_by_side import side_by_side

FORMAT = "deepeval"
TEST_RUN_KEY = "testRunData"


def read_cases(path: Path, *, qrels: Path | None = None) -> Iterator[FormatRecord]:
    """The cases of a DeepEval test run; with `qrels`, their gold comes from it."""
    records = _cases(path, test_cases(path))
    return judged_by(records, qrels, FORMAT)


def test_cases(path: Path) -> list:
    document = json_document(path)
    run = document.get(TEST_RUN_KEY, document) if isinstance(document, dict) else None
    cases = run.get("testCases") if isinstance(run, dict) else None
    if not isinstance(cases, list):
        raise InputError(f"{path}: not a DeepEval test run (no testRunData.testCases list)")
    return cases


def _cases(path: Path, cases: list) -> Iterator[FormatRecord]:
    for position, values in enumerate(cases, start=1):
        origin = row_origin(path, position)
        if not isinstance(values, dict):
            yield FormatRecord(origin, reject="not a JSON object")
            continue
        retrieved = side_by_side(None, values.get("retrievalContext"), ids_field="", texts_field="retrievalContext")
        gold = side_by_side(None, values.get("context"), ids_field="", texts_field="context")
        problem = retrieved.problem or gold.problem
        if problem is not None:
            yield FormatRecord(origin, reject=problem)
            continue
        items = [item_of(card, text=text) for card, text in zip(retrieved.cards, retrieved.texts, strict=True)]
        case = case_of(values, case_id=id_text(values.get("name")) or row_case_id(position), category=FORMAT,
                       question=values.get("input"), retrieved=items,
                       gold=must_cite(gold.cards) if values.get("context") is not None else None)
        yield FormatRecord(origin, case, retrieved_by=IdentityCounts.of(retrieved.cards),
                           gold_by=IdentityCounts.of(gold.cards))
