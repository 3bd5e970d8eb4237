"""catalog.duckdb: the warehouse's views for people (`duckdb data/warehouse/catalog.duckdb`),
made from the transaction log (flows/warehouse.py) and never read by retrieval-eval itself.

It is written whole beside the old one and moved into place, so a reader holding the old
file open keeps its snapshot and a writer never waits on it. It is stored in DuckDB's
v1.0.0 format so that the DuckDB command-line tool users install with pip opens it; its
views name files by absolute path (they answer from any working directory), and the log
version and root it was made for are kept in `_retrieval_eval`, so that any command finds
it stale after a commit it missed or a move of the folder, and makes it again.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import duckdb
import polars as pl

from .views import DamagedPart, checked_parts, derived_select_list
from .warehouse import TABLES, State, Warehouse, union_by_name

STORAGE_VERSION = "v1.0.0"  # readable by DuckDB 1.x and 2.x
META_TABLE = "_retrieval_eval"  # warehouse_id, log_version, root


# What a catalog this project made holds; anything else in it is a user's own (a table, a
# view), which a catalog written anew would drop: such a file is moved aside, never overwritten.
OWN_TABLES = [META_TABLE, "_partitions"]
_OTHER_OBJECTS = """
    select table_name from duckdb_tables() where not internal and not list_contains($tables, table_name)
    union all
    select view_name from duckdb_views() where not internal and not list_contains($views, view_name)
"""


def _others(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [row[0] for row in con.execute(_OTHER_OBJECTS, {"tables": OWN_TABLES, "views": list(TABLES)}).fetchall()]


def _made_for(path: Path) -> tuple | None:
    """(warehouse_id, log_version, root) an existing catalog was made for; None when there is
    no file, it holds no such record, or it holds objects of someone else's."""
    if not path.exists():
        return None
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            return None if _others(con) else con.execute("select warehouse_id, log_version, root from _retrieval_eval").fetchone()
    except duckdb.Error:
        return None


def _view_ddl(table: str, files: list[str], by_name: bool) -> str:
    # DuckDB refuses bind parameters in CREATE VIEW, so the file list is a literal rendered and
    # quoted by DuckDB itself; `table` is one of the fixed TABLES, and its select list is the
    # views' own (flows/views.py `derived_select_list`).
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}")
    columns = derived_select_list(table) or "*"
    return (
        "create view catalog." + table + " as select " + columns + " from read_parquet("
        + str(duckdb.ConstantExpression(files))
        + (", union_by_name = true)" if by_name else ")")
    )


def _owned(path: Path, warehouse_id: str | None) -> bool:
    """Whether an existing catalog file is this warehouse's (else it is moved aside, never
    overwritten: it may hold someone's own tables)."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            tables = {row[0] for row in con.execute("select table_name from duckdb_tables()").fetchall()}
            if _others(con):
                return False
            if META_TABLE in tables:
                row = con.execute("select warehouse_id from _retrieval_eval").fetchone()
                return row is not None and row[0] == warehouse_id  # an emptied record: not ours
            return "_partitions" in tables  # made by an earlier version of retrieval-eval
    except duckdb.IOException as error:
        return "lock" in str(error).lower()  # held open by a reader: ours, in use
    except duckdb.Error:
        return False


def write_catalog(warehouse: Warehouse, state: State, *, owned: bool = False) -> None:
    """Make catalog.duckdb for `state`: written aside, then moved over the old one (`owned`:
    the caller has read that the file there is this warehouse's)."""
    target = warehouse.catalog_path
    aside = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        con = duckdb.connect()
        try:
            con.execute("attach $path as catalog (storage_version $version)", {"path": str(aside), "version": STORAGE_VERSION})
            con.execute("create table catalog._retrieval_eval (warehouse_id varchar, log_version bigint, root varchar)")
            con.execute(
                "insert into catalog._retrieval_eval values ($id, $version, $root)",
                {"id": state.warehouse_id, "version": state.version, "root": str(warehouse.root)},
            )
            rows = [(table, run_id, part.path) for run_id, run in sorted(state.runs.items()) for table, part in run.files()]
            partitions = pl.DataFrame(rows, schema=["table_name", "run_id", "path"], orient="row")
            con.register("partitions", partitions)
            con.execute("create table catalog._partitions as select * from partitions")
            for table in TABLES:
                parts = state.files(table)
                if parts:
                    try:
                        con.execute(_view_ddl(table, [str(warehouse.root / p.path) for p in parts], union_by_name(parts)))
                    except duckdb.Error:
                        # A part DuckDB could not read is named with its run (DamagedPart), as
                        # every reader names it; raised as it is when none differs from its commit.
                        checked_parts(warehouse, state, table)
                        raise
            con.execute("detach catalog")
        finally:
            con.close()
        if target.exists() and not (owned or _owned(target, state.warehouse_id)):
            foreign = target.with_name(f"{target.name}.foreign-{uuid.uuid4().hex[:8]}")
            os.replace(target, foreign)
            print(f"retrieval-eval: {target} was not this warehouse's catalog, or held tables or views of someone "
                  f"else's; moved it to {foreign.name}", file=sys.stderr)
        os.replace(aside, target)
        target.with_name(target.name + ".wal").unlink(missing_ok=True)
    finally:
        aside.unlink(missing_ok=True)
        aside.with_name(aside.name + ".wal").unlink(missing_ok=True)


def refresh_catalog(warehouse: Warehouse, state: State, *, announce: bool = False) -> bool:
    """Make the catalog when it is not current; with `announce`, say so when it was missing,
    unreadable or made for another folder (not merely behind a commit). A failure (a full
    disk, a read-only folder) is a warning, never a lost commit: the log holds the truth.
    Returns whether the catalog is current. The catalog is opened once for both questions
    (is it current, is it ours): each open of a DuckDB file costs ~35 ms."""
    made_for = _made_for(warehouse.catalog_path)
    if made_for == (state.warehouse_id, state.version, str(warehouse.root)):
        return True
    if not state.runs:
        return False
    why = _why_stale(warehouse, made_for) if announce else None
    try:
        write_catalog(warehouse, state, owned=made_for is not None and made_for[0] == state.warehouse_id)
    except DamagedPart as damage:
        print(f"retrieval-eval: warning: {warehouse.catalog_path} not made: {damage}", file=sys.stderr)
        return False
    except (OSError, duckdb.Error) as error:
        print(f"retrieval-eval: warning: could not write {warehouse.catalog_path} ({error}); "
              "the warehouse is committed, `retrieval-eval warehouse rebuild` makes it again",
              file=sys.stderr)
        return False
    if why:
        print(f"retrieval-eval: {warehouse.catalog_path} was {why}; made it again from the transaction log",
              file=sys.stderr)
    return True


def _why_stale(warehouse: Warehouse, made_for: tuple | None) -> str | None:
    """Why the catalog is not current, when it is more than a commit behind (`made_for`: what
    the file there was made for)."""
    if not warehouse.catalog_path.exists():
        return "missing"
    if made_for is None:
        return "unreadable or not this warehouse's"
    root = made_for[2]
    return f"made for {root}" if root != str(warehouse.root) else None
