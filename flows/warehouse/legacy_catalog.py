"""A warehouse written before the transaction log existed, adopted: log version 1 written from
its catalog's `_partitions` table, so that its runs are kept (and never taken for leftovers)."""

from __future__ import annotations

import sys

import duckdb

from ...transforms.errors import InputError
from .warehouse import RunCommit, State, Transaction, Warehouse, describe_part


def adopt_legacy_catalog(warehouse: Warehouse) -> State:
    """Write log version 1 from the `_partitions` table of a catalog made before the log
    existed, so that its runs are kept (and never taken for leftovers)."""
    if warehouse.exists() and warehouse.state().runs:
        return warehouse.state()
    try:
        with duckdb.connect(str(warehouse.catalog_path), read_only=True) as con:
            rows = con.table("_partitions").pl().sort("run_id", "table_name", "path").select(
                "table_name", "run_id", "path").iter_rows()
    except duckdb.Error as error:
        raise InputError(f"{warehouse.catalog_path}: neither a transaction log nor a readable catalog ({error})") from None
    runs: dict[str, dict] = {}
    for table, run_id, path in rows:
        part = describe_part(warehouse.root / path, warehouse.root)
        runs.setdefault(run_id, {}).setdefault(table, []).append(part)
    txn = Transaction(warehouse, warehouse.state())
    txn.start()
    try:
        # Two commands adopting at once: the second commits the same runs whole on top.
        state = txn.commit({run_id: RunCommit(tables, None, None) for run_id, tables in runs.items()})
    finally:
        txn.end()
    print(f"retrieval-eval: adopted {len(runs)} run(s) of {warehouse.catalog_path} into a transaction log",
          file=sys.stderr)
    return state
