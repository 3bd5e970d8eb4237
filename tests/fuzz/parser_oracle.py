"""The reference the differential fuzzer (parser_differential_fuzzer.c) holds the strict parser
to, block by block: the record rules (transforms/records.py `judge_line`) and json.loads, as
tests/test_case_columns.py holds it on generated records.

A block the parser takes must be lines each of which the rules take, read as json.loads reads
them (scores to the bit), or that the rules refuse for a value only, which staging then
refuses whatever read it. Its buffers must make a valid Arrow batch, one row per line.
Any other outcome raises AssertionError, which aborts the fuzzer with the block saved.
"""

from __future__ import annotations

import json

import pyarrow as pa
from retrieval_eval.flows.sources.case_file import parsed_batch
from retrieval_eval.transforms.case_schema import CASES_SCHEMA, RETRIEVED_ITEM
from retrieval_eval.transforms.errors import NotClean
from retrieval_eval.transforms.records import judge_line
from retrieval_eval.transforms.staging import stage


def lines_of(block: bytes) -> list[bytes]:
    """The block's lines as the parser splits them: at each newline, none after a final one."""
    if not block:
        return []
    lines = block.split(b"\n")
    return lines[:-1] if block.endswith(b"\n") else lines


def as_json_loads_reads(line: bytes) -> dict:
    """The line's fields of CASES_SCHEMA as json.loads reads them, each item cut to the fields
    of RETRIEVED_ITEM and its score the double float() reads from its text, as Arrow's reader
    does (`-0` is -0.0; `relevance` is null in every line the parser takes)."""
    record = json.loads(line, parse_int=float)
    row = {name: record.get(name) for name in CASES_SCHEMA.names}
    if row["retrieved_context"] is not None:
        items = [{field.name: item.get(field.name) for field in RETRIEVED_ITEM} for item in row["retrieved_context"]]
        for item in items:
            if item["score"] is not None:
                item["score"] = float(item["score"])
        row["retrieved_context"] = items
    return row


def exact(value: object) -> object:
    """The value with each float as its hex text, so -0.0 and 0.0 (or two near doubles) differ."""
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, dict):
        return {key: exact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [exact(item) for item in value]
    return value


def check(block: bytes, parsed: tuple | None) -> None:
    if parsed is None:
        return  # refused: the line-by-line rules judge the file, which is always safe
    batch = parsed_batch(parsed)
    batch.validate(full=True)  # offsets in bounds, UTF-8 text, validity bitmaps that fit
    lines = lines_of(block)
    assert batch.num_rows == len(lines), (batch.num_rows, len(lines))
    for row, line in enumerate(lines):
        verdict = judge_line(line)
        if verdict.reason is None:
            ours, theirs = batch.slice(row, 1).to_pylist()[0], as_json_loads_reads(line)
            assert exact(ours) == exact(theirs), (line, ours, theirs)
            continue
        assert not verdict.reason.startswith("not valid"), (line, verdict.reason)
        try:
            stage(pa.Table.from_batches([batch.slice(row, 1)]))
        except NotClean:
            continue
        raise AssertionError(f"taken, and refused by the rules only for its values ({verdict.reason}), "
                             f"yet staging takes it: {line!r}")
