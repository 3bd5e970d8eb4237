"""The warehouse: hive-partitioned Parquet per table and run, and the DuckDB catalog over it.

A run's files are written under fresh names and become visible only when one catalog
transaction points the views at them, so readers see each run as it was or whole, never
half-written (SPEC 4). Files no longer referenced are removed afterwards, under the lock.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from transforms.errors import InputError

TABLES = ("runs", "cases", "retrieved", "case_metrics", "aggregates", "rejects")
CATALOG_NAME = "catalog.duckdb"
LOCK_NAME = ".lock"
SCRATCH = ".scratch"
DIGESTS = ".digests"
DEFAULT_LOCK_TIMEOUT_S = 600.0
CATALOG_WAIT_S = 30.0  # how long to wait for another process's hold on the catalog file


class WarehouseBusy(InputError):
    """Another process holds the warehouse lock past the timeout."""


class Warehouse:
    def __init__(self, root: Path):
        self.root = Path(root).absolute()
        # What the catalog referenced after this instance's last `commit`, with the catalog
        # file's stamp then: valid only while the file is unchanged (another commit on the
        # same root would change it).
        self._committed: tuple[tuple[int, int, int], set[Path]] | None = None

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_NAME

    def new_part(self, table: str, run_id: str, txn: str, partition: int = 0) -> Path:
        """A fresh, not yet visible file for one table's partition of one run."""
        folder = self.root / table / f"run_id={run_id}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"part-{txn}-{partition:03d}.parquet"

    def scratch_dir(self, txn: str, run_id: str) -> Path:
        """Scratch of one run's job (spill, partial sums); removed under the lock afterwards."""
        folder = self.root / SCRATCH / txn / run_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def digest_cache(self, run_id: str) -> Path:
        """Where the content digest of a run's files is kept with their size and mtime."""
        return self.root / DIGESTS / f"{run_id}.json"

    def committed(self, run_id: str) -> tuple[str | None, dict[str, list[Path]]]:
        """The evaluation key of a run as committed and its committed files per table. The key
        is None when the run has no `runs` row, one written before keys were kept, or files
        from more than one transaction (a refused re-run replaced its `rejects`): only files
        written together are reused together."""
        return self.committed_runs([run_id])[run_id]

    def committed_runs(self, run_ids: list[str]) -> dict[str, tuple[str | None, dict[str, list[Path]]]]:
        """`committed` of each of `run_ids`, read in one visit to the catalog."""
        found: dict[str, tuple[str | None, dict[str, list[Path]]]] = {run_id: (None, {}) for run_id in run_ids}
        if not run_ids or not self.catalog_path.exists():
            return found
        with self.connect(read_only=True) as con:
            if not _has_partitions(con):
                return found
            parts: dict[str, dict[str, list[Path]]] = {run_id: {} for run_id in run_ids}
            for run_id, table, path in con.execute(
                "select run_id, table_name, path from _partitions where list_contains($ids, run_id) "
                "order by run_id, table_name, path",
                {"ids": run_ids},
            ).fetchall():
                parts[run_id].setdefault(table, []).append(self.root / path)
            runs_files = [str(path) for run in parts.values() for path in run.get("runs", [])]
            keys: dict[str, str | None] = {}
            if runs_files:
                rows = con.sql(
                    "select * from read_parquet($files, union_by_name = true)", params={"files": runs_files}
                ).pl()
                if "evaluation_key" in rows.columns:
                    keys = dict(zip(rows["run_id"], rows["evaluation_key"], strict=True))
        return {
            run_id: (keys.get(run_id) if _one_transaction(parts[run_id]) else None, parts[run_id])
            for run_id in run_ids
        }

    @staticmethod
    def new_txn() -> str:
        return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"

    @contextmanager
    def writing(self, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
        """Hold the writer lock: a second writer waits, then refuses with a clear message."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle = open(self.root / LOCK_NAME, "a+")
        except OSError as error:
            raise InputError(f"{self.root}: cannot write the warehouse ({error.strerror})") from None
        with handle:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise WarehouseBusy(
                            f"{self.root}: another retrieval-eval process is writing this "
                            f"warehouse (waited {timeout_s:.0f} s); try again when it is done"
                        ) from None
                    time.sleep(0.2)
            try:
                self._committed = None
                self.remove_unreferenced()  # leftovers of a writer that was killed
                yield
            finally:
                try:
                    # superseded parts, and parts never committed; after a commit, what the
                    # catalog references is known without opening it again (0.015-0.025 s)
                    self.remove_unreferenced(self._still_committed())
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)

    @staticmethod
    def sync(*paths: Path) -> None:
        """Flush written parts to disk now, while other work runs: `commit` syncs every part
        again, which costs nothing for a part already flushed (the 100k-case run's parts
        took 0.03 s to flush at commit, after everything else)."""
        for path in paths:
            _fsync(path)

    def commit(self, parts: dict[tuple[str, str], list[Path]]) -> None:
        """Point the catalog at `parts` ((table, run_id) → its files) in one transaction;
        a run's earlier files of those tables are no longer read. Called under `writing()`,
        whose exit removes them."""
        for paths in parts.values():
            for path in paths:
                _fsync(path)
        con = self.connect(read_only=False, create=True)
        try:
            con.execute("begin transaction")
            con.execute(
                "create table if not exists _partitions ("
                " table_name varchar, run_id varchar, path varchar, primary key (table_name, path))"
            )
            for (table, run_id), paths in sorted(parts.items()):
                con.execute(
                    "delete from _partitions where table_name = $table and run_id = $run_id",
                    {"table": table, "run_id": run_id},
                )
                for path in paths:
                    con.execute(
                        "insert into _partitions values ($table, $run_id, $path)",
                        {"table": table, "run_id": run_id, "path": str(path.relative_to(self.root))},
                    )
            referenced: set[Path] = set()
            for table in TABLES:
                files = [
                    str(self.root / row[0])
                    for row in con.execute(
                        "select path from _partitions where table_name = $table order by run_id, path",
                        {"table": table},
                    ).fetchall()
                ]
                if files:
                    con.execute(_view_ddl(table, files))
                referenced.update(map(Path, files))
            con.execute("commit")
        finally:
            con.close()
        self._committed = (self._catalog_stamp(), referenced)

    def _catalog_stamp(self) -> tuple[int, int, int]:
        st = self.catalog_path.stat()
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _still_committed(self) -> set[Path] | None:
        """What this instance's last commit referenced, if the catalog is unchanged since."""
        if self._committed is None or not self.catalog_path.exists():
            return None
        stamp, referenced = self._committed
        return referenced if stamp == self._catalog_stamp() else None

    def referenced(self) -> set[Path]:
        if not self.catalog_path.exists():
            return set()
        with self.connect(read_only=True) as con:
            if not _has_partitions(con):
                return set()
            return {self.root / row[0] for row in con.execute("select path from _partitions").fetchall()}

    def remove_unreferenced(self, keep: set[Path] | None = None) -> None:
        """Delete what no view points at: superseded parts, and parts and scratch folders
        of a writer that failed or was killed. Only called under the writer lock."""
        keep = self.referenced() if keep is None else keep
        shutil.rmtree(self.root / SCRATCH, ignore_errors=True)
        for table in TABLES:
            for folder in (self.root / table).glob("run_id=*"):
                for part in folder.iterdir():
                    if part not in keep:
                        part.unlink(missing_ok=True)
                if not any(folder.iterdir()):
                    folder.rmdir()

    def connect(self, read_only: bool = True, create: bool = False) -> duckdb.DuckDBPyConnection:
        """A connection to the catalog; waits briefly while another process holds it."""
        if not create and not self.catalog_path.exists():
            raise InputError(f"{self.catalog_path}: no catalog yet (run `retrieval-eval run` first)")
        deadline = time.monotonic() + CATALOG_WAIT_S
        while True:
            try:
                return duckdb.connect(str(self.catalog_path), read_only=read_only)
            except duckdb.IOException as error:
                if "lock" not in str(error).lower() or time.monotonic() >= deadline:
                    raise InputError(f"{self.catalog_path}: cannot open ({error})") from None
                time.sleep(0.1)

    def run_ids(self) -> list[str]:
        with self.connect() as con:
            if not _has_partitions(con):
                return []
            rows = con.execute(
                "select distinct run_id from _partitions where table_name = 'runs' order by run_id"
            ).fetchall()
        return [row[0] for row in rows]


def _one_transaction(parts: dict[str, list[Path]]) -> bool:
    """Whether every file was written by one transaction (`part-<txn>-<index>.parquet`)."""
    return len({path.name.rsplit("-", 1)[0] for paths in parts.values() for path in paths}) == 1


def _has_partitions(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(
        con.execute(
            "select count(*) from duckdb_tables() where table_name = '_partitions'"
        ).fetchone()[0]
    )


def _view_ddl(table: str, files: list[str]) -> str:
    # DuckDB refuses bind parameters in CREATE VIEW, and the view must hold absolute paths
    # (relative ones resolve against the reader's working directory). So the file list is a
    # literal rendered and quoted by DuckDB itself; `table` is one of the fixed TABLES.
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}")
    files_literal = str(duckdb.ConstantExpression(files))
    return (
        "create or replace view " + table + " as select * from read_parquet("
        + files_literal + ", union_by_name = true)"
    )


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
