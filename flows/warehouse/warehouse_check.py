"""`warehouse check` and `warehouse rebuild` (SPEC 10): every committed part verified against
what its commit recorded, and the catalog made again from the log — adopting a warehouse
written before the log existed, whose catalog alone said which files make each run."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.parquet as pq

from ... import sql
from ...transforms.errors import InputError
from ..storage.hashing import checksum_of_stream, file_digest
from .catalog import write_catalog
from .committed import committed_state
from .summary import write_summary
from .views import HEAL, open_reader
from ..storage.errors import CorruptObject, NotFound
from .warehouse import LOG, DamagedLog, PartFile, State, Warehouse, part_prefix


@dataclass(frozen=True)
class WarehouseCheck:
    problems: list[str]  # none when all is well
    uncommitted: list[str]  # files of a transaction that has not ended: a writer now, or a killed one


def check_warehouse(warehouse: Warehouse) -> WarehouseCheck:
    """One problem per committed part that is not as committed (missing, another size or
    digest, not readable Parquet, another row count), per file the log does not know, and,
    when every part is whole, per row that breaks a data audit. The files of a transaction
    still pending (its writer running, or killed: its files go at the next writer here, or
    at vacuum) are not damage: they are listed apart. In a bucket every part is read whole:
    fetched into the cache of parts if it is not there, its digest checked."""
    if not warehouse.exists():
        raise InputError(f"{warehouse.name}: no warehouse here (no {LOG}/ folder)")
    try:
        state = warehouse.state()
    except DamagedLog as damaged:  # damage found: the check's verdict (exit 1), not bad input
        return WarehouseCheck([str(damaged)], [])
    problems = []
    for run_id, run in sorted(state.runs.items()):
        for table, part in run.files():
            where = f"{warehouse.shown(part.path)}: table {table} of run {run_id}"
            problem = _part_problem(warehouse, part)
            if problem:
                problems.append(f"{where}: {problem}; {HEAL}")
    referenced = state.referenced()
    superseded = {item["path"] for item in state.superseded}
    unknown = [path for path, _ in sorted(warehouse.part_paths()) if path not in referenced and path not in superseded]
    pending = tuple(part_prefix(marker["txn"]) for marker in warehouse.pending_markers())
    uncommitted = [path for path in unknown if pending and path.rsplit("/", 1)[-1].startswith(pending)]
    damaged = bool(problems)
    problems += [f"{warehouse.shown(path)}: not in the transaction log (left as it is)"
                 for path in unknown if path not in uncommitted]
    return WarehouseCheck(problems if damaged else problems + audit_warehouse(warehouse),
                          [warehouse.shown(path) for path in uncommitted])


def _part_problem(warehouse: Warehouse, part: PartFile) -> str | None:
    """What differs between a part and its commit: presence, size, digest, footer, rows."""
    if warehouse.remote:
        # The object in the bucket itself: the cache of parts holds copies by content, which a
        # part deleted or replaced in the bucket since leaves as they were.
        key = warehouse.key(part.path)
        try:
            size = warehouse.store.head(key).size
            if size != part.bytes:
                return f"{size} bytes, {part.bytes} committed"
            with warehouse.store.open_read(key) as stored:
                if checksum_of_stream(stored) != part.blake3:
                    return "its bytes differ from those committed"
            path = warehouse.part_file(part)
        except NotFound:
            return "missing"
        except CorruptObject:
            return "its bytes differ from those committed"
    else:
        path = warehouse.root / part.path
        if not path.exists():
            return "missing"
        size = path.stat().st_size
        if size != part.bytes:
            return f"{size} bytes, {part.bytes} committed"
        if file_digest(path) != part.blake3:
            return "its bytes differ from those committed"
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except Exception as error:  # noqa: BLE001 — any failure to read the footer is damage
        return f"not readable Parquet ({error})"
    if rows != part.rows:
        return f"{rows} rows, {part.rows} committed"
    return None


def rebuild(warehouse: Warehouse) -> State:
    """The catalog and the summary made again from the log (adopting a catalog-only warehouse first)."""
    state = committed_state(warehouse)
    write_summary(warehouse, State(state.warehouse_id, 0, {}, []), state)
    write_catalog(warehouse, state)
    return state


def audit_warehouse(warehouse: Warehouse) -> list[str]:
    """The data audits of sql/audits/ over every view: one line per row that breaks one
    (unique keys per grain, metrics in [0, 1], hit ≥ recall and nDCG, monotone in k, runs
    rows that agree with their cases)."""
    state = warehouse.state()
    if not state.runs:
        return []
    problems = []
    with open_reader(warehouse, state) as con:
        views = {row[0] for row in con.execute("select view_name from duckdb_views()").fetchall()}
        for name, text in sql.audits().items():
            if {"runs", "cases", "case_metrics"} - views:
                break  # only refused runs: nothing to audit
            for audit, run_id, detail in con.execute(text).fetchall():
                problems.append(f"audit {audit}: run {run_id}: {detail}")
    return problems
