"""The record rules of a cases.jsonl (SPEC 3 and 6), one line at a time.

Ingest reads a clean file with its fast reader alone (flows/sources/case_file.py: the strict parser
of flows/sources/_case_columns.c, or Arrow's JSON reader); only when that pass meets a
record it cannot take (flows/sources/ingest.py) are the file's lines judged here, to name every bad
record by its line and keep the good ones. Every record these rules accept, the fast pass
accepts too: what Arrow's reader refuses beyond SPEC 3's types — a field the metrics read
written twice in one object, an unpaired UTF-16 surrogate escape anywhere — is a rule here as
well. A valid line Arrow cannot read as it is (grades as an object, a question that is not
text, a number too large for a double even in a field it would skip) is handed on rewritten
with only the fields the metrics read (`LineVerdict.clean`).
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass

from . import deep_json

REQUIRED_TEXT_FIELDS = ("case_id", "locale", "category")
GOLD_FIELDS = ("must_cite_one_of", "relevant_ids")
TEXT_FIELDS = ("question", "query")  # optional; kept when text, left out otherwise (never an error)
RECORD_FIELDS = frozenset((*REQUIRED_TEXT_FIELDS, *GOLD_FIELDS, *TEXT_FIELDS, "relevance", "retrieved_context"))
ITEM_FIELDS = frozenset(("id", "parent_id", "score"))
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# The record-size limit: a longer line is rejected by its line number (and only its first
# KiB kept in `rejects`), never read whole. The clean copy of the valid lines is then read
# with Arrow blocks as long as its longest line (see ingest).
MAX_RECORD_BYTES = 64 * 1024 * 1024
MAX_GRADE = 2**63 - 1  # grades are 64-bit integers in the warehouse
# A number that may lie beyond a double (Arrow's reader refuses one wherever it stands): an
# exponent of three digits or more, or 300 digits in a row. Text that looks so only costs the
# line a rewrite.
BEYOND_A_DOUBLE = re.compile(rb"\d[eE]\+?0*[1-9]\d{2}|\d{300}")


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def json_type_name(value: object) -> str:
    """The JSON type of a parsed value, as messages name it (list, not array)."""
    for kind, name in ((dict, "object"), (list, "list"), (str, "string"), (bool, "boolean"), (type(None), "null")):
        if isinstance(value, kind):
            return name
    return "number"


class _Object(dict):
    """A JSON object that knows which of its keys were written more than once (the last
    value is kept, as json.loads does)."""

    repeated: frozenset[str] = frozenset()


def _object(pairs: list[tuple[str, object]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.repeated = frozenset(key for key, _ in pairs if key in seen or seen.add(key))
    return obj


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    obj = _object(pairs)
    if obj.repeated:
        raise ValueError(f"key {sorted(obj.repeated)[0]!r} is written twice in one object")
    return dict(obj)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a number")
    return value


class _MinusZero(int):
    """The integer `-0` as written: 0 wherever an integer is read (a grade), yet a score written
    so is the double -0.0, as the strict parser and Arrow's reader read it, when `_clean_line`
    writes the record again (json.loads alone would make it 0.0)."""


MINUS_ZERO = _MinusZero(0)


def _any_int(text: str) -> int | float:
    """An integer past Python's digit limit for int() read as the double it rounds to, as
    Arrow's reader does (so a field the metrics ignore may hold one on either path)."""
    if text == "-0":
        return MINUS_ZERO
    return int(text) if len(text) <= sys.get_int_max_str_digits() else float(text)


def _bounded_int(text: str) -> int:
    """In a document the project keeps, an integer past that limit is refused, in our words."""
    if len(text) > sys.get_int_max_str_digits():
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits is too large for a number")
    return int(text)


def _loads(text: str, max_depth: int | None = None, **hooks) -> object:
    """json.loads without NaN and Infinity (not JSON); nesting deeper than Python's recursion
    allows is read by transforms/deep_json.py (up to `max_depth` containers, when given)."""
    try:
        return json.loads(text, parse_constant=_no_constants, **hooks)
    except RecursionError:  # as deep as Arrow's reader takes: the same verdict on both paths
        return deep_json.loads(text, parse_constant=_no_constants, max_depth=max_depth, **hooks)


class UnkeepableText(ValueError):
    """A string of a kept document that cannot be written as UTF-8 (an unpaired surrogate)."""


def strict_json_loads(text: str, max_depth: int | None = None) -> object:
    """A whole JSON document the project keeps (a manifest, whose config goes into the `runs`
    table, a baseline): a number beyond a double or a key written twice in one object (json.loads
    would keep the last silently) is refused anywhere in it, as NaN and Infinity are; so is a
    string with an unpaired UTF-16 surrogate escape (no UTF-8 file or table can hold it), and,
    with `max_depth`, nesting deeper than that many containers (deep_json.TooDeep). Each
    refusal names where in the document it stands."""
    value = _loads(text, max_depth, object_pairs_hook=_unique_keys, parse_float=_finite_float, parse_int=_bounded_int)
    if max_depth is not None and (deep := deep_json.too_deep(value, max_depth)) is not None:
        raise deep_json.TooDeep(deep, max_depth)
    if SURROGATE_ESCAPE.search(text) and (where := lone_surrogate_path(value)) is not None:
        raise UnkeepableText(f"{deep_json.json_path(where) or deep_json.WHOLE_DOCUMENT}: holds an unpaired UTF-16 surrogate escape (\\uD800-\\uDFFF)")
    return value


def parse_json_line(text: str) -> object:
    """One line of JSON as the record rules read it: each object knows the keys written in it
    more than once (`written_twice`). Raises ValueError."""
    return _loads(text, object_pairs_hook=_object, parse_int=_any_int)


def written_twice(obj: dict, fields: frozenset[str]) -> str | None:
    """Why `obj` (parsed by `parse_json_line`) is refused when one of `fields` is written twice in it."""
    repeated = sorted(getattr(obj, "repeated", frozenset()) & fields)
    return f"field {repeated[0]} is written twice" if repeated else None


def lone_surrogate_path(value: object) -> list[str | int] | None:
    """Where a string of `value` (a key or a value) holds an unpaired surrogate — the path to
    the key or the value — or None; json.loads joins escaped pairs, so any surrogate left is
    alone."""
    pending: list[tuple[object, list[str | int]]] = [(value, [])]  # a stack: a record may nest deeper than recursion allows
    while pending:
        item, path = pending.pop()
        if isinstance(item, str):
            if not _encodes(item):
                return path
        elif isinstance(item, dict):
            for key, member in item.items():
                if not _encodes(key):
                    return [*path, key]
                pending.append((member, [*path, key]))
        elif isinstance(item, list):
            pending.extend((member, [*path, index]) for index, member in enumerate(item))
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _has_lone_surrogate(value: object) -> bool:
    return lone_surrogate_path(value) is not None


def _finite(number: float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # an integer beyond any double
        return False


def record_problem(record: object) -> str | None:
    """Why a parsed record is rejected, or None when it is valid."""
    if not isinstance(record, dict):
        return f"record is a JSON {json_type_name(record)}, not an object"
    problem = written_twice(record, RECORD_FIELDS)
    if problem:
        return problem
    for name in REQUIRED_TEXT_FIELDS:
        if record.get(name) is None:
            return f"missing required field {name}"
        if not isinstance(record[name], str):
            return f"field {name} must be a string, got {json_type_name(record[name])}"
        if record[name] == "":
            return f"field {name} is empty"
    for name in GOLD_FIELDS:
        gold = record.get(name)
        if gold is None:
            continue
        if not isinstance(gold, list):
            return f"field {name} must be a list of card ids, got {json_type_name(gold)}"
        for i, card_id in enumerate(gold):
            if not isinstance(card_id, str) or card_id == "":
                return f"field {name}[{i}] must be a non-empty string, got {json_type_name(card_id)}"
    problem = _relevance_problem(record.get("relevance"))
    if problem:
        return problem
    context = record.get("retrieved_context")
    if context is None:
        return None
    if not isinstance(context, list):
        return f"field retrieved_context must be a list, got {json_type_name(context)}"
    for i, item in enumerate(context):
        problem = _item_problem(item)
        if problem:
            return f"retrieved_context[{i}]: {problem}"
    return None


def _relevance_problem(relevance: object) -> str | None:
    """`relevance` is null or an object {card_id: grade}: non-empty ids, integer grades >= 0."""
    if relevance is None:
        return None
    if not isinstance(relevance, dict):
        return f"field relevance must be an object of card id to grade, got {json_type_name(relevance)}"
    repeated = sorted(getattr(relevance, "repeated", frozenset()))
    if repeated:
        return f"field relevance grades card {repeated[0]!r} twice"
    for card_id, grade in relevance.items():
        if card_id == "":
            return "field relevance has an empty card id"
        if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= MAX_GRADE:
            return f"field relevance[{card_id!r}] must be an integer grade in [0, {MAX_GRADE}], got {json.dumps(grade)}"
    return None


def _item_problem(item: object) -> str | None:
    if not isinstance(item, dict):
        return f"item is a JSON {json_type_name(item)}, not an object"
    problem = written_twice(item, ITEM_FIELDS)
    if problem:
        return problem
    item_id = item.get("id")
    if item_id is None:
        return "item has no id"
    if not isinstance(item_id, str) or item_id == "":
        return f"field id must be a non-empty string, got {json_type_name(item_id)}"
    parent = item.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        return f"field parent_id must be a string, got {json_type_name(parent)}"
    score = item.get("score")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float):
            return f"field score must be a number, got {json_type_name(score)}"
        if not _finite(score):
            return f"field score must be finite, got {score}"
    return None


@dataclass(frozen=True)
class LineVerdict:
    """What one non-blank line is: rejected with a reason, or valid, with the line Arrow's
    reader takes for it (the line itself, or the record rewritten, SPEC 12 grades)."""

    reason: str | None
    case_id: str | None = None
    clean: bytes | None = None


def judge_line(line: bytes) -> LineVerdict:
    """The verdict on one line of a cases file (a repeated case_id is for the caller, who
    knows the lines before)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return LineVerdict(f"not valid UTF-8 ({error.reason} at byte {error.start})")
    try:
        record = parse_json_line(text)
    except ValueError as error:  # JSONDecodeError is one
        return LineVerdict(f"not valid JSON ({error})")
    if SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(record):
        return LineVerdict("not valid JSON (an unpaired UTF-16 surrogate escape)")
    problem = record_problem(record)
    if problem:
        return LineVerdict(problem)
    return LineVerdict(None, record["case_id"], _clean_line(line, record))


def _clean_line(line: bytes, record: dict) -> bytes:
    """The line as Arrow's reader takes it: as it is, unless it holds what that reader refuses
    (grades as an object, a question or query that is not text, a number beyond a double in a
    field the metrics do not read); then the record is written again with only the fields the
    metrics read, grades as a list of {card_id, grade}, and a question that is not text left out."""
    odd_text = [name for name in TEXT_FIELDS if record.get(name) is not None and not isinstance(record[name], str)]
    if record.get("relevance") is None and not odd_text and not BEYOND_A_DOUBLE.search(line):
        return line if line.endswith(b"\n") else line + b"\n"
    clean = {key: value for key, value in record.items() if key in RECORD_FIELDS and key not in odd_text}
    if record.get("retrieved_context") is not None:
        clean["retrieved_context"] = [{key: -0.0 if item[key] is MINUS_ZERO else item[key]
                                       for key in ITEM_FIELDS if key in item}
                                      for item in record["retrieved_context"]]
    if record.get("relevance") is not None:
        clean["relevance"] = [{"card_id": card, "grade": grade} for card, grade in record["relevance"].items()]
    return json.dumps(clean, ensure_ascii=False).encode("utf-8") + b"\n"
