"""The compiled schema checks (flows/sources/schema_predicate.py) against jsonschema itself.

flows/sources/schemas.py takes a document the compiled check finds valid without asking jsonschema,
so the two must agree on every document. Valid records, manifests and baselines are edited —
every single edit (each field set to each of the schemas' edge values, removed; an unknown
key added; a list item repeated), then up to three random ones at a time (hypothesis) — and
each result is judged by both. Where the compiled check cannot compare a value exactly it says Unsure,
and jsonschema decides; that is allowed, not a disagreement.
"""

from __future__ import annotations

import copy
import json

import pytest
from builders import SAMPLE_BASELINE
from hypothesis import given, settings
from hypothesis import strategies as st
from retrieval_eval.flows.sources.schema_predicate import Unsure, compile_schema
from retrieval_eval.flows.sources.schemas import (
    compiled_check,
    jsonschema_validator,
    validate,
)
from test_schemas import GOOD_MANIFEST_VARIANTS, GOOD_RECORD_VARIANTS, format_1

BASELINE = json.loads(SAMPLE_BASELINE.read_text(encoding="utf-8"))
# Few paths, so that each mutation lands on a rule often (the schema does not tie the cases to
# the aggregates: transforms/baseline.py checks that).
SMALL_BASELINE = BASELINE | {"cases": dict(list(BASELINE["cases"].items())[:2]), "aggregates": BASELINE["aggregates"][:3]}
DOCUMENTS = {
    "cases": [record for _, record in GOOD_RECORD_VARIANTS],
    "manifest": [manifest for _, manifest in GOOD_MANIFEST_VARIANTS],
    "baseline": [SMALL_BASELINE, format_1(SMALL_BASELINE)],
}
# Values that sit on the schemas' edges: bounds, integer-looking floats, booleans for numbers,
# names that are not safe, dates that are not, strings the patterns and enums hold.
EDGE_VALUES = [None, True, False, 0, 1, -1, 2, 0.0, -0.0, 0.5, 1.0, 4.0, 1.0000001, -1e-9, 1e308,
               2**31 - 1, 2**31, 2**63, "", "a", ".", "..", "run\n", "a b", "en", "all", "locale", "category",
               "hit_at_k", "ndcg_at_k", "kb", "2026-11-16T02:00:00Z", "2026-02-30T00:00:00Z", "2026-11-16",
               "blake3:" + "0" * 64, [], {}, ["a"], ["a", "a"], ["b", "a"], [1], {"a": 1}]
EDGES = st.sampled_from(EDGE_VALUES)
SCALARS = st.one_of(EDGES, EDGES, EDGES, st.text(max_size=3), st.integers(-3, 3), st.floats(-2, 2, allow_nan=False))


def json_values(keys: list[str]):
    return st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.sampled_from(keys) | st.text(max_size=2), inner, max_size=3), max_leaves=5)


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from paths(item, (*prefix, i))


def keys_of(value) -> list[str]:
    return sorted({path[-1] for path in paths(value) if path and isinstance(path[-1], str)})


@st.composite
def mutated(draw, document):
    out = copy.deepcopy(document)
    keys = keys_of(document)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(paths(out))))
        if not path:
            continue
        parent = out
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["set", "set", "delete", "add", "repeat"]))
        # Drawn values are copied: an edge value is a shared object (EDGE_VALUES' [] and {}),
        # and a later "add" or "repeat" would change it for every example after this one.
        if action == "set":
            parent[path[-1]] = copy.deepcopy(draw(json_values(keys)))
        elif action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(st.sampled_from(keys) | st.text(max_size=2))] = copy.deepcopy(draw(json_values(keys)))
        elif action == "repeat" and isinstance(parent[path[-1]], list) and parent[path[-1]]:
            parent[path[-1]].append(copy.deepcopy(parent[path[-1]][0]))
    return out


def agrees(name: str, document) -> bool | None:
    """Both verdicts on `document` when the compiled check gives one (None: it is unsure)."""
    try:
        fast = compiled_check(name)(document)
    except Unsure:
        return None
    assert fast == jsonschema_validator(name).is_valid(document), json.dumps(document)[:2000]
    return fast


def single_edits(document):
    """Every document one edit away: each field set to each edge value, or removed; each
    object given an unknown key; each list's first item repeated."""
    for path in paths(document):
        if not path:
            continue
        for value in [*EDGE_VALUES, DELETE]:
            yield edited(document, path, value)
        yield edited(document, path, ADD_KEY)
        yield edited(document, path, REPEAT)


DELETE, ADD_KEY, REPEAT = object(), object(), object()


def edited(document, path, value):
    out = copy.deepcopy(document)
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    target = parent[path[-1]]
    if value is DELETE:
        del parent[path[-1]]
    elif value is ADD_KEY:
        if isinstance(target, dict):
            target["unknown"] = 1
    elif value is REPEAT:
        if isinstance(target, list) and target:
            target.append(copy.deepcopy(target[0]))
    else:
        parent[path[-1]] = value
    return out


@pytest.mark.parametrize("name", ["cases", "manifest", "baseline"])
def test_every_single_edit_gets_the_same_verdict(name):
    verdicts = [agrees(name, document) for original in DOCUMENTS[name] for document in single_edits(original)]
    assert verdicts.count(True) and verdicts.count(False)  # both kinds of document were judged


@pytest.mark.parametrize("name", ["cases", "manifest", "baseline"])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_compiled_check_agrees_with_jsonschema(name, data):
    document = data.draw(st.sampled_from(DOCUMENTS[name]))
    agrees(name, data.draw(mutated(document)))


@pytest.mark.parametrize("name", ["cases", "manifest", "baseline"])
def test_the_valid_documents_pass_both_and_each_schema_compiles(name):
    assert compiled_check(name) is not None
    for document in DOCUMENTS[name]:
        assert agrees(name, document) is True


def test_a_schema_with_a_keyword_it_does_not_state_is_not_compiled():
    assert compile_schema({"type": "object", "patternProperties": {"^x": {"type": "string"}}}, {}) is None
    assert compile_schema({"$ref": "other.json#/$defs/x"}, {}) is None
    assert compile_schema({"type": "decimal"}, {}) is None
    # an $id below the root moves where its $refs point: not stated here
    assert compile_schema({"$defs": {"in": {"$id": "https://example.com/in", "type": "string"}},
                           "$ref": "#/$defs/in"}, {}) is None


def test_lists_in_enum_or_unique_items_it_cannot_compare_make_it_unsure():
    with pytest.raises(Unsure):
        compile_schema({"enum": [1, 2]}, {})([1])
    with pytest.raises(Unsure):
        compile_schema({"uniqueItems": True}, {})([[1], [1]])


def test_a_reference_to_itself_is_followed():
    tree = compile_schema({"type": "object", "properties": {"child": {"$ref": "#"}}, "additionalProperties": False}, {})
    assert tree({"child": {"child": {}}}) and not tree({"child": {"child": {"leaf": 1}}})


def test_a_large_valid_baseline_is_not_walked_by_jsonschema(monkeypatch):
    # 20,000 cases: the compiled check answers; a jsonschema walk (~0.4 ms a case) is not made.
    cases = {f"c{i:05d}": next(iter(BASELINE["cases"].values())) for i in range(20_000)}
    monkeypatch.setattr("retrieval_eval.flows.sources.schemas.jsonschema_validator",
                        lambda name: pytest.fail("jsonschema was asked about a valid document"))
    assert validate(BASELINE | {"cases": cases}, "baseline") == []
