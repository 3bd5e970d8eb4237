"""`warehouse check` and `warehouse rebuild` (SPEC 10): every committed part verified against
what its commit recorded, and the catalog made again from the log — adopting a warehouse
written before the log existed, whose catalog alone said which files make each run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from ... import sql
from ...transforms.errors import InputError
from ..storage.hashing import file_digest
from .catalog import write_catalog
from .committed import committed_state
from .summary import write_summary
from .views import HEAL, open_reader
from .warehouse import LOG, DamagedLog, State, Warehouse, part_prefix


@dataclass(frozen=True)
class WarehouseCheck:
    problems: list[str]  # none when all is well
    uncommitted: list[str]  # files of a transaction that has not ended: a writer now, or a killed one


def check_warehouse(warehouse: Warehouse) -> WarehouseCheck:
    """One problem per committed part that is not as committed (missing, another size or
    digest, not readable Parquet, another row count), per file the log does not know, and,
    when every part is whole, per row that breaks a data audit. The files of a transaction
    still pending (its writer running, or killed: the next writer removes them) are not
    damage: they are listed apart."""
    if not warehouse.exists():
        raise InputError(f"{warehouse.root}: no warehouse here (no {LOG}/ folder)")
    try:
        state = warehouse.state()
    except DamagedLog as damaged:  # damage found: the check's verdict (exit 1), not bad input
        return WarehouseCheck([str(damaged)], [])
    problems = []
    for run_id, run in sorted(state.runs.items()):
        for table, part in run.files():
            path = warehouse.root / part.path
            where = f"{path}: table {table} of run {run_id}"
            if not path.exists():
                problems.append(f"{where}: missing; {HEAL}")
                continue
            size = path.stat().st_size
            if size != part.bytes:
                problems.append(f"{where}: {size} bytes, {part.bytes} committed; {HEAL}")
                continue
            if file_digest(path) != part.blake3:
                problems.append(f"{where}: its bytes differ from those committed; {HEAL}")
                continue
            try:
                rows = pq.ParquetFile(path).metadata.num_rows
            except Exception as error:  # noqa: BLE001 — any failure to read the footer is damage
                problems.append(f"{where}: not readable Parquet ({error}); {HEAL}")
                continue
            if rows != part.rows:
                problems.append(f"{where}: {rows} rows, {part.rows} committed; {HEAL}")
    referenced = state.referenced()
    unknown = sorted(
        str(p.relative_to(warehouse.root)) for p in warehouse.root.glob("*/run_id=*/*.parquet")
        if str(p.relative_to(warehouse.root)) not in referenced
        and str(p.relative_to(warehouse.root)) not in {item["path"] for item in state.superseded}
    )
    pending = tuple(part_prefix(marker.stem) for marker in warehouse.pending_markers())
    uncommitted = [path for path in unknown if pending and Path(path).name.startswith(pending)]
    damaged = bool(problems)
    problems += [f"{warehouse.root / path}: not in the transaction log (left as it is)"
                 for path in unknown if path not in uncommitted]
    return WarehouseCheck(problems if damaged else problems + audit_warehouse(warehouse),
                          [str(warehouse.root / path) for path in uncommitted])


def rebuild(warehouse: Warehouse) -> State:
    """The catalog and the summary made again from the log (adopting a catalog-only warehouse first)."""
    state = committed_state(warehouse)
    with warehouse.locked():
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
