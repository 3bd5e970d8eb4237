"""Validating run artifacts against their JSON Schemas, with messages people can act on.

Three schemas (JSON Schema 2020-12) are published in docs/schema/ and installed with the
package: `cases` (one record, one line of a cases.jsonl), `manifest` (a run's manifest.json)
and `baseline` (the committed snapshot); `retrieval-eval schema NAME` prints one. `validate(instance, name)` returns every problem of a parsed document as one
line each, sorted by where it is:

    k: required
    aggregates[3].mean: must be a number in [0, 1], got null
    retrieved_context[2].score: must be a finite number or null, got string
    cases: must hold at least one case
    extra: unknown field (allowed: aggregates, cases, format_version, k, relevance_level, run_id, source)

The path is the field as a user reads it: keys joined by dots, list positions in
brackets, a key that is not a plain word quoted (`cases["a b"].n_gold`). A problem of
the whole document has no path. Callers add where the document came from; for a line of
a cases file that is `file:line: `.

What a value "must be" comes from the schema itself: the `title` of the failing schema
when it has one (the schemas write titles as noun phrases for this, e.g. "a finite
number"), otherwise its type with its bounds ("an integer >= 1", "a non-empty string").
"got" names the type of a value of the wrong type, and shows the value itself where that
helps: a number checked against bounds, a string checked against a pattern or a list of
allowed values.

Two choices make the validator agree with the loaders of transforms/ where 2020-12 is
looser: an integer is a number written without a fraction or exponent (2020-12 also
counts 4.0), and a number must be finite (Python's json module reads NaN, Infinity and
1e400 as floats that are not).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

from ...transforms.deep_json import json_path
from ...transforms.records import json_type_name
from .schema_predicate import Check, Unsure, compile_schema, is_integer, is_number

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

SCHEMA_NAMES = ("cases", "manifest", "baseline")
# Longest rendering of a value quoted in a message (a longer one is cut, ending in "...").
MAX_SHOWN_CHARS = 60

_TYPE_PHRASES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "a list",
    "object": "an object",
    "null": "null",
}
_NUMERIC_TYPES = ("integer", "number")
ISO8601_DATE_TIME = "iso8601-date-time"  # the one format the schemas assert (a manifest's created_at)
# Schema keywords whose value maps names to schemas (the name is not a keyword).
_NAMED_SUBSCHEMAS = ("properties", "patternProperties", "$defs", "dependentSchemas")


class SchemaViolation(ValueError):
    """A document breaks its schema; `problems` holds one message per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def schema_text(name: str) -> str:
    """The text of docs/schema/<name>.schema.json as installed."""
    if name not in SCHEMA_NAMES:
        raise ValueError(f"no schema named {name!r} (known: {', '.join(SCHEMA_NAMES)})")
    return resources.files("retrieval_eval").joinpath("docs", "schema", f"{name}.schema.json").read_text(encoding="utf-8")


def load_schema(name: str) -> dict:
    """The schema of that name, parsed."""
    return json.loads(schema_text(name))


def validate(instance: object, schema_name: str) -> list[str]:
    """Every problem of `instance` (a parsed JSON document) against the named schema, one
    message each, sorted by path; an empty list when it is valid. A valid document is told by
    the schema's compiled check (flows/sources/schema_predicate.py); jsonschema reads the others."""
    if _passes(schema_name, instance):
        return []
    errors = jsonschema_validator(schema_name).iter_errors(instance)
    found = {message for error in errors for message in _messages(error)}
    return [message for _, message in sorted(found)]


def check(instance: object, schema_name: str) -> None:
    """Raise SchemaViolation with every problem when `instance` breaks the named schema."""
    problems = validate(instance, schema_name)
    if problems:
        raise SchemaViolation(problems)


def _is_iso8601_date_time(value: object) -> bool:
    """The calendar check of format iso8601-date-time, made the way transforms/manifest.py
    reads a created_at; the schema's pattern has checked the form already."""
    if not isinstance(value, str):
        return True
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return True


@cache
def compiled_check(schema_name: str) -> Check | None:
    """The named schema as one yes/no function (None if it cannot be compiled)."""
    return compile_schema(load_schema(schema_name), {ISO8601_DATE_TIME: _is_iso8601_date_time})


def _passes(schema_name: str, instance: object) -> bool:
    """Whether the compiled check finds `instance` valid (no when it cannot tell)."""
    check = compiled_check(schema_name)
    try:
        return check is not None and check(instance)
    except Unsure:
        return False


@cache
def jsonschema_validator(schema_name: str) -> Validator:
    """Draft 2020-12 with the project's two stricter types (integers written as integers,
    finite numbers: flows/sources/schema_predicate.py), so that what passes here passes the loaders too. jsonschema is imported here,
    on first use: importing it costs about 0.12 s, which every `run` would pay otherwise."""
    from jsonschema import Draft202012Validator, FormatChecker, validators

    formats = FormatChecker(formats=())
    formats.checks(ISO8601_DATE_TIME)(_is_iso8601_date_time)
    artifact_validator = validators.extend(
        Draft202012Validator,
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
            {"integer": lambda _checker, value: is_integer(value), "number": lambda _checker, value: is_number(value)}),
    )
    return artifact_validator(load_schema(schema_name), format_checker=formats)


def _messages(error: ValidationError) -> Iterable[tuple[tuple, str]]:
    """The (sort key, message) pairs of one jsonschema error: usually one, one per field
    for `required` and `additionalProperties`."""
    path = list(error.absolute_path)
    kind = error.validator
    schema = error.schema
    instance = error.instance

    if kind == "required":
        for name in error.validator_value:
            if name not in instance:
                yield _located(path + [name], "required")
        return
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        for key in instance:
            if key not in allowed and not any(re.search(p, key) for p in patterns):
                yield _located(path + [key], f"unknown field (allowed: {', '.join(allowed)})")
        return
    if _in_property_names(error):
        yield _located(path, f"each key must be {_expectation(schema)}, got {_shown(instance)}")
        return
    yield _located(path, _describe(error))


def _describe(error: ValidationError) -> str:
    kind, schema, instance, keyword_value = error.validator, error.schema, error.instance, error.validator_value
    if kind == "type":
        return f"must be {_expectation(schema)}, got {_type_got(schema, instance)}"
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                "pattern", "format", "not"):
        return f"must be {_expectation(schema)}, got {_shown(instance)}"
    if kind in ("minItems", "minProperties"):
        return f"must hold at least {_count_of(schema, keyword_value)}"
    if kind == "enum":
        choices = ", ".join(_shown(choice) for choice in keyword_value)
        return f"must be one of {choices}, got {_shown(instance)}"
    if kind == "const":
        return f"must be {_shown(keyword_value)}, got {_shown(instance)}"
    if kind == "uniqueItems":
        return f"must not repeat a value, got {_shown(_first_repeat(instance))} twice"
    return error.message  # a keyword these schemas do not use: jsonschema's own wording


def _located(path: list, message: str) -> tuple[tuple, str]:
    where = json_path(path, ensure_ascii=False)
    # Sort positions as numbers (aggregates[10] after aggregates[9]), keys as text.
    key = tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in path)
    return key, f"{where}: {message}" if where else message


def _in_property_names(error: ValidationError) -> bool:
    """Whether the error is about a key of an object (the schema of `propertyNames`)."""
    parts = list(error.schema_path)
    i = 0
    while i < len(parts):
        if parts[i] == "propertyNames":
            return True
        i += 2 if parts[i] in _NAMED_SUBSCHEMAS else 1
    return False


def _types(schema: dict) -> list[str]:
    declared = schema.get("type", [])
    return [declared] if isinstance(declared, str) else list(declared)


def _expectation(schema: dict) -> str:
    """What a value of `schema` must be, as a noun phrase."""
    types = _types(schema)
    kinds = [t for t in types if t != "null"]
    if "title" in schema and not {"object", "array"} & set(kinds):
        phrase = schema["title"]
    elif kinds:
        phrase = " or ".join(_kind_phrase(kind, schema) for kind in kinds)
    else:
        phrase = "a valid value"
    return f"{phrase} or null" if "null" in types else phrase


def _kind_phrase(kind: str, schema: dict) -> str:
    if kind == "string" and schema.get("minLength") == 1:
        return "a non-empty string"
    if kind in _NUMERIC_TYPES:
        low, high = schema.get("minimum"), schema.get("maximum")
        noun = _TYPE_PHRASES[kind]
        if low is not None and high is not None:
            return f"{noun} in [{low}, {high}]"
        if low is not None:
            return f"{noun} >= {low}"
        if high is not None:
            return f"{noun} <= {high}"
    return _TYPE_PHRASES[kind]


def _count_of(schema: dict, least: int) -> str:
    """'one case', '2 items': the least number of members, named after the members' title."""
    members = schema.get("items") if "items" in schema else schema.get("additionalProperties")
    title = members.get("title", "") if isinstance(members, dict) else ""
    if least != 1:
        return f"{least} {'items' if 'items' in schema else 'entries'}"
    return "one " + (re.sub(r"^(a|an) ", "", title) or ("item" if "items" in schema else "entry"))


def _type_got(schema: dict, value: object) -> str:
    """A wrong-typed value as the message shows it: a number where a number of another kind
    belongs (4.5 for an integer, NaN) shows itself, anything else its type."""
    wants_number = any(t in _NUMERIC_TYPES for t in _types(schema))
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return _shown(value) if wants_number and is_number else json_type_name(value)


def _shown(value: object) -> str:
    """A value as JSON, cut to MAX_SHOWN_CHARS."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


def _first_repeat(values: list) -> object:
    seen: list = []
    for value in values:
        if value in seen:
            return value
        seen.append(value)
    return None
