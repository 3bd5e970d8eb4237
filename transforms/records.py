"""The record rules of a cases.jsonl (SPEC 3 and 6), applied line by line.

Ingest reads a clean file with Arrow's JSON reader alone; only when that pass meets a
record it cannot take (transforms/ingest.py) does it come here, to name every bad record by
its line and keep the good ones. Every record these rules accept, the fast pass accepts
too: what Arrow's reader refuses beyond SPEC 3's types — a field the metrics read written
twice in one object, an unpaired UTF-16 surrogate escape anywhere — is a rule here as well.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from transforms.errors import Reject

REQUIRED_TEXT_FIELDS = ("case_id", "locale", "category")
GOLD_FIELDS = ("must_cite_one_of", "relevant_ids")
RECORD_FIELDS = frozenset((*REQUIRED_TEXT_FIELDS, *GOLD_FIELDS, "retrieved_context"))
ITEM_FIELDS = frozenset(("id", "parent_id", "score"))
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# The record-size limit: a longer line is rejected by its line number (and only its first
# KiB kept in `rejects`), never read whole. The clean copy of the valid lines is then read
# with Arrow blocks as long as its longest line (see ingest).
MAX_RECORD_BYTES = 64 * 1024 * 1024


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _type_name(value: object) -> str:
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


def _repeated(obj: dict, fields: frozenset[str]) -> str | None:
    repeated = sorted(getattr(obj, "repeated", frozenset()) & fields)
    return f"field {repeated[0]} is written twice" if repeated else None


def _has_lone_surrogate(value: object) -> bool:
    """Whether a string anywhere in `value` (keys included) holds an unpaired surrogate;
    json.loads joins escaped pairs, so any surrogate left is alone."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _finite(number: float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # an integer beyond any double
        return False


def record_problem(record: object) -> str | None:
    """Why a parsed record is rejected, or None when it is valid."""
    if not isinstance(record, dict):
        return f"record is a JSON {_type_name(record)}, not an object"
    problem = _repeated(record, RECORD_FIELDS)
    if problem:
        return problem
    for name in REQUIRED_TEXT_FIELDS:
        if record.get(name) is None:
            return f"missing required field {name}"
        if not isinstance(record[name], str):
            return f"field {name} must be a string, got {_type_name(record[name])}"
        if record[name] == "":
            return f"field {name} is empty"
    for name in GOLD_FIELDS:
        gold = record.get(name)
        if gold is None:
            continue
        if not isinstance(gold, list):
            return f"field {name} must be a list of card ids, got {_type_name(gold)}"
        for i, card_id in enumerate(gold):
            if not isinstance(card_id, str) or card_id == "":
                return f"field {name}[{i}] must be a non-empty string, got {_type_name(card_id)}"
    context = record.get("retrieved_context")
    if context is None:
        return None
    if not isinstance(context, list):
        return f"field retrieved_context must be a list, got {_type_name(context)}"
    for i, item in enumerate(context):
        problem = _item_problem(item)
        if problem:
            return f"retrieved_context[{i}]: {problem}"
    return None


def _item_problem(item: object) -> str | None:
    if not isinstance(item, dict):
        return f"item is a JSON {_type_name(item)}, not an object"
    problem = _repeated(item, ITEM_FIELDS)
    if problem:
        return problem
    item_id = item.get("id")
    if item_id is None:
        return "item has no id"
    if not isinstance(item_id, str) or item_id == "":
        return f"field id must be a non-empty string, got {_type_name(item_id)}"
    parent = item.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        return f"field parent_id must be a string, got {_type_name(parent)}"
    score = item.get("score")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float):
            return f"field score must be a number, got {_type_name(score)}"
        if not _finite(score):
            return f"field score must be finite, got {score}"
    return None


@dataclass
class LineAccount:
    """What became of every line of one cases file: loaded + rejected + blank = lines."""

    lines: int = 0
    blank: int = 0
    valid: int = 0
    longest_valid: int = 0  # bytes of the longest valid line
    rejects: list[Reject] = field(default_factory=list)


def open_text_lines(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _read_lines(stream: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Lines as bytes, each with whether it overflowed MAX_RECORD_BYTES (then cut short)."""
    while True:
        line = stream.readline(MAX_RECORD_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_RECORD_BYTES and not line.endswith(b"\n"):
            while True:  # skip the rest of the overlong line without holding it
                rest = stream.readline(MAX_RECORD_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
            yield line, True
        else:
            yield line, False


def split_records(path: Path, display_name: str, clean_out: IO[bytes]) -> LineAccount:
    """Apply the record rules to every line of `path`; write the valid lines to `clean_out`."""
    account = LineAccount()
    first_line_of: dict[str, int] = {}
    with open_text_lines(path) as stream:
        for number, (line, overlong) in enumerate(_read_lines(stream), start=1):
            account.lines = number
            raw = line.decode("utf-8", errors="replace").rstrip("\r\n")
            if overlong:
                account.rejects.append(
                    Reject(display_name, number, f"record longer than {MAX_RECORD_BYTES} bytes", raw[:1024])
                )
                continue
            if not line.strip(b" \t\r\n"):  # blank: JSON whitespace only
                account.blank += 1
                continue
            reason = _line_problem(line, number, first_line_of)
            if reason:
                account.rejects.append(Reject(display_name, number, reason, raw))
                continue
            account.valid += 1
            account.longest_valid = max(account.longest_valid, len(line))
            clean_out.write(line if line.endswith(b"\n") else line + b"\n")
    return account


def _line_problem(line: bytes, number: int, first_line_of: dict[str, int]) -> str | None:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not valid UTF-8 ({error.reason} at byte {error.start})"
    try:
        record = json.loads(text, parse_constant=_no_constants, object_pairs_hook=_object)
    except (json.JSONDecodeError, ValueError, RecursionError) as error:
        return f"not valid JSON ({error})"
    if SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(record):
        return "not valid JSON (an unpaired UTF-16 surrogate escape)"
    problem = record_problem(record)
    if problem:
        return problem
    case_id = record["case_id"]
    if case_id in first_line_of:
        return f"case_id {case_id!r} repeats line {first_line_of[case_id]}"
    first_line_of[case_id] = number
    return None
