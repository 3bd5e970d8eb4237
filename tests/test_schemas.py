"""The JSON Schemas of the run artifacts (SPEC 12, docs/schema/, flows/sources/schemas.py): they are
valid 2020-12 schemas, the committed sample and baseline pass them, a snapshot written by
`baseline refresh` passes them, each kind of bad input gets its exact message, and
`retrieval-eval schema NAME` prints them.

Where a rule is also one of the loaders' (transforms/records.py, transforms/manifest.py), the
loader is asked too: both must refuse the same input. Rules the schemas add (the type of
chunk_index, the created_at form) are marked `new` and not asked of the loader.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from builders import SAMPLE_BASELINE, SAMPLE_RUNS, cli, evaluate, job_options, reader, write_run
from jsonschema import Draft202012Validator
from retrieval_eval.flows.outputs.warehouse_gate import refresh_baseline
from retrieval_eval.flows.sources.schemas import (
    SCHEMA_NAMES,
    SchemaViolation,
    check,
    load_schema,
    validate,
)
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.transforms.errors import InputError
from retrieval_eval.transforms.manifest import parse_manifest
from retrieval_eval.transforms.records import record_problem

RUNS = SAMPLE_RUNS
BASELINE = SAMPLE_BASELINE
BASELINE_RUN = "2026-11-16-hybrid-rerank"
RUN_NAME = "a safe run name ([A-Za-z0-9._-]+, not . or ..)"
CREATED_AT = "an ISO 8601 date-time such as 2026-11-16T02:00:00Z"
TOP_K = "an integer in [1, 2147483647]"
COUNT_FROM_1 = "an integer in [1, 9223372036854775807]"  # a 64-bit column of the frame it becomes
METRICS = '"hit_at_k", "recall_at_k", "ndcg_at_k", "precision_at_k", "reciprocal_rank_at_k"'
DELETE = object()  # as a new value in `changed`: remove the field


def changed(document: dict, path: tuple, value: object) -> dict:
    """A deep copy of `document` with the field at `path` set to `value` (or removed)."""
    out = copy.deepcopy(document)
    if not path:
        return value
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


def cases_lines(path: Path):
    """(line number, parsed record) of every non-blank line of a cases file."""
    with path.open(encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if line.strip():
                yield number, json.loads(line)


def gold_of(cases_file: Path) -> dict[str, list[str]]:
    """Each case's gold ids as format 2 records them (relevant_ids when non-null, else
    must_cite_one_of; distinct, sorted), read from the cases file itself."""
    gold = {}
    for _, record in cases_lines(cases_file):
        ids = record.get("relevant_ids")
        if ids is None:
            ids = record.get("must_cite_one_of") or []
        gold[record["case_id"]] = sorted(set(ids))
    return gold


def format_1(snapshot: dict) -> dict:
    """A format-2 snapshot as format 1 wrote it: no relevance_level, no source.n_rejected, no
    gold ids per case."""
    out = copy.deepcopy(snapshot)
    out["format_version"] = 1
    del out["relevance_level"]
    del out["source"]["n_rejected"]
    for case in out["cases"].values():
        del case["gold"]
    return out


@pytest.fixture(scope="module")
def baseline_2() -> dict:
    return json.loads(BASELINE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def baseline_1(baseline_2) -> dict:
    return format_1(baseline_2)


# --- the schemas themselves -------------------------------------------------------------


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_is_a_valid_2020_12_schema(name):
    schema = load_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_run_id_rule_is_the_same_for_manifest_and_baseline():
    manifest_rule = dict(load_schema("manifest")["$defs"]["run_id"])
    baseline_rule = dict(load_schema("baseline")["$defs"]["run_id"])
    for rule in (manifest_rule, baseline_rule):
        rule.pop("$comment")
    assert manifest_rule == baseline_rule


def test_an_unknown_schema_name_is_refused():
    with pytest.raises(ValueError, match="no schema named 'runs'"):
        load_schema("runs")


def test_check_raises_with_every_problem():
    with pytest.raises(SchemaViolation) as raised:
        check({"case_id": "c"}, "cases")
    assert raised.value.problems == ["category: required", "locale: required"]
    assert str(raised.value) == "category: required\nlocale: required"
    check({"case_id": "c", "locale": "en", "category": "golden"}, "cases")


# --- the committed sample and baseline -----------------------------------------------------


def test_every_sample_record_validates():
    files = sorted(RUNS.glob("*/cases.jsonl"))
    assert len(files) == 4
    problems = [
        f"{path.relative_to(RUNS)}:{number}: {message}"
        for path in files
        for number, record in cases_lines(path)
        for message in validate(record, "cases")
    ]
    assert problems == []


def test_every_sample_manifest_validates():
    files = sorted(RUNS.glob("*/manifest.json"))
    assert len(files) == 4
    for path in files:
        assert validate(json.loads(path.read_text(encoding="utf-8")), "manifest") == [], path


def test_committed_baseline_validates_as_format_2(baseline_2):
    assert baseline_2["format_version"] == 2
    assert validate(baseline_2, "baseline") == []
    gold = gold_of(RUNS / BASELINE_RUN / "cases.jsonl")
    assert {case_id for case_id, ids in gold.items() if ids} == set(baseline_2["cases"])  # the labelled cases
    assert {case_id: case["gold"] for case_id, case in baseline_2["cases"].items()} == {
        case_id: gold[case_id] for case_id in baseline_2["cases"]}
    assert all(len(case["gold"]) == case["n_gold"] for case in baseline_2["cases"].values())


def test_a_format_1_snapshot_still_validates(baseline_1):
    assert validate(baseline_1, "baseline") == []


def test_format_1_has_no_format_2_fields(baseline_1):
    with_level = changed(baseline_1, ("relevance_level",), 1)
    assert validate(with_level, "baseline") == [
        "relevance_level: unknown field (allowed: aggregates, cases, format_version, k, run_id, source)"
    ]


def test_format_2_needs_its_new_fields(baseline_1):
    as_2 = changed(baseline_1, ("format_version",), 2)
    problems = validate(as_2, "baseline")
    first, second = sorted(baseline_1["cases"])[:2]
    assert problems[:2] == [f"cases.{first}.gold: required", f"cases.{second}.gold: required"]
    assert problems[-2:] == ["relevance_level: required", "source.n_rejected: required"]
    assert len(problems) == len(baseline_1["cases"]) + 2


# --- cases.jsonl records -----------------------------------------------------------------

GOOD_RECORD = {
    "case_id": "en-golden-001",
    "locale": "en",
    "category": "golden",
    "question": "What should I know about grapefruit with a statin?",
    "must_cite_one_of": ["card-statin-grapefruit"],
    "retrieved_context": [
        {"id": "card-statin-grapefruit::01", "parent_id": "card-statin-grapefruit", "chunk_index": 1,
         "score": 0.8988, "source": "kb", "text": "Ask your pharmacist whether your statin is affected."},
        {"id": "card-inhaler-spacer::01", "parent_id": "card-inhaler-spacer", "chunk_index": 1, "score": 0.8742},
        {"id": "card-statin-timing", "score": 0.5},
    ],
    "answer": "Short answer drawn from the card.",
    "cited_ids": ["card-statin-grapefruit"],
}

# (what is wrong, path, new value, the message, whether the rule is new to the schema)
BAD_RECORDS = [
    ("no case_id", ("case_id",), DELETE, "case_id: required", False),
    ("no locale", ("locale",), DELETE, "locale: required", False),
    ("no category", ("category",), DELETE, "category: required", False),
    ("case_id null", ("case_id",), None, "case_id: must be a non-empty string, got null", False),
    ("locale a number", ("locale",), 5, "locale: must be a non-empty string, got number", False),
    ("category a list", ("category",), ["golden"], "category: must be a non-empty string, got list", False),
    ("empty case_id", ("case_id",), "", 'case_id: must be a non-empty string, got ""', False),
    ("empty category", ("category",), "", 'category: must be a non-empty string, got ""', False),
    ("gold a string", ("must_cite_one_of",), "card-a", "must_cite_one_of: must be a list or null, got string", False),
    ("gold an object", ("relevant_ids",), {"card-a": 1}, "relevant_ids: must be a list or null, got object", False),
    ("gold id a number", ("must_cite_one_of",), ["card-a", 7],
     "must_cite_one_of[1]: must be a non-empty string, got number", False),
    ("gold id null", ("relevant_ids",), [None], "relevant_ids[0]: must be a non-empty string, got null", False),
    ("gold id empty", ("must_cite_one_of",), [""], 'must_cite_one_of[0]: must be a non-empty string, got ""', False),
    ("context a string", ("retrieved_context",), "card-a",
     "retrieved_context: must be a list or null, got string", False),
    ("context an object", ("retrieved_context",), {"id": "card-a"},
     "retrieved_context: must be a list or null, got object", False),
    ("item a number", ("retrieved_context", 1), 5, "retrieved_context[1]: must be an object, got number", False),
    ("item a list", ("retrieved_context", 1), ["card-a"], "retrieved_context[1]: must be an object, got list", False),
    ("item without id", ("retrieved_context", 1, "id"), DELETE, "retrieved_context[1].id: required", False),
    ("id a number", ("retrieved_context", 1, "id"), 7,
     "retrieved_context[1].id: must be a non-empty string, got number", False),
    ("id null", ("retrieved_context", 1, "id"), None,
     "retrieved_context[1].id: must be a non-empty string, got null", False),
    ("id empty", ("retrieved_context", 1, "id"), "",
     'retrieved_context[1].id: must be a non-empty string, got ""', False),
    ("parent_id a number", ("retrieved_context", 0, "parent_id"), 3,
     "retrieved_context[0].parent_id: must be a string or null, got number", False),
    ("score a string", ("retrieved_context", 2, "score"), "0.5",
     "retrieved_context[2].score: must be a finite number or null, got string", False),
    ("score a boolean", ("retrieved_context", 2, "score"), True,
     "retrieved_context[2].score: must be a finite number or null, got boolean", False),
    ("score infinite", ("retrieved_context", 2, "score"), math.inf,
     "retrieved_context[2].score: must be a finite number or null, got Infinity", False),
    ("score NaN", ("retrieved_context", 2, "score"), math.nan,
     "retrieved_context[2].score: must be a finite number or null, got NaN", False),
    ("score beyond a double", ("retrieved_context", 2, "score"), 10**400,
     f"retrieved_context[2].score: must be a finite number or null, got {str(10**400)[:57]}...", False),
    ("record a list", (), ["en-golden-001"], "must be an object, got list", False),
    ("chunk_index a string", ("retrieved_context", 0, "chunk_index"), "1",
     "retrieved_context[0].chunk_index: must be an integer or null, got string", True),
    ("chunk_index a fraction", ("retrieved_context", 0, "chunk_index"), 1.5,
     "retrieved_context[0].chunk_index: must be an integer or null, got 1.5", True),
    ("relevance a list", ("relevance",), ["card-a"], "relevance: must be an object or null, got list", False),
    ("negative grade", ("relevance",), {"card-a": -1}, "relevance.card-a: must be an integer >= 0, got -1", False),
    ("fractional grade", ("relevance",), {"card-a": 1.5}, "relevance.card-a: must be an integer >= 0, got 1.5", False),
    ("grade written 2.0", ("relevance",), {"card-a": 2.0}, "relevance.card-a: must be an integer >= 0, got 2.0", False),
    ("grade a string", ("relevance",), {"card-a": "2"}, "relevance.card-a: must be an integer >= 0, got string", False),
    ("grade a boolean", ("relevance",), {"card-a": True}, "relevance.card-a: must be an integer >= 0, got boolean", False),
    ("grade of an empty id", ("relevance",), {"": 1}, 'relevance: each key must be a non-empty string, got ""', False),
]


@pytest.mark.parametrize(
    "path, value, message", [case[1:4] for case in BAD_RECORDS], ids=[case[0] for case in BAD_RECORDS]
)
def test_bad_record_message(path, value, message):
    assert validate(changed(GOOD_RECORD, path, value), "cases") == [message]


TODAYS_RECORD_RULES = [case for case in BAD_RECORDS if not case[4]]


@pytest.mark.parametrize(
    "path, value", [case[1:3] for case in TODAYS_RECORD_RULES], ids=[case[0] for case in TODAYS_RECORD_RULES]
)
def test_todays_record_rules_refuse_it_too(path, value):
    assert record_problem(changed(GOOD_RECORD, path, value)) is not None


GOOD_RECORD_VARIANTS = [
    ("only the required fields", {"case_id": "c", "locale": "en", "category": "golden"}),
    ("null gold and context", changed(changed(GOOD_RECORD, ("relevant_ids",), None), ("retrieved_context",), None)),
    ("empty gold", changed(GOOD_RECORD, ("relevant_ids",), [])),
    ("repeated gold ids", changed(GOOD_RECORD, ("must_cite_one_of",), ["card-a", "card-a"])),
    ("parent_id null", changed(GOOD_RECORD, ("retrieved_context", 0, "parent_id"), None)),
    ("parent_id empty", changed(GOOD_RECORD, ("retrieved_context", 0, "parent_id"), "")),
    ("score null", changed(GOOD_RECORD, ("retrieved_context", 0, "score"), None)),
    ("score an integer", changed(GOOD_RECORD, ("retrieved_context", 0, "score"), -3)),
    ("item with metadata", changed(GOOD_RECORD, ("retrieved_context", 0, "metadata"), {"lang": ["en"]})),
    ("graded relevance", changed(GOOD_RECORD, ("relevance",), {"card-a": 0, "card-b": 3})),
    ("question not text", changed(GOOD_RECORD, ("question",), 3)),
    ("query an object", changed(GOOD_RECORD, ("query",), {"text": "grapefruit statin"})),
    ("fields the metrics do not read", changed(GOOD_RECORD, ("latency_ms",), {"p50": [1, "x", None]})),
]


@pytest.mark.parametrize(
    "record", [case[1] for case in GOOD_RECORD_VARIANTS], ids=[case[0] for case in GOOD_RECORD_VARIANTS]
)
def test_good_record_variant_validates(record):
    assert validate(record, "cases") == []
    assert record_problem(record) is None


def test_a_score_too_large_for_a_double_is_not_finite():
    record = json.loads('{"case_id": "c", "locale": "en", "category": "g", "retrieved_context": [{"id": "a", "score": 1e400}]}')
    assert validate(record, "cases") == ["retrieved_context[0].score: must be a finite number or null, got Infinity"]


def test_record_problems_come_sorted_by_path():
    record = changed(GOOD_RECORD, ("retrieved_context",), [{"id": "a", "score": "x"}] * 11)
    record = changed(record, ("locale",), DELETE)
    record = changed(record, ("category",), 1)
    problems = validate(record, "cases")
    assert problems[:2] == ["category: must be a non-empty string, got number", "locale: required"]
    assert problems[2:] == [
        f"retrieved_context[{i}].score: must be a finite number or null, got string" for i in range(11)
    ]


# --- manifest.json -----------------------------------------------------------------------

GOOD_MANIFEST = {
    "run_id": "2026-11-16-hybrid-rerank",
    "created_at": "2026-11-16T02:00:00Z",
    "retrieval_top_k": 4,
    "git_sha": "7a838c18b7c3618e1a48cc2e16d4e17f5079bda0",
    "dataset_version": "sample-v1",
    "config": {"retriever": "hybrid-bm25-dense-rrf", "reranker": None},
}

BAD_MANIFESTS = [
    ("run_id with a slash", ("run_id",), "a/b", f'run_id: must be {RUN_NAME}, got "a/b"', False),
    ("run_id ..", ("run_id",), "..", f'run_id: must be {RUN_NAME}, got ".."', False),
    ("run_id .", ("run_id",), ".", f'run_id: must be {RUN_NAME}, got "."', False),
    ("run_id empty", ("run_id",), "", f'run_id: must be {RUN_NAME}, got ""', False),
    ("run_id with a final newline", ("run_id",), "run\n", f'run_id: must be {RUN_NAME}, got "run\\n"', False),
    ("run_id a number", ("run_id",), 7, f"run_id: must be {RUN_NAME}, got number", False),
    ("no run_id", ("run_id",), DELETE, "run_id: required", False),
    ("no created_at", ("created_at",), DELETE, "created_at: required", False),
    ("created_at not a date", ("created_at",), "yesterday", f'created_at: must be {CREATED_AT}, got "yesterday"', False),
    ("created_at not in the calendar", ("created_at",), "2026-02-30T02:00:00Z",
     f'created_at: must be {CREATED_AT}, got "2026-02-30T02:00:00Z"', False),
    ("created_at hour 24", ("created_at",), "2026-11-16T24:00:00Z",
     f'created_at: must be {CREATED_AT}, got "2026-11-16T24:00:00Z"', False),
    ("created_at a number", ("created_at",), 20261116, f"created_at: must be {CREATED_AT}, got number", False),
    ("created_at a date only", ("created_at",), "2026-11-16", f'created_at: must be {CREATED_AT}, got "2026-11-16"', True),
    ("created_at with a final newline", ("created_at",), "2026-11-16T02:00:00Z\n",
     f'created_at: must be {CREATED_AT}, got "2026-11-16T02:00:00Z\\n"', False),
    ("no retrieval_top_k", ("retrieval_top_k",), DELETE, "retrieval_top_k: required", False),
    ("retrieval_top_k 0", ("retrieval_top_k",), 0, f"retrieval_top_k: must be {TOP_K}, got 0", False),
    ("retrieval_top_k a string", ("retrieval_top_k",), "4", f"retrieval_top_k: must be {TOP_K}, got string", False),
    ("retrieval_top_k 4.0", ("retrieval_top_k",), 4.0, f"retrieval_top_k: must be {TOP_K}, got 4.0", False),
    ("retrieval_top_k a boolean", ("retrieval_top_k",), True, f"retrieval_top_k: must be {TOP_K}, got boolean", False),
    ("retrieval_top_k 2**63", ("retrieval_top_k",), 2**63,
     f"retrieval_top_k: must be {TOP_K}, got 9223372036854775808", False),
    ("retrieval_top_k 2**31", ("retrieval_top_k",), 2**31, f"retrieval_top_k: must be {TOP_K}, got 2147483648", False),
    ("git_sha a number", ("git_sha",), 5, "git_sha: must be a string or null, got number", False),
    ("config a list", ("config",), ["dense"], "config: must be an object or null, got list", False),
    ("manifest a list", (), [GOOD_MANIFEST], "must be an object, got list", False),
]


@pytest.mark.parametrize(
    "path, value, message", [case[1:4] for case in BAD_MANIFESTS], ids=[case[0] for case in BAD_MANIFESTS]
)
def test_bad_manifest_message(path, value, message):
    assert validate(changed(GOOD_MANIFEST, path, value), "manifest") == [message]


def load_with_todays_loader(manifest: object):
    """transforms/manifest.py's verdict on `manifest`, as read from a folder named after the
    good manifest's run."""
    return parse_manifest(manifest, "manifest.json", GOOD_MANIFEST["run_id"])


TODAYS_MANIFEST_RULES = [case for case in BAD_MANIFESTS if not case[4]]


@pytest.mark.parametrize(
    "path, value", [case[1:3] for case in TODAYS_MANIFEST_RULES], ids=[case[0] for case in TODAYS_MANIFEST_RULES]
)
def test_todays_manifest_loader_refuses_it_too(path, value):
    with pytest.raises(InputError):
        load_with_todays_loader(changed(GOOD_MANIFEST, path, value))


GOOD_MANIFEST_VARIANTS = [
    ("only the required fields", {key: GOOD_MANIFEST[key] for key in ("run_id", "created_at", "retrieval_top_k")}),
    ("an offset", changed(GOOD_MANIFEST, ("created_at",), "2026-11-16T03:00:00+01:00")),
    ("an offset without a colon", changed(GOOD_MANIFEST, ("created_at",), "2026-11-16T03:00:00+0100")),
    ("an offset of hours", changed(GOOD_MANIFEST, ("created_at",), "2026-11-15T22:00:00-04")),
    ("no offset", changed(GOOD_MANIFEST, ("created_at",), "2026-11-16T02:00:00")),
    ("no seconds", changed(GOOD_MANIFEST, ("created_at",), "2026-11-16T02:00Z")),
    ("a fraction", changed(GOOD_MANIFEST, ("created_at",), "2026-11-16T02:00:00.123456789Z")),
    ("a space for T", changed(GOOD_MANIFEST, ("created_at",), "2026-11-16 02:00:00Z")),
    ("lower-case t and z", changed(GOOD_MANIFEST, ("created_at",), "2026-11-16t02:00:00z")),
    ("a leap day", changed(GOOD_MANIFEST, ("created_at",), "2028-02-29T02:00:00Z")),
    ("the largest top k", changed(GOOD_MANIFEST, ("retrieval_top_k",), 2**31 - 1)),
    ("null optional fields", {**GOOD_MANIFEST, "git_sha": None, "dataset_version": None, "config": None}),
    ("fields the project does not read", changed(GOOD_MANIFEST, ("owner",), {"team": "search"})),
]


@pytest.mark.parametrize(
    "manifest", [case[1] for case in GOOD_MANIFEST_VARIANTS], ids=[case[0] for case in GOOD_MANIFEST_VARIANTS]
)
def test_good_manifest_variant_validates(manifest):
    assert validate(manifest, "manifest") == []
    assert load_with_todays_loader(manifest).run_id == GOOD_MANIFEST["run_id"]


# --- baseline.json -----------------------------------------------------------------------

FORMAT_2_FIELDS = "aggregates, cases, format_version, k, relevance_level, run_id, source"
AGGREGATE_FIELDS = "ci_high, ci_low, mean, metric, n, slice, slice_value"
FIRST_CASE = "en-adversarial-001"  # the first case id in sorted order, with one gold card

BAD_BASELINES = [
    ("no aggregates", ("aggregates",), [], "aggregates: must hold at least one aggregate"),
    ("no cases", ("cases",), {}, "cases: must hold at least one case"),
    ("mean null", ("aggregates", 3, "mean"), None, "aggregates[3].mean: must be a number in [0, 1], got null"),
    ("mean above 1", ("aggregates", 3, "mean"), 1.5, "aggregates[3].mean: must be a number in [0, 1], got 1.5"),
    ("ci_low below 0", ("aggregates", 12, "ci_low"), -0.01,
     "aggregates[12].ci_low: must be a number in [0, 1], got -0.01"),
    ("mean a string", ("aggregates", 3, "mean"), "0.5", "aggregates[3].mean: must be a number in [0, 1], got string"),
    ("no k", ("k",), DELETE, "k: required"),
    ("k 0", ("k",), 0, "k: must be an integer >= 1, got 0"),
    ("k a string", ("k",), "4", "k: must be an integer >= 1, got string"),
    ("an unknown metric", ("aggregates", 0, "metric"), "mrr_at_k",
     f'aggregates[0].metric: must be one of {METRICS}, got "mrr_at_k"'),
    ("an unknown slice", ("aggregates", 7, "slice"), "country",
     'aggregates[7].slice: must be one of "all", "category", "locale", "locale_category", got "country"'),
    ("slice all with another value", ("aggregates", 0, "slice_value"), "en",
     'aggregates[0].slice_value: must be "all", got "en"'),
    ("an extra top-level key", ("refreshed_at",), "2026-11-17",
     f"refreshed_at: unknown field (allowed: {FORMAT_2_FIELDS})"),
    ("an extra aggregate key", ("aggregates", 2, "k"), 4, f"aggregates[2].k: unknown field (allowed: {AGGREGATE_FIELDS})"),
    ("n 0", ("aggregates", 0, "n"), 0, "aggregates[0].n: must be an integer >= 1, got 0"),
    ("no n", ("aggregates", 0, "n"), DELETE, "aggregates[0].n: required"),
    ("format_version 3", ("format_version",), 3, "format_version: must be one of 1, 2, got 3"),
    ("no format_version", ("format_version",), DELETE, "format_version: required"),
    ("a bad run_id", ("run_id",), "../x", f'run_id: must be {RUN_NAME}, got "../x"'),
    ("relevance_level 0", ("relevance_level",), 0, "relevance_level: must be an integer >= 1, got 0"),
    ("no relevance_level", ("relevance_level",), DELETE, "relevance_level: required"),
    ("no n_rejected", ("source", "n_rejected"), DELETE, "source.n_rejected: required"),
    ("n_labelled 0", ("source", "n_labelled"), 0, "source.n_labelled: must be an integer >= 1, got 0"),
    ("vacuous a string", ("source", "vacuous"), "no", "source.vacuous: must be a boolean, got string"),
    ("git_sha a number", ("source", "git_sha"), 1, "source.git_sha: must be a string or null, got number"),
    ("no gold", ("cases", FIRST_CASE, "gold"), DELETE, f"cases.{FIRST_CASE}.gold: required"),
    ("empty gold", ("cases", FIRST_CASE, "gold"), [], f"cases.{FIRST_CASE}.gold: must hold at least one item"),
    ("repeated gold", ("cases", FIRST_CASE, "gold"), ["card-a", "card-a"],
     f'cases.{FIRST_CASE}.gold: must not repeat a value, got "card-a" twice'),
    ("gold id empty", ("cases", FIRST_CASE, "gold"), [""],
     f'cases.{FIRST_CASE}.gold[0]: must be a non-empty string, got ""'),
    ("n_gold 0", ("cases", FIRST_CASE, "n_gold"), 0, f"cases.{FIRST_CASE}.n_gold: must be {COUNT_FROM_1}, got 0"),
    ("n_gold beyond 64 bits", ("cases", FIRST_CASE, "n_gold"), 2**63,
     f"cases.{FIRST_CASE}.n_gold: must be {COUNT_FROM_1}, got 9223372036854775808"),
    ("n_retrieved not an integer", ("cases", FIRST_CASE, "n_retrieved"), 1.5,
     f"cases.{FIRST_CASE}.n_retrieved: must be an integer in [0, 9223372036854775807], got 1.5"),
    ("hit above 1", ("cases", FIRST_CASE, "hit_at_k"), 2,
     f"cases.{FIRST_CASE}.hit_at_k: must be a number in [0, 1], got 2"),
    ("first rank 0", ("cases", FIRST_CASE, "first_relevant_rank"), 0,
     f"cases.{FIRST_CASE}.first_relevant_rank: must be {COUNT_FROM_1} or null, got 0"),
    ("a case not an object", ("cases", FIRST_CASE), 0.5, f"cases.{FIRST_CASE}: must be an object, got number"),
]


@pytest.mark.parametrize(
    "path, value, message", [case[1:] for case in BAD_BASELINES], ids=[case[0] for case in BAD_BASELINES]
)
def test_bad_baseline_message(baseline_2, path, value, message):
    assert validate(changed(baseline_2, path, value), "baseline") == [message]


def test_a_gold_field_in_a_format_1_file_is_not_read(baseline_1):
    # format 1 kept no gold ids; a `gold` there (a string, a number) is not the format's field
    from retrieval_eval.transforms.baseline import snapshot_case_metrics

    second = sorted(baseline_1["cases"])[1]
    odd = changed(changed(baseline_1, ("cases", FIRST_CASE, "gold"), "card-x"), ("cases", second, "gold"), 5)
    assert validate(odd, "baseline") == []
    assert snapshot_case_metrics(odd)["gold"].null_count() == len(odd["cases"])


def test_format_1_gets_the_same_messages(baseline_1):
    broken = changed(changed(baseline_1, ("aggregates", 3, "mean"), None), ("k",), DELETE)
    assert validate(broken, "baseline") == ["aggregates[3].mean: must be a number in [0, 1], got null", "k: required"]


def test_an_empty_case_id_is_refused(baseline_2):
    snapshot = changed(baseline_2, ("cases", ""), baseline_2["cases"][FIRST_CASE])
    assert validate(snapshot, "baseline") == ['cases: each key must be a non-empty string, got ""']


def test_a_case_id_that_is_not_a_plain_word_is_quoted(baseline_2):
    case = changed(baseline_2["cases"][FIRST_CASE], ("n_gold",), DELETE)
    snapshot = changed(baseline_2, ("cases", "en golden.7"), case)
    assert validate(snapshot, "baseline") == ['cases["en golden.7"].n_gold: required']


def test_baseline_problems_come_sorted_by_path(baseline_2):
    snapshot = baseline_2
    for index in (10, 2, 9):
        snapshot = changed(snapshot, ("aggregates", index, "n"), 0)
    snapshot = changed(snapshot, ("k",), DELETE)
    assert validate(snapshot, "baseline") == [
        "aggregates[2].n: must be an integer >= 1, got 0",
        "aggregates[9].n: must be an integer >= 1, got 0",
        "aggregates[10].n: must be an integer >= 1, got 0",
        "k: required",
    ]


# --- the schemas beside the loaders and the command -------------------------------------


def test_a_snapshot_written_by_baseline_refresh_validates(tmp_path):
    evaluate(job_options(RUNS / BASELINE_RUN, tmp_path / "warehouse"))
    snapshot = refresh_baseline(Warehouse(tmp_path / "warehouse"), BASELINE_RUN, tmp_path / "baseline.json")
    assert snapshot["format_version"] == 2
    assert validate(json.loads((tmp_path / "baseline.json").read_text()), "baseline") == []


def test_each_bad_record_kind_in_a_cases_file_is_rejected_by_its_line(tmp_path):
    lines = []
    for number, (_, path, value, _, new) in enumerate(BAD_RECORDS, start=1):
        record = changed(changed(GOOD_RECORD, ("case_id",), f"case-{number}"), path, value)
        lines.append(json.dumps(record))
    write_run(tmp_path / "runs", "run-a", lines=lines)
    evaluate(job_options(tmp_path / "runs", tmp_path / "warehouse", allow_rejects=True))
    with reader(tmp_path / "warehouse") as con:  # every reject is in the view (the outcome lists the first 20)
        rejected = {line for (line,) in con.execute("select line from rejects").fetchall()}
    expected = {number for number, case in enumerate(BAD_RECORDS, start=1) if not case[4]}
    assert rejected == expected  # the rules new to the schema (chunk_index) refuse nothing today


def test_a_manifest_with_several_problems_is_refused_with_every_one(tmp_path):
    run_dir = write_run(tmp_path / "runs", "run-a", [GOOD_RECORD])
    path = run_dir / "manifest.json"
    path.write_text(json.dumps({"run_id": "run-a", "created_at": "yesterday", "retrieval_top_k": 0, "git_sha": 5}))
    with pytest.raises(InputError) as refused:
        evaluate(job_options(tmp_path / "runs", tmp_path / "warehouse"))
    assert str(refused.value).splitlines() == [
        f"{path}: field created_at must be an ISO 8601 timestamp, got 'yesterday'",  # the loader's, as before
        f"{path}: every problem, by docs/schema/manifest.schema.json:",
        f'  {path}: created_at: must be {CREATED_AT}, got "yesterday"',
        f"  {path}: git_sha: must be a string or null, got number",
        f"  {path}: retrieval_top_k: must be {TOP_K}, got 0",
    ]
    path.write_text(json.dumps({"run_id": "run-a", "created_at": "yesterday", "retrieval_top_k": 4}))
    with pytest.raises(InputError) as one_problem:
        evaluate(job_options(tmp_path / "runs", tmp_path / "warehouse"))
    assert str(one_problem.value) == f"{path}: field created_at must be an ISO 8601 timestamp, got 'yesterday'"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_the_schema_command_prints_the_published_schema(name):
    result = cli("schema", name)
    assert result.returncode == 0, result.stderr
    published = Path(__file__).resolve().parent.parent / "docs" / "schema" / f"{name}.schema.json"
    assert result.stdout == published.read_text(encoding="utf-8")
    assert json.loads(result.stdout) == load_schema(name)


def test_the_schema_command_refuses_an_unknown_name():
    result = cli("schema", "runs")
    assert result.returncode == 2 and "invalid choice: 'runs'" in result.stderr
