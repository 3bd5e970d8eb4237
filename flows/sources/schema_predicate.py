"""A JSON Schema compiled into one yes/no function, for the common case: a valid document.

jsonschema's descent (a validator built for each subschema it enters, every `$ref` looked up
again) is slow on a baseline of many cases; the compiled function is a closure per keyword.
It is exact, not a guess: each keyword our schemas use is stated here as 2020-12 states it,
with the project's stricter integer and number (flows/sources/schemas.py). A schema holding any other
keyword (or an `$id` below its root, which would move where `$ref`s point) is not compiled,
and a value it cannot compare exactly (a list or an object in `enum`, `const` or
`uniqueItems`) raises `Unsure`. Either way, and whenever it answers no, flows/sources/schemas.py asks
jsonschema, whose messages are the answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

Check = Callable[[object], bool]

# Keywords that say nothing about validity (and `$defs`, only a place `$ref` points into).
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "$defs", "title", "description", "default", "examples"})


class Unsure(Exception):
    """A value the compiled check cannot compare exactly: ask jsonschema."""


def is_integer(value: object) -> bool:
    """An integer as the loaders read one: written without a fraction or exponent."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite number (Python's json reads NaN, Infinity and 1e400 as floats that are not)."""
    return is_integer(value) or (isinstance(value, float) and math.isfinite(value))


TYPES: dict[str, Check] = {
    "null": lambda value: value is None,
    "boolean": lambda value: isinstance(value, bool),
    "integer": is_integer,
    "number": is_number,
    "string": lambda value: isinstance(value, str),
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
}


def json_equal(one: object, two: object) -> bool:
    """Equality of two JSON scalars as 2020-12 means it: 1 equals 1.0, true does not equal 1."""
    if isinstance(one, list | dict) or isinstance(two, list | dict):
        raise Unsure
    if isinstance(one, bool) or isinstance(two, bool):
        return isinstance(one, bool) and isinstance(two, bool) and one == two
    if one is None or two is None:
        return one is None and two is None
    if isinstance(one, str) or isinstance(two, str):
        return isinstance(one, str) and isinstance(two, str) and one == two
    return one == two


def compile_schema(root: dict, formats: dict[str, Callable[[object], bool]]) -> Check | None:
    """The check of `root` (its `$ref`s point into it as `#/...`), or None when it holds a
    keyword this module does not state; `formats` holds the format checks that assert."""
    compiled: dict[str, Check | None] = {}

    def referenced(pointer: str) -> Check:
        if pointer not in compiled:
            compiled[pointer] = None  # being built: a reference back to it is resolved when called
            compiled[pointer] = build(_pointed(root, pointer))
        done = compiled[pointer]
        return done if done is not None else lambda value: compiled[pointer](value)

    def build(schema: object, top: bool = False) -> Check:
        if schema is True:
            return lambda value: True
        if schema is False:
            return lambda value: False
        if not isinstance(schema, dict) or ("$id" in schema and not top):
            raise _Unsupported(repr(schema)[:60])
        bounded = _bounded_scalar(schema)
        if bounded is not None:
            return bounded
        checks = [keyword(name, argument, schema) for name, argument in schema.items() if name not in ANNOTATIONS]
        checks = [check for check in checks if check is not None]
        if len(checks) == 1:
            return checks[0]

        def every(value: object) -> bool:
            for check in checks:
                if not check(value):
                    return False
            return True
        return every

    def keyword(name: str, argument, schema: dict) -> Check | None:
        if name == "type":
            names = [argument] if isinstance(argument, str) else list(argument)
            if not set(names) <= TYPES.keys():
                raise _Unsupported(f"type {argument!r}")
            kinds = [TYPES[kind] for kind in names]
            return kinds[0] if len(kinds) == 1 else lambda value: any(kind(value) for kind in kinds)
        if name == "$ref":
            return referenced(argument)
        if name == "properties":
            named = [(key, build(sub)) for key, sub in argument.items()]

            def properties(value: object) -> bool:
                if isinstance(value, dict):
                    for key, check in named:
                        if key in value and not check(value[key]):
                            return False
                return True
            return properties
        if name == "additionalProperties":
            known, extra = set(schema.get("properties", {})), build(argument)

            def additional(value: object) -> bool:
                if isinstance(value, dict):
                    for key, item in value.items():
                        if key not in known and not extra(item):
                            return False
                return True
            return additional
        if name == "required":
            return lambda value: not isinstance(value, dict) or all(key in value for key in argument)
        if name == "propertyNames":
            names = build(argument)
            return lambda value: not isinstance(value, dict) or all(names(key) for key in value)
        if name == "minProperties":
            return lambda value: not isinstance(value, dict) or len(value) >= argument
        if name == "items":
            each = build(argument)
            return lambda value: not isinstance(value, list) or all(each(item) for item in value)
        if name == "minItems":
            return lambda value: not isinstance(value, list) or len(value) >= argument
        if name == "uniqueItems":
            return None if not argument else _unique
        if name == "minimum":
            return lambda value: not is_number(value) or value >= argument
        if name == "maximum":
            return lambda value: not is_number(value) or value <= argument
        if name == "minLength":
            return lambda value: not isinstance(value, str) or len(value) >= argument
        if name == "pattern":
            pattern = re.compile(argument)
            return lambda value: not isinstance(value, str) or pattern.search(value) is not None
        if name == "format":
            return formats.get(argument)  # a format without a check asserts nothing, as in jsonschema
        if name == "enum":
            return lambda value: any(json_equal(value, choice) for choice in argument)
        if name == "const":
            return lambda value: json_equal(value, argument)
        if name == "not":
            inner = build(argument)
            return lambda value: not inner(value)
        if name == "anyOf":
            options = [build(sub) for sub in argument]
            return lambda value: any(option(value) for option in options)
        if name == "allOf":
            parts = [build(sub) for sub in argument]
            return lambda value: all(part(value) for part in parts)
        if name == "if":
            condition = build(argument)
            then, otherwise = build(schema.get("then", True)), build(schema.get("else", True))
            return lambda value: then(value) if condition(value) else otherwise(value)
        if name in ("then", "else"):
            return None  # taken with its `if` (alone, 2020-12 ignores them)
        raise _Unsupported(name)

    try:
        return build(root, top=True)
    except _Unsupported:
        return None


def _bounded_scalar(schema: dict) -> Check | None:
    """One function for the commonest subschema, a number or a string with its bounds alone
    (a metric in [0, 1], a non-empty id): its type is tested once, not again by each bound."""
    kind, rest = schema.get("type"), set(schema) - ANNOTATIONS - {"type"}
    if kind in ("number", "integer") and rest <= {"minimum", "maximum"}:
        is_kind, low, high = TYPES[kind], schema.get("minimum", -math.inf), schema.get("maximum", math.inf)
        return lambda value: is_kind(value) and low <= value <= high
    if kind == "string" and rest <= {"minLength"}:
        least = schema.get("minLength", 0)
        return lambda value: isinstance(value, str) and len(value) >= least
    return None


def _pointed(root: dict, pointer: str) -> object:
    """The subschema a `$ref` of the document itself (`#/$defs/name`, `#`) points to."""
    if not pointer.startswith("#"):
        raise _Unsupported(pointer)
    target: object = root
    for part in filter(None, pointer[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise _Unsupported(pointer)
        target = target[part]
    return target


def _unique(value: object) -> bool:
    if not isinstance(value, list):
        return True
    if not all(isinstance(item, str) for item in value):
        raise Unsure
    return len(set(value)) == len(value)


class _Unsupported(Exception):
    """A keyword or reference the compiled check does not state: the schema is not compiled."""
