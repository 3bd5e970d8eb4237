"""`retrieval-eval query`: ad-hoc SQL over the warehouse views that cannot harm or leak
(SPEC 10). Only read statements run; DuckDB's own settings limit file access to the
warehouse folder and are then locked; results stream to the output in batches, so a query of
millions of rows holds one batch at a time in every format."""

from __future__ import annotations

import csv
import json
import math
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import duckdb

from ...transforms.errors import InputError
from ...transforms.escaping import terminal_text
from ...transforms.tables import Table, layout_text
from ..warehouse.committed import read_state
from ..warehouse.views import add_views, as_damage
from ..warehouse.warehouse import State, Warehouse

READ_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
FETCH_ROWS = 10_000
TABLE_WIDTH_ROWS = 1_000  # the table format sets its column widths from this many rows


def read_only_statement(text: str) -> str:
    """The one read statement of `text`; anything else is bad input."""
    try:
        statements = duckdb.extract_statements(text)
    except duckdb.Error as error:
        raise InputError(f"query: {error}") from None
    if not statements:
        raise InputError("query: no SQL statement given (empty or only comments)")
    if len(statements) > 1:
        raise InputError(f"query: give one statement, got {len(statements)}")
    statement = statements[0]
    if statement.type not in READ_STATEMENTS:
        kind = statement.type.name.replace("_STATEMENT", "").lower()
        raise InputError(f"query: only read statements (select, explain) run here, got {kind}")
    if statement.type == duckdb.StatementType.EXPLAIN and not _explains_a_select(statement.query):
        # EXPLAIN ANALYZE runs the statement it explains: that one must be a read too.
        raise InputError("query: explain runs here on a select only")
    return statement.query


def _explains_a_select(query: str) -> bool:
    """Whether an EXPLAIN statement explains one SELECT: what follows `explain` and its
    `analyze`, found by DuckDB's own tokenizer (comments skipped), read either as a statement
    or, when it opens with a bracket, also past that bracket's group (the options of
    `EXPLAIN (FORMAT json) ...`, or the brackets of `EXPLAIN (SELECT 1)`)."""
    tokens = duckdb.tokenize(query)
    words = [(at, kind, query[at:tokens[i + 1][0] if i + 1 < len(tokens) else len(query)].strip())
             for i, (at, kind) in enumerate(tokens) if kind != duckdb.token_type.comment]
    i = 1  # words[0] is `explain`
    if i < len(words) and words[i][2].lower() in ("analyze", "analyse"):
        i += 1
    starts = [i]
    if i < len(words) and words[i][1] == duckdb.token_type.operator and words[i][2].startswith("("):
        depth = 0
        for j in range(i, len(words)):
            if words[j][1] == duckdb.token_type.operator:
                depth += words[j][2].count("(") - words[j][2].count(")")
            if depth <= 0:
                starts.append(j + 1)
                break
    for start in starts:
        if start >= len(words):
            continue
        try:
            explained = duckdb.extract_statements(query[words[start][0]:])
        except duckdb.Error:
            continue
        if len(explained) == 1 and explained[0].type == duckdb.StatementType.SELECT:
            return True
    return False


@contextmanager
def sandboxed(warehouse: Warehouse, state: State) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory connection with the warehouse's views that reads only the warehouse. DuckDB
    also lets a connection read its spill folder (by default `.tmp` in the working directory,
    which may hold anything): here that is a folder of its own, empty, removed after."""
    with tempfile.TemporaryDirectory(prefix="retrieval-eval-query-") as spill, duckdb.connect() as con:
        add_views(con, warehouse, state)
        con.execute("set temp_directory = $dir", {"dir": spill})
        con.execute("set allowed_directories = $dirs", {"dirs": [str(folder) + "/" for folder in warehouse.read_folders()]})
        con.execute("set enable_external_access = false")
        con.execute("set autoinstall_known_extensions = false")
        con.execute("set autoload_known_extensions = false")
        con.execute("set lock_configuration = true")
        yield con


def _rows(cursor: duckdb.DuckDBPyConnection) -> Iterator[list[tuple]]:
    while rows := cursor.fetchmany(FETCH_ROWS):
        yield rows


def _cell(value) -> str:
    """A value as a table cell: control characters shown as escapes, on every row."""
    return "" if value is None else terminal_text(str(value))


def run_query(warehouse: Warehouse, text: str, output_format: str, out: TextIO = sys.stdout) -> int:
    """Run one read statement and stream its rows to `out`; returns the number of rows."""
    statement = read_only_statement(text)
    state = read_state(warehouse)
    with sandboxed(warehouse, state) as con:
        try:
            cursor = con.execute(statement)
            columns = [d[0] for d in cursor.description or []]
            writers = {"json": _write_json, "csv": _write_csv, "table": _write_table}
            return writers[output_format](columns, _rows(cursor) if columns else iter(()), out)
        except duckdb.Error as error:  # the statement's own, or a damaged part's (named with its run)
            # A user's statement raises InvalidInputException of its own (`error('x')`, bad JSON
            # text): only one naming a part is damage; the other kinds are looked for by digest.
            search = not isinstance(error, duckdb.InvalidInputException)
            raise as_damage(warehouse, state, error, search=search) or InputError(f"query failed: {error}") from None


def _json_row(columns: list[str], row: tuple) -> str:
    """One row as strict JSON: NaN and ±Infinity (which JSON has no word for) are null."""
    record = dict(zip(columns, row, strict=True))
    try:
        return json.dumps(record, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(record), default=str, allow_nan=False)


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _write_json(columns: list[str], batches: Iterator[list[tuple]], out: TextIO) -> int:
    n = 0
    out.write("[")
    for rows in batches:
        for row in rows:
            out.write(("," if n else "") + "\n  " + _json_row(columns, row))
            n += 1
    out.write("\n]\n" if n else "]\n")
    return n


def _write_csv(columns: list[str], batches: Iterator[list[tuple]], out: TextIO) -> int:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    n = 0
    for rows in batches:
        writer.writerows(rows)
        n += len(rows)
    return n


def _write_table(columns: list[str], batches: Iterator[list[tuple]], out: TextIO) -> int:
    """Aligned columns, their widths set by the first rows (a wider cell later stretches its
    line only), then a count."""
    head: list[list[str]] = []
    n = 0
    widths = None
    for rows in batches:
        for row in rows:
            cells = [_cell(value) for value in row]
            n += 1
            if widths is None:
                head.append(cells)
                if len(head) < TABLE_WIDTH_ROWS:
                    continue
                widths = _flush_head(columns, head, out)
                continue
            out.write(_line(cells, widths) + "\n")
    if widths is None:
        _flush_head(columns, head, out)
    out.write(f"({n} row{'s' if n != 1 else ''})\n")
    return n


def _flush_head(columns: list[str], head: list[list[str]], out: TextIO) -> list[int]:
    table = Table(columns, head, len(columns))
    out.write(layout_text(table) + "\n")
    widths = [len(terminal_text(h)) for h in columns]
    for row in head:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    return widths


def _line(cells: list[str], widths: list[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
