"""The records of a format's input file, one at a time, so memory stays bounded on a large
export: JSONL line by line, CSV row by row, Parquet in row batches (pyarrow's
`ParquetFile.iter_batches`). Each record comes with its 1-based position among the file's
records (what `row-N` counts: every record, rejected or not; blank JSONL lines are not
records) and its origin, or with the reason it cannot be read as a record."""

from __future__ import annotations

import ast
import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ....transforms.deep_json import too_deep
from ....transforms.errors import InputError
from ....transforms.records import MAX_RECORD_BYTES, strict_json_loads
from ..case_file import bounded_lines
from .record import line_origin, row_origin

PARQUET_BATCH_ROWS = 1024
LINE_SUFFIXES = (".jsonl", ".ndjson")
CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
# The deepest nesting of containers a format's JSON (or a CSV cell's list) may hold: an export
# nests a few levels (OpenInference's documents and their metadata); deeper is bad input.
MAX_JSON_DEPTH = 64


@dataclass(frozen=True)
class InputRow:
    """One record: `values` (its fields) or `problem` (why it is no record), never both."""

    position: int
    origin: str
    values: dict | None = None
    problem: str | None = None


def json_text(text: str) -> object:
    """Strict JSON, as the project reads every document it keeps (transforms/records.py
    `strict_json_loads`): NaN, ±Infinity, a key written twice, an unpaired surrogate escape or
    nesting deeper than MAX_JSON_DEPTH make a text not JSON (ValueError, naming where)."""
    return strict_json_loads(text, MAX_JSON_DEPTH)


def jsonl_rows(path: Path) -> Iterator[InputRow]:
    """The objects of a JSONL file, a line at a time; a line longer than the record limit is
    a problem by its line number, never held whole."""
    position = 0
    with open(path, "rb") as handle:
        for line, (raw, overlong) in enumerate(bounded_lines(handle), start=1):
            if overlong:
                position += 1
                yield InputRow(position, line_origin(path, line), problem=f"line longer than {MAX_RECORD_BYTES} bytes")
                continue
            if not raw.strip():
                continue
            position += 1
            origin = line_origin(path, line)
            try:
                values = json_text(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as error:
                yield InputRow(position, origin, problem=f"not JSON ({error})")
                continue
            if not isinstance(values, dict):
                yield InputRow(position, origin, problem="not a JSON object")
                continue
            yield InputRow(position, origin, values)


def python_list_cell(cell: str) -> object:
    """A CSV cell holding a list, as ragas' `to_csv` writes it (Python's repr of the list) or
    as JSON: read with `ast.literal_eval` (literals only, never code), else as JSON. An empty
    cell is no value."""
    if not cell.strip():
        return None
    try:
        value = ast.literal_eval(cell)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return json_text(cell)
    if too_deep(value, MAX_JSON_DEPTH) is not None:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def csv_rows(path: Path, list_columns: tuple[str, ...]) -> Iterator[InputRow]:
    """The rows of a CSV file with a header; the cells of `list_columns` are decoded as lists
    (python_list_cell), every other cell is text, an empty one no value."""
    csv.field_size_limit(MAX_RECORD_BYTES)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            for position, row in enumerate(reader, start=1):
                origin = row_origin(path, position)
                if None in row or None in row.values():
                    yield InputRow(position, origin, problem=f"has another number of cells than the header's {len(reader.fieldnames or ())}")
                    continue
                values: dict = {}
                problem = None
                for column, cell in row.items():
                    if column not in list_columns:
                        values[column] = cell if cell != "" else None
                        continue
                    try:
                        values[column] = python_list_cell(cell)
                    except ValueError:
                        problem = f"column {column}: not a list (a Python literal or JSON)"
                        break
                yield InputRow(position, origin, problem=problem) if problem else InputRow(position, origin, values)
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except csv.Error as error:
        raise InputError(f"{path}: not a readable CSV file ({error})") from None


def parquet_rows(path: Path) -> Iterator[InputRow]:
    """The rows of a Parquet file, read in batches of PARQUET_BATCH_ROWS rows."""
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(f"{path}: not a readable Parquet file ({error})") from None
    position = 0
    with parquet:
        try:
            for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
                for values in batch.to_pylist():
                    position += 1
                    yield InputRow(position, row_origin(path, position), values)
        except (pa.ArrowException, OSError) as error:
            raise InputError(f"{path}: not a readable Parquet file after row {position} ({error})") from None


def require_file(path: Path, option: str) -> Path:
    """`path`, when it is a file; else bad input naming it and the option that gave it."""
    if not path.is_file():
        raise InputError(f"{path}: no such file ({option})")
    return path


def table_rows(path: Path, *, list_columns: tuple[str, ...], kinds: str) -> Iterator[InputRow]:
    """The records of a JSONL, CSV or Parquet input, by its file name's suffix; another
    suffix is bad input (`kinds` says which the format takes)."""
    require_file(path, "--source input")
    suffix = path.suffix.lower()
    if suffix in LINE_SUFFIXES:
        return jsonl_rows(path)
    if suffix in CSV_SUFFIXES:
        return csv_rows(path, list_columns)
    if suffix in PARQUET_SUFFIXES:
        return parquet_rows(path)
    raise InputError(f"{path}: not a file this format reads ({kinds}, by the file name's suffix)")


def json_document(path: Path, option: str = "--source input") -> object:
    """A whole JSON file (the formats that store one document: BEIR and ranx runs, MLflow's
    `log_table`, DeepEval's test run); a file that is not strict JSON is bad input."""
    require_file(path, option)
    with open(path, "rb") as handle:
        data = handle.read()
    if not data.strip():
        raise InputError(f"{path}: is empty, not a JSON document ({option})")
    try:
        return json_text(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except ValueError as error:
        raise InputError(f"{path}: not JSON ({error})") from None
