"""catalog.duckdb: the warehouse's views for people (`duckdb data/warehouse/catalog.duckdb`),
made from the transaction log (flows/warehouse/warehouse.py) and never read by retrieval-eval itself.

It is written whole beside the old one and moved into place, so a reader holding the old
file open keeps its snapshot and a writer never waits on it. It is stored in DuckDB's
v1.0.0 format so that the DuckDB command-line tool users install with pip opens it; its
views name files by absolute path (they answer from any working directory), and the log
version and root it was made for are kept in `_retrieval_eval`, so that any command finds
it stale after a commit it missed or a move of the folder, and makes it again.

A catalog held open read-write by another process (a user's DuckDB session, which may have
made tables of its own in it) can be neither read nor replaced safely: it is left as it is
(CatalogHeld), every command reads the parts by the log without it, and the first command
after that session closes makes it again.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import uuid
from pathlib import Path

import duckdb
import polars as pl

from ...transforms.errors import InputError
from ..storage.errors import StoreError
from .views import DamagedPart, checked_parts, derived_select_list
from .warehouse import CATALOG_NAME, TABLES, PartFile, State, Warehouse, union_by_name

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


class CatalogHeld(InputError):
    """catalog.duckdb is open read-write in another process: it is not replaced, since what
    that session holds (its own tables) cannot be read while it holds the file."""

    def __init__(self, path: Path, error: duckdb.Error) -> None:
        holder = re.search(r"\(PID (\d+)\)", str(error))
        by = f"another process (PID {holder.group(1)}, a DuckDB session?)" if holder else "another process"
        super().__init__(f"{path} is held open read-write by {by}, so it was not refreshed")


def _held(error: duckdb.Error) -> bool:
    """Whether opening the catalog failed on another process's lock (DuckDB's read-write
    session), not on the file's bytes."""
    return isinstance(error, duckdb.IOException) and "lock" in str(error).lower()


def _others(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [row[0] for row in con.execute(_OTHER_OBJECTS, {"tables": OWN_TABLES, "views": list(TABLES)}).fetchall()]


def _made_for(path: Path) -> tuple | None:
    """(warehouse_id, log_version, root) an existing catalog was made for; None when there is
    no file, it holds no such record, or it holds objects of someone else's. CatalogHeld when
    another process holds it open read-write."""
    if not path.exists():
        return None
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            return None if _others(con) else con.execute("select warehouse_id, log_version, root from _retrieval_eval").fetchone()
    except duckdb.Error as error:
        if _held(error):
            raise CatalogHeld(path, error) from None
        return None


def _view_ddl(table: str, files: list[str], by_name: bool) -> str:
    # DuckDB refuses bind parameters in CREATE VIEW, so the file list is a literal rendered and
    # quoted by DuckDB itself; `table` is one of the fixed TABLES, and its select list is the
    # views' own (flows/warehouse/views.py `derived_select_list`).
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
    overwritten: it may hold someone's own tables). CatalogHeld when another process holds it
    open read-write, whatever it was before: that session may have made tables since."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            tables = {row[0] for row in con.execute("select table_name from duckdb_tables()").fetchall()}
            if _others(con):
                return False
            if META_TABLE in tables:
                row = con.execute("select warehouse_id from _retrieval_eval").fetchone()
                return row is not None and row[0] == warehouse_id  # an emptied record: not ours
            return "_partitions" in tables  # made by an earlier version of retrieval-eval
    except duckdb.Error as error:
        if _held(error):
            raise CatalogHeld(path, error) from None
        return False


def prepare_catalog(warehouse: Warehouse) -> None:
    """Start importing what the catalog of a bucket's warehouse is made with (fsspec, 40 ms;
    a local one needs none of it) on a thread of its own: a writer calls this as it starts, so
    that the catalog it makes after its commit does not wait for the import."""
    if warehouse.remote:
        threading.Thread(target=_import_bucket_filesystem, name="catalog-import", daemon=True).start()


def _import_bucket_filesystem() -> None:
    from ..storage import duckdb_filesystem  # noqa: F401  # deferred: fsspec, for a bucket only


def _make_catalog(warehouse: Warehouse, state: State, path: Path) -> None:
    """Write a catalog for `state` at `path` (a new file): its record, its partitions, and a
    view per table naming the parts by absolute path, or by URI in a bucket."""
    con = duckdb.connect()
    try:
        if warehouse.remote:  # binding a view reads its first file's footer: from the cache of parts
            from ..storage.duckdb_filesystem import register_known_files  # deferred: fsspec, for a bucket only

            files = {warehouse.uri(part.path): (part.bytes, _opener(warehouse, part))
                     for run in state.runs.values() for _, part in run.files()}
            register_known_files(con, warehouse.location.scheme, files)
        con.execute("attach $path as catalog (storage_version $version)", {"path": str(path), "version": STORAGE_VERSION})
        con.execute("create table catalog._retrieval_eval (warehouse_id varchar, log_version bigint, root varchar)")
        con.execute(
            "insert into catalog._retrieval_eval values ($id, $version, $root)",
            {"id": state.warehouse_id, "version": state.version, "root": warehouse.name},
        )
        rows = [(table, run_id, part.path) for run_id, run in sorted(state.runs.items()) for table, part in run.files()]
        partitions = pl.DataFrame(rows, schema=["table_name", "run_id", "path"], orient="row")
        con.register("partitions", partitions)
        con.execute("create table catalog._partitions as select * from partitions")
        for table in TABLES:
            parts = state.files(table)
            if parts:
                try:
                    con.execute(_view_ddl(table, [warehouse.uri(p.path) for p in parts], union_by_name(parts)))
                except duckdb.Error:
                    # A part DuckDB could not read is named with its run (DamagedPart), as
                    # every reader names it; raised as it is when none differs from its commit.
                    checked_parts(warehouse, state, table)
                    raise
        con.execute("detach catalog")
    finally:
        con.close()


def _opener(warehouse: Warehouse, part: PartFile):
    return lambda: open(warehouse.part_file(part), "rb")


def write_catalog(warehouse: Warehouse, state: State) -> None:
    """Make catalog.duckdb for `state`: written aside, then moved over the old one when that
    is this warehouse's (else moved aside). CatalogHeld, with nothing changed, when another
    process holds the file there open read-write. In a bucket, see `put_catalog`."""
    if warehouse.remote:
        put_catalog(warehouse, state)
        return
    target = warehouse.catalog_path
    aside = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        _make_catalog(warehouse, state, aside)
        # Asked just before the move, even of a catalog the caller read as ours: a session may
        # have opened it, and made tables of its own, while this one was written.
        if target.exists() and not _owned(target, state.warehouse_id):
            foreign = target.with_name(f"{target.name}.foreign-{uuid.uuid4().hex[:8]}")
            os.replace(target, foreign)
            print(f"retrieval-eval: {target} was not this warehouse's catalog, or held tables or views of someone "
                  f"else's; moved it to {foreign.name}", file=sys.stderr)
        os.replace(aside, target)
        target.with_name(target.name + ".wal").unlink(missing_ok=True)
    finally:
        aside.unlink(missing_ok=True)
        aside.with_name(aside.name + ".wal").unlink(missing_ok=True)
    # Writers do not wait for each other: one whose commit landed meanwhile may have moved
    # its catalog into place before this older one; the newest version is made again.
    newer = warehouse.state()
    if newer.version != state.version:
        write_catalog(warehouse, newer)


def put_catalog(warehouse: Warehouse, state: State) -> None:
    """The catalog of a warehouse in a bucket: made here, then put beside the log. Writers
    race to put it without a lock, and the newest version wins: after its put, a writer
    reads the log again, and a commit that landed meanwhile gets its catalog put again by
    this writer (the writer of any later commit puts its own after that commit)."""
    while True:
        made = warehouse.catalog_path.with_name(f".{CATALOG_NAME}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            _make_catalog(warehouse, state, made)
            warehouse.store.put(warehouse.key(CATALOG_NAME), made, overwrite=True)
            os.replace(made, warehouse.catalog_path)  # the local copy says what was put last
        finally:
            made.unlink(missing_ok=True)
        newer = warehouse.state()
        if newer.version == state.version:
            return
        state = newer


def refresh_catalog(warehouse: Warehouse, state: State, *, announce: bool = False, say_held: bool = True) -> bool:
    """Make the catalog when it is not current; with `announce`, say so when it was missing,
    unreadable or made for another folder (not merely behind a commit). A failure (a full
    disk, a read-only folder) is a warning, never a lost commit: the log holds the truth. A
    catalog another process holds open read-write is left as it is, with a warning when
    `say_held` (a reader, which never reads the catalog, leaves it unsaid). Returns whether
    the catalog is current."""
    try:
        made_for = _made_for(warehouse.catalog_path)
        if made_for == (state.warehouse_id, state.version, warehouse.name):
            return True
        if not state.runs:
            return False
        why = _why_stale(warehouse, made_for) if announce else None
        write_catalog(warehouse, state)
    except CatalogHeld as held:
        if say_held:
            print(f"retrieval-eval: warning: {held}; the warehouse is committed, and the first command after that "
                  "session closes makes the catalog again", file=sys.stderr)
        return False
    except DamagedPart as damage:
        print(f"retrieval-eval: warning: {warehouse.catalog_path} not made: {damage}", file=sys.stderr)
        return False
    except (OSError, StoreError, duckdb.Error) as error:
        print(f"retrieval-eval: warning: could not write {warehouse.shown(CATALOG_NAME)} ({error}); "
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
    return f"made for {root}" if root != warehouse.name else None
