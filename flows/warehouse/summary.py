"""The warehouse's summary: the `runs` and `aggregates` rows of every committed run compacted
into one Parquet file per table, made again at each commit from the summary before it and the
runs that commit changed. The report reads every run's headline figures from it, so its cost
follows the runs that changed, not the length of the history (SPEC 9). It is derived data: a
missing or stale summary is never an error, the parts are read instead.

    <root>/_summary/<version>-runs.parquet, <version>-aggregates.parquet

A warehouse in a bucket keeps its summary there too, so that the report on another machine
(a fresh container) fetches two files, not every run's parts; it is read from a local copy.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import polars as pl

from ..storage.errors import NotFound, StoreError
from .warehouse import State, Warehouse

SUMMARY = "_summary"
SUMMARIZED = ("runs", "aggregates")


def summary_path(warehouse: Warehouse, version: int, table: str) -> Path:
    return warehouse.root / SUMMARY / f"{version:020d}-{table}.parquet"


def summary_files(warehouse: Warehouse, state: State) -> dict[str, Path] | None:
    """The summary of `state`, when it was made (from a bucket: fetched once to this machine)."""
    paths = {table: summary_path(warehouse, state.version, table) for table in SUMMARIZED}
    if warehouse.remote:
        for path in paths.values():
            if not path.exists() and not _fetched(warehouse, path):
                return None
    return paths if all(path.exists() for path in paths.values()) else None


def _fetched(warehouse: Warehouse, path: Path) -> bool:
    try:
        data = warehouse.store.get(warehouse.key(f"{SUMMARY}/{path.name}"))
    except NotFound:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{uuid.uuid4().hex[:8]}.tmp")
    aside.write_bytes(data)
    os.replace(aside, path)
    return True


def _read_parts(warehouse: Warehouse, state: State, table: str, run_ids) -> pl.DataFrame | None:
    files = [warehouse.part_file(part) for part in state.files(table, run_ids)]
    if not files:
        return None
    return pl.concat([pl.read_parquet(path, hive_partitioning=False) for path in files], how="diagonal_relaxed")


def refresh_summary(warehouse: Warehouse, before: State, after: State) -> None:
    """`write_summary` after a commit: a failure (a full disk, a read-only folder) is a
    warning, never a lost commit, since the report reads the parts without it."""
    try:
        write_summary(warehouse, before, after)
    except (OSError, StoreError) as error:
        print(f"retrieval-eval: warning: could not write {warehouse.shown(SUMMARY)} ({getattr(error, 'strerror', None) or error}); "
              "the warehouse is committed, and the report reads the runs' parts instead", file=sys.stderr)


def write_summary(warehouse: Warehouse, before: State, after: State) -> None:
    """The summary of `after`: the summary of `before` with the runs the commit changed read
    again from their parts (every part when `before` has none)."""
    changed = {run_id for run_id, run in after.runs.items() if before.runs.get(run_id) != run}
    previous = summary_files(warehouse, before)
    folder = warehouse.root / SUMMARY
    folder.mkdir(exist_ok=True)
    for table in SUMMARIZED:
        frames = []
        if previous is not None:
            frames.append(pl.read_parquet(previous[table]).filter(~pl.col("run_id").is_in(sorted(changed))))
            fresh = _read_parts(warehouse, after, table, sorted(changed))
        else:
            fresh = _read_parts(warehouse, after, table, None)
        if fresh is not None:
            frames.append(fresh)
        if not frames:
            continue
        frame = pl.concat(frames, how="diagonal_relaxed")
        aside = folder / f".{uuid.uuid4().hex[:8]}.tmp"
        frame.write_parquet(aside)
        target = summary_path(warehouse, after.version, table)
        os.replace(aside, target)
        if warehouse.remote:
            warehouse.store.put(warehouse.key(f"{SUMMARY}/{target.name}"), target, overwrite=True)
    keep = {summary_path(warehouse, v, t).name for v in (before.version, after.version) for t in SUMMARIZED}
    for path in folder.iterdir():
        if path.name not in keep:
            path.unlink(missing_ok=True)
    if warehouse.remote:  # a listing, for cleanup only
        for info in warehouse.store.list(warehouse.key(SUMMARY)):
            if info.key.rsplit("/", 1)[-1] not in keep:
                warehouse.store.delete(info.key)
