"""json.loads for a document nested deeper than Python's recursion allows.

Arrow's reader parses a cases line of any depth (it keeps its own stack), so a line whose
ignored field nests a few thousand levels loads from a clean file; judged line by line (beside
a bad line), json.loads met RecursionError and the same record was rejected. `loads` reads
json.loads's grammar with the same hooks and json's own string and number scanners, keeping
an explicit stack instead of recursing: same values, same verdicts, any depth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json import JSONDecodeError
from json.decoder import scanstring

_WHITESPACE = re.compile(r"[ \t\n\r]*")
# JSON's digits are 0-9; json.scanner's NUMBER_RE (\d) also takes other scripts' digits, which
# json.loads (its C scanner) refuses.
NUMBER_RE = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("null", None), ("true", True), ("false", False))
PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")  # keys shown after a dot; any other is quoted in brackets
_CONSTANTS = ("NaN", "Infinity", "-Infinity")


class TooDeep(ValueError):
    """A document nested deeper than its reader allows; `path` leads to the first container
    past the limit."""

    def __init__(self, path: list[str | int], max_depth: int) -> None:
        self.path = path
        super().__init__(f"{json_path(path) or WHOLE_DOCUMENT}: nested deeper than {max_depth} levels")


WHOLE_DOCUMENT = "(the document)"  # how a message names the place of an empty path


def json_path(path: list[str | int], *, ensure_ascii: bool = True) -> str:
    """A place in a document as `key.key[index]`, "" for the document itself. A key that is not
    a plain name is quoted in JSON, by default with non-ASCII escaped, so that no character of
    it (a lone surrogate among them) is printed raw."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif PLAIN_KEY.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=ensure_ascii)}]"
    return out


def loads(text: str, *, object_pairs_hook: Callable[[list], object], parse_int: Callable[[str], object] = int,
          parse_float: Callable[[str], object] = float,
          parse_constant: Callable[[str], object] = float, max_depth: int | None = None) -> object:
    """json.loads(text, ...) with these hooks, for any depth, or raises TooDeep past
    `max_depth` containers (before reading further: memory stays bounded by the limit);
    raises JSONDecodeError."""
    stack: list[tuple[list, bool]] = []  # open containers: (items so far, is an object)
    keys: list[str] = []  # the key each open object's next value goes under
    at = _skip(text, 0)
    while True:
        value, at, opened = _value(text, at, object_pairs_hook, parse_int, parse_float, parse_constant)
        if opened is not None:  # a non-empty container: its first member comes next
            if max_depth is not None and len(stack) == max_depth:
                raise TooDeep(_open_path(stack, keys), max_depth)
            stack.append((opened, text[at - 1] == "{"))
            at = _skip(text, at)
            if stack[-1][1]:
                at = _key(text, at, keys)
            continue
        while True:  # place the value in its container, closing every container it completes
            if not stack:
                end = _skip(text, at)
                if end != len(text):
                    raise JSONDecodeError("Extra data", text, end)
                return value
            items, is_object = stack[-1]
            items.append((keys.pop(), value) if is_object else value)
            at = _skip(text, at)
            if text[at:at + 1] == ",":
                at = _skip(text, at + 1)
                if is_object:
                    at = _key(text, at, keys)
                break
            if text[at:at + 1] != ("}" if is_object else "]"):
                raise JSONDecodeError("Expecting ',' delimiter", text, at)
            at += 1
            stack.pop()
            value = object_pairs_hook(items) if is_object else items


def _open_path(stack: list[tuple[list, bool]], keys: list[str]) -> list[str | int]:
    """Where the value being read stands: under each open container, its pending key or the
    index its next item takes."""
    pending = iter(keys)
    return [next(pending) if is_object else len(items) for items, is_object in stack]


def too_deep(value: object, max_depth: int) -> list[str | int] | None:
    """The path to the first container of a parsed document that stands deeper than
    `max_depth` containers (walked with a stack: the document may nest deeper than
    recursion allows), or None."""
    pending: list[tuple[object, list[str | int]]] = [(value, [])]
    while pending:
        item, path = pending.pop()
        members = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else None
        if members is None:
            continue
        if len(path) == max_depth:
            return path
        pending.extend((member, [*path, key]) for key, member in reversed(list(members)))
    return None


def _skip(text: str, at: int) -> int:
    return _WHITESPACE.match(text, at).end()


def _key(text: str, at: int, keys: list[str]) -> int:
    if text[at:at + 1] != '"':
        raise JSONDecodeError("Expecting property name enclosed in double quotes", text, at)
    key, at = scanstring(text, at + 1, True)
    at = _skip(text, at)
    if text[at:at + 1] != ":":
        raise JSONDecodeError("Expecting ':' delimiter", text, at)
    keys.append(key)
    return _skip(text, at + 1)


def _value(text: str, at: int, object_pairs_hook, parse_int, parse_float, parse_constant):
    """The value at `at`: (value, end, None), or (None, end, []) for a container that is opened
    and not empty (its members are read by the caller's stack)."""
    char = text[at:at + 1]
    if char in ("{", "["):
        close = "}" if char == "{" else "]"
        inner = _skip(text, at + 1)
        if text[inner:inner + 1] == close:
            return (object_pairs_hook([]) if char == "{" else []), inner + 1, None
        return None, at + 1, []
    if char == '"':
        value, end = scanstring(text, at + 1, True)
        return value, end, None
    for word, value in _LITERALS:
        if text.startswith(word, at):
            return value, at + len(word), None
    number = NUMBER_RE.match(text, at)
    if number:
        integer, fraction, exponent = number.groups()
        if fraction or exponent:
            return parse_float(integer + (fraction or "") + (exponent or "")), number.end(), None
        return parse_int(integer), number.end(), None
    for word in _CONSTANTS:
        if text.startswith(word, at):
            return parse_constant(word), at + len(word), None
    raise JSONDecodeError("Expecting value", text, at)
