"""Reading the warehouse: DuckDB connections whose views are made from the transaction log at
the warehouse's present root (so a moved or copied folder answers as it is), over only the
runs a command needs, with every part it reads checked against what was committed.

A missing, truncated or corrupt part is named with its run (exit 2, with what to do);
`warehouse check` (flows/warehouse/warehouse_check.py) verifies every part in full.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from ...transforms.errors import InputError
from ...transforms.run_summary import IDENTITY_COUNTS
from ..storage.duckdb_connection import connect
from ..storage.errors import CorruptObject, NotFound
from ..storage.hashing import file_digest
from .warehouse import TABLES, PartFile, State, Warehouse, union_by_name

HEAL = ("re-run `retrieval-eval run` over the run's artifacts to evaluate it again, "
        "or see `retrieval-eval warehouse check`")

# Columns added after the first warehouse format, and what a run committed before them reads
# as: a run whose folder is no longer in RUNS is never evaluated again, so its parts keep the
# columns of the version that wrote them. Each: (name, its null, what it is derived from the
# old columns when they are there (None: nothing), those columns). The case explorer lists no
# cards for a run without top_cards.
LATER_COLUMNS: dict[str, tuple[tuple[str, str, str | None, tuple[str, ...]], ...]] = {
    "runs": (
        ("created_at_utc", "NULL::TIMESTAMPTZ", "try_cast(created_at AS TIMESTAMPTZ)", ("created_at",)),
        ("relevance_level", "NULL::BIGINT", "1::BIGINT", ()),  # every run was binary then
        ("kb_uri", "NULL::VARCHAR", None, ()),  # no KB recorded (flows/inputs/kb.py `recorded_kb`)
        ("kb_digest", "NULL::VARCHAR", None, ()),
        # SPEC 15's identity counts: null for every run but another tool's
        *((name, "NULL::BIGINT", None, ()) for name in IDENTITY_COUNTS),
    ),
    "cases": (
        ("question", "NULL::VARCHAR", None, ()),
        ("graded_ranks", "NULL::STRUCT(rank INTEGER, grade BIGINT)[]",
         "list_transform(relevant_ranks, lambda r: {'rank': r::INTEGER, 'grade': 1::BIGINT})", ("relevant_ranks",)),
        ("ideal_gains", "NULL::BIGINT[]", "list_transform(range(n_gold), lambda i: 1::BIGINT)", ("n_gold",)),
        ("top_cards", "NULL::VARCHAR[]", None, ()),
        ("top_scores", "NULL::DOUBLE[]", None, ()),
    ),
    "case_metrics": (
        ("gains_at_k", "NULL::STRUCT(rank INTEGER, grade BIGINT)[]", None, ()),
    ),
    "rejects": (
        ("unit", "NULL::VARCHAR", "'line'", ()),  # every reject was a line then
    ),
}


# Columns a view computes rather than reads: a part written by an earlier version stores one,
# which the view computes again by the same rule, so every run reads alike. `retrieved` keeps
# card identity (SPEC 2.1) out of its parts, where it repeated parent_id's bytes: a fifth of
# the CPU of writing them.
DERIVED_COLUMNS: dict[str, dict[str, str]] = {
    "retrieved": {"card_id": "coalesce(nullif(parent_id, ''), chunk_id)"},
}


class DamagedPart(InputError):
    """A committed file is missing or differs from what was committed."""


def damage_message(warehouse: Warehouse, table: str, run_id: str, part: PartFile, what: str) -> str:
    return f"{warehouse.shown(part.path)}: part of table {table} of run {run_id} is {what}; {HEAL}"


def part_damage(warehouse: Warehouse, part: PartFile, *, every_byte: bool = False) -> str | None:
    """What is wrong with a part, as cheaply as it can be told: its size, and when its mtime
    is not the committed one (a part is never rewritten; a copy without -p also moves it),
    its digest. `every_byte` digests it whatever the stat says (what the gate reads, and
    `warehouse check`). A part in a bucket is fetched into the cache of parts, where its
    digest is checked once (it never changes): a second command reads it from there."""
    if warehouse.remote:
        try:
            warehouse.part_file(part)
        except NotFound:
            return "missing"
        except CorruptObject:
            return "damaged (its bytes differ from those committed)"
        return None
    path = warehouse.root / part.path
    try:
        stat = path.stat()
    except FileNotFoundError:
        return "missing"
    if stat.st_size != part.bytes:
        return f"damaged ({stat.st_size} bytes, {part.bytes} committed)"
    if (every_byte or stat.st_mtime_ns != part.mtime_ns) and file_digest(path) != part.blake3:
        return "damaged (its bytes differ from those committed)"
    return None


def checked_parts(warehouse: Warehouse, state: State, table: str, run_ids: Iterable[str] | None = None, *,
                  every_byte: bool = False) -> list[PartFile]:
    """A table's committed files for `run_ids` (all runs when None), each present as committed."""
    chosen = sorted(state.runs) if run_ids is None else [r for r in run_ids if r in state.runs]
    parts = []
    for run_id in chosen:
        for part in state.runs[run_id].tables.get(table, []):
            damage = part_damage(warehouse, part, every_byte=every_byte)
            if damage:
                raise DamagedPart(damage_message(warehouse, table, run_id, part, damage))
            parts.append(part)
    return parts


def add_views(con: duckdb.DuckDBPyConnection, warehouse: Warehouse, state: State,
              run_ids: Iterable[str] | None = None, tables: Iterable[str] = TABLES, *,
              every_byte: bool = False) -> None:
    """One view per table over the committed files of `run_ids` (all when None)."""
    chosen = None if run_ids is None else list(run_ids)
    with naming_damage(warehouse, state):
        for table in tables:
            parts = checked_parts(warehouse, state, table, chosen, every_byte=every_byte)
            if parts:
                files = [str(warehouse.part_file(part)) for part in parts]
                mixed = union_by_name(parts)
                relation = with_later_columns(con.read_parquet(files, union_by_name=mixed), table, mixed=mixed)
                with_derived_columns(relation, table).create_view(table)


def with_later_columns(relation: duckdb.DuckDBPyRelation, table: str, *, mixed: bool) -> duckdb.DuckDBPyRelation:
    """`relation` (a table's parts) with every column of LATER_COLUMNS: one no part has is
    added, derived when its sources are there, else null. When the parts' columns differ
    (`mixed`), one that only newer parts have (null in the rows of older runs) is filled
    where null, when it can be derived; parts of one schema are read as they are."""
    present = set(relation.columns)
    derived = {name: derivation for name, _, derivation, sources in LATER_COLUMNS.get(table, ())
               if derivation is not None and present.issuperset(sources)}
    added = [(name, derived.get(name, null)) for name, null, _, _ in LATER_COLUMNS.get(table, ()) if name not in present]
    filled = [name for name in relation.columns if name in derived] if mixed else []
    if not added and not filled:
        return relation
    columns = [
        duckdb.CoalesceOperator(duckdb.ColumnExpression(name), duckdb.SQLExpression(derived[name])).alias(name)
        if name in filled else duckdb.ColumnExpression(name)
        for name in relation.columns
    ]
    columns += [duckdb.SQLExpression(expression).alias(name) for name, expression in added]
    return relation.select(*columns)


def derived_select_list(table: str) -> str | None:
    """The select list of `table`'s view: every stored column but its DERIVED_COLUMNS, then
    those computed, last (None when it has none). SQL text, since the catalog's CREATE VIEW
    takes no bind parameters; its names and rules are the constants above."""
    derived = DERIVED_COLUMNS.get(table)
    if not derived:
        return None
    names = str(duckdb.ConstantExpression(list(derived)))
    return ("columns(lambda c: not list_contains(" + names + ", c)), "
            + ", ".join(rule + " as " + name for name, rule in derived.items()))


def with_derived_columns(relation: duckdb.DuckDBPyRelation, table: str) -> duckdb.DuckDBPyRelation:
    """`relation` with the DERIVED_COLUMNS of `table` computed (any stored one left out), last."""
    select = derived_select_list(table)
    return relation if select is None else relation.project(select)


def open_reader(warehouse: Warehouse, state: State, run_ids: Iterable[str] | None = None,
                tables: Iterable[str] = TABLES, *, every_byte: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with the warehouse's views (see `add_views`)."""
    con = connect()
    try:
        add_views(con, warehouse, state, run_ids, tables, every_byte=every_byte)
    except BaseException:
        con.close()
        raise
    return con


_QUOTED_PATH = re.compile(r'"([^"]+\.parquet)"|\'([^\']+\.parquet)\'|(/\S+\.parquet)')
# What DuckDB raises on bytes it cannot decode; a flipped byte in a page can also raise the
# base duckdb.Error itself ("Out of buffer", "Decode bit width too large"), naming no file.
_DATA_ERRORS = (duckdb.IOException, duckdb.InvalidInputException, duckdb.InternalException)


@contextmanager
def naming_damage(warehouse: Warehouse, state: State) -> Iterator[None]:
    """DuckDB's errors on a committed file it cannot read (a corrupt footer, a truncated page)
    raised as DamagedPart naming the file and its run."""
    try:
        yield
    except duckdb.Error as error:
        damaged = as_damage(warehouse, state, error)
        if damaged is None:
            raise
        raise damaged from None


def as_damage(warehouse: Warehouse, state: State, error: duckdb.Error, *, search: bool = True) -> DamagedPart | None:
    """`error` as the committed part it comes from, when it is DuckDB failing on a file's bytes;
    when its message names no part, the part is looked for by digest unless not `search`."""
    if not isinstance(error, _DATA_ERRORS) and type(error) is not duckdb.Error:
        return None
    owner = state.owner()
    for match in _QUOTED_PATH.finditer(str(error)):
        path = Path(next(g for g in match.groups() if g))
        try:
            relative = str(path.relative_to(warehouse.root))
        except ValueError:
            continue
        if relative in owner:
            table, run_id = owner[relative]
            part = next(p for p in state.runs[run_id].tables[table] if p.path == relative)
            return DamagedPart(damage_message(warehouse, table, run_id, part, f"unreadable ({error})"))
    if not search:
        return None
    # The message names no file: the damaged one is the part whose bytes are not those committed.
    for table in TABLES:
        try:
            checked_parts(warehouse, state, table, every_byte=True)
        except DamagedPart as damaged:
            return DamagedPart(f"{damaged} (DuckDB: {error})")
    return None
