"""transforms/deep_json.py reads what json.loads reads, to the same values and the same
refusals, at any depth: checked against json.loads itself on random documents and on
documents spoiled one character at a time."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from retrieval_eval.transforms import deep_json

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
DOCUMENTS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=25)
SPOILS = st.sampled_from(["", ",", "]", "}", "[", "{", ":", '"', "\\", "-", "0", "e", "N", " ", "\t", "\x00"])


def verdict(loads, text: str):
    try:
        return ("ok", loads(text, object_pairs_hook=list, parse_constant=lambda word: ("constant", word)))
    except ValueError as error:  # JSONDecodeError's messages name what json.loads names, by position
        return ("refused", type(error).__name__)


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@settings(max_examples=400, deadline=None)
@given(DOCUMENTS, st.booleans())
def test_a_document_reads_as_json_loads_reads_it(document, spaced):
    text = json.dumps(document, indent=1 if spaced else None)
    assert same(verdict(deep_json.loads, text), verdict(json.loads, text))


@settings(max_examples=600, deadline=None)
@given(DOCUMENTS, st.integers(min_value=0), SPOILS, st.booleans())
def test_a_spoiled_document_gets_the_verdict_json_loads_gives(document, where, spoil, replace):
    text = json.dumps(document)
    at = where % (len(text) + 1)
    spoiled = text[:at] + spoil + text[at + (1 if replace else 0):]
    assert same(verdict(deep_json.loads, spoiled), verdict(json.loads, spoiled)), spoiled


def test_any_depth_reads_without_recursion():
    depth = 200_000  # json.loads gives up near 1,000
    text = '{"a": ' + "[" * depth + '{"b": [1, "c"]}' + "]" * depth + "}"
    value = deep_json.loads(text, object_pairs_hook=dict)
    for _ in range(depth + 1):  # the key, then each list
        value = value["a"] if isinstance(value, dict) else value[0]
    assert value == {"b": [1, "c"]}


@pytest.mark.parametrize("number", ["1\u0661", "\u0661", "1.\u0662", "1e\u0663", "\uff11"])
def test_a_digit_of_another_script_is_not_a_json_digit(number):
    # json.scanner's number pattern (\d) takes them; json.loads does not, nor the line rules
    # for a record nested deeper than json.loads reads (found by a review, 2026-12-04).
    text = '{"n": ' + number + "}"
    assert verdict(json.loads, text)[0] == verdict(deep_json.loads, text)[0] == "refused"

