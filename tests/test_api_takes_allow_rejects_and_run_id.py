"""`retrieval_eval.evaluate(cases, *, k, ks=(), relevance_level=1, allow_rejects=False,
run_id=None)` (SPEC 16): the package's own function passes `allow_rejects` and `run_id` through
(its error tells a user to pass allow_rejects=True, which once raised TypeError)."""

from __future__ import annotations

import pytest
import retrieval_eval
from builders import case, chunk
from retrieval_eval.transforms.errors import InputError, RejectedRecords

# Three cases of which the second breaks the rules (no category): hand-checked, the two valid
# ones are hits at k=1.
CASES = [
    case("a", [chunk("X")], ["X"]),
    {"case_id": "no-category", "locale": "en"},
    case("b", [chunk("Y")], ["Y"]),
]


def test_allow_rejects_loads_the_valid_records_through_the_package_function():
    with pytest.raises(RejectedRecords, match="use allow_rejects=True"):
        retrieval_eval.evaluate(CASES, k=1)
    kept = retrieval_eval.evaluate(CASES, k=1, allow_rejects=True)
    assert sorted(kept.case_metrics["case_id"].to_list()) == ["a", "b"]
    assert [r.describe() for r in kept.rejects] == ["cases:2: missing required field category"]


def test_run_id_names_the_run_in_every_frame():
    named = retrieval_eval.evaluate(CASES[::2], k=1, run_id="notebook-7")
    assert set(named.case_metrics["run_id"]) == {"notebook-7"} and set(named.aggregates["run_id"]) == {"notebook-7"}
    assert set(retrieval_eval.evaluate(CASES[::2], k=1).case_metrics["run_id"]) == {"python"}  # the default


def test_a_run_id_that_is_not_text_is_an_input_error():
    with pytest.raises(InputError, match="run_id must be a non-empty string"):
        retrieval_eval.evaluate(CASES[::2], k=1, run_id=7)
