"""The warehouse: hive-partitioned Parquet per table and run, and beside it the transaction log
that says which files make each run (SPEC 4 and 10).

    <root>/_log/<version>.json             one entry per commit: the files each run now has
    <root>/_log/<version>.checkpoint.json  the whole state, every CHECKPOINT_EVERY versions
    <root>/_log/pending/<txn>.json         a transaction that has not ended, and the runs it writes
    <root>/<table>/run_id=<run>/part-<txn>-<id>.parquet
    <root>/catalog.duckdb                  views for people (flows/warehouse/catalog.py), made from the log

The log is the truth; the catalog is rebuilt from it whenever it is missing, stale, moved or
unreadable. A run's files are written under fresh names and become visible in one atomic
log entry (written aside, then linked into place), so a reader sees each run as it was or
whole. Nothing committed is deleted except a file a later commit superseded, and only past
a retention; files of a writer that died before committing are removed by the next writer.
docs/warehouse.md says why it is shaped so, and when to move to DuckLake or Delta Lake.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ... import __version__
from ...transforms.errors import InputError
from ...transforms.manifest import is_safe_run_id
from ..storage.hashing import file_digest
from ..storage.interrupts import interrupts_deferred
from ..storage.local_store import fsync_path

TABLES = ("runs", "cases", "retrieved", "case_metrics", "aggregates", "rejects")
LOG = "_log"
PENDING = "pending"
CATALOG_NAME = "catalog.duckdb"
LOCK_NAME = ".lock"
SCRATCH = ".scratch"
LOG_FORMAT = 1
CHECKPOINT_EVERY = 25
DEFAULT_LOCK_TIMEOUT_S = 600.0
DEFAULT_RETENTION = timedelta(days=7)


class WarehouseBusy(InputError):
    """Another process holds the warehouse lock past the timeout."""


# The log is what says which files make each run: nothing in the warehouse can stand in for a
# lost entry, and no command writes over a history it cannot read.
LOG_HEAL = ("nothing is written until it is whole again: restore the file from a backup, or move the "
            "warehouse aside and run `retrieval-eval run` over the runs' artifacts into a new one")


class DamagedLog(InputError):
    """An entry of the transaction log cannot be read."""


@dataclass(frozen=True)
class PartFile:
    """One committed Parquet file: its path under the root, and what was committed."""

    path: str
    bytes: int
    rows: int
    blake3: str
    mtime_ns: int  # parts are never rewritten: another mtime means the file was touched
    columns: str  # a digest of its column names and types: files that share it need no union by name

    def to_json(self) -> dict:
        return {"path": self.path, "bytes": self.bytes, "rows": self.rows, "blake3": self.blake3,
                "mtime_ns": self.mtime_ns, "columns": self.columns}


def columns_digest(schema) -> str:
    """The digest of an Arrow schema's column names and types."""
    text = ";".join(f"{field.name}:{field.type}" for field in schema)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def union_by_name(parts: list[PartFile]) -> bool:
    """Whether files must be read by column name (their columns differ, e.g. written by
    another version): reading every footer to find out costs a millisecond per file."""
    return len({part.columns for part in parts}) > 1


@dataclass(frozen=True)
class RunState:
    """What the log says of one run: its files per table, and the evaluation they came from."""

    tables: dict[str, list[PartFile]]
    evaluation_key: str | None  # None: its tables are not from one evaluation (a refused re-run)
    source: dict | None  # the artifacts it was evaluated from: cases file, stamp, digest
    version: int  # the log version that last changed it

    def files(self) -> Iterator[tuple[str, PartFile]]:
        for table, parts in self.tables.items():
            for part in parts:
                yield table, part


@dataclass(frozen=True)
class State:
    """The warehouse as of one log version."""

    warehouse_id: str | None
    version: int
    runs: dict[str, RunState]
    superseded: list[dict]  # {"path", "at": ISO time it was superseded}

    def referenced(self) -> set[str]:
        return {part.path for run in self.runs.values() for _, part in run.files()}

    def owner(self) -> dict[str, tuple[str, str]]:
        """Path → (table, run_id) of every committed file."""
        return {part.path: (table, run_id) for run_id, run in self.runs.items() for table, part in run.files()}

    def files(self, table: str, run_ids: Iterable[str] | None = None) -> list[PartFile]:
        chosen = self.runs if run_ids is None else {r: self.runs[r] for r in run_ids if r in self.runs}
        return [part for _, run in sorted(chosen.items()) for part in run.tables.get(table, [])]


@dataclass(frozen=True)
class RunCommit:
    """What a commit changes of one run: the tables it replaces (the others stay)."""

    tables: dict[str, list[PartFile]]
    evaluation_key: str | None
    source: dict | None


def describe_part(path: Path, root: Path) -> PartFile:
    """The record of a part already on disk: its size, row count, digest and mtime."""
    import pyarrow.parquet as pq  # deferred: the CLI imports this module before the engines

    metadata = pq.ParquetFile(path).metadata
    stat = path.stat()
    return PartFile(str(path.relative_to(root)), stat.st_size, metadata.num_rows, file_digest(path), stat.st_mtime_ns,
                    columns_digest(metadata.schema.to_arrow_schema()))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_new_file(path: Path, text: str) -> None:
    """Write `path` whole or not at all, refusing to replace it: written aside, flushed, then
    linked into place (a second writer of the same name fails instead of overwriting)."""
    aside = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(aside, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(aside, path)
    finally:
        aside.unlink()
    fsync_path(path.parent)


def shown_path(path: Path) -> str:
    """A path as text that prints on one line whatever its bytes: a byte that is not UTF-8 as
    \\xNN (how Python holds it: a surrogate escape)."""
    text = str(path)
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name's bytes make
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def utf8_path(path: Path, role: str) -> Path:
    """`path` made absolute, refused (InputError) when it is not UTF-8 text: DuckDB, which
    writes and reads every table, takes paths as UTF-8 only, the catalog's views name their
    files in SQL text, and runs record their artifacts' and KB's paths as text. `role` names
    the path in the message ("warehouse", "--kb"). Refused before anything is written."""
    absolute = Path(path).absolute()
    try:
        str(absolute).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{shown_path(absolute)}: the {role} path is not UTF-8 (DuckDB, which reads and writes "
                         "the warehouse, takes UTF-8 paths only); choose one whose path is UTF-8") from None
    return absolute


def utf8_root(root: Path) -> Path:
    return utf8_path(root, "warehouse")


class Warehouse:
    def __init__(self, root: Path):
        self.root = utf8_root(root)

    @property
    def log_dir(self) -> Path:
        return self.root / LOG

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_NAME

    def exists(self) -> bool:
        return self.log_dir.is_dir()

    # ------------------------------------------------------------------ reading the log

    def _entries(self) -> tuple[list[int], list[int]]:
        """The delta versions and checkpoint versions in the log, ascending."""
        deltas, checkpoints = [], []
        try:
            names = os.listdir(self.log_dir)
        except FileNotFoundError:
            return [], []
        for name in names:
            stem, _, suffix = name.partition(".")
            if not stem.isdigit():
                continue
            if suffix == "json":
                deltas.append(int(stem))
            elif suffix == "checkpoint.json":
                checkpoints.append(int(stem))
        return sorted(deltas), sorted(checkpoints)

    def _read_entry(self, name: str) -> dict:
        path = self.log_dir / name
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise DamagedLog(f"{path}: a transaction log entry cannot be read ({error}); {LOG_HEAL}") from None
        if not isinstance(entry, dict) or entry.get("format") != LOG_FORMAT:
            raise DamagedLog(f"{path}: not a transaction log entry of this version of retrieval-eval; {LOG_HEAL}")
        return entry

    def state(self) -> State:
        """The current state: the newest checkpoint, then every entry after it."""
        deltas, checkpoints = self._entries()
        if not deltas:
            return State(None, 0, {}, [])
        start = 0
        runs: dict[str, RunState] = {}
        superseded: list[dict] = []
        warehouse_id = None
        if checkpoints:
            start = checkpoints[-1]
            snapshot = self._read_entry(f"{start:020d}.checkpoint.json")
            warehouse_id = snapshot["warehouse_id"]
            runs = {run_id: _run_state(data) for run_id, data in snapshot["runs"].items()}
            superseded = list(snapshot["superseded"])
        expected = start + 1
        for version in (v for v in deltas if v > start):
            if version != expected:
                raise DamagedLog(f"{self.log_dir}: log entry {expected:020d}.json is missing; {LOG_HEAL}")
            entry = self._read_entry(f"{version:020d}.json")
            warehouse_id = warehouse_id or entry["warehouse_id"]
            for run_id, change in entry["runs"].items():
                before = runs.get(run_id)
                tables = dict(before.tables) if before else {}
                tables.update({t: [PartFile(**p) for p in parts] for t, parts in change["tables"].items()})
                runs[run_id] = RunState(tables, change["evaluation_key"], change["source"], version)
            superseded += [{"path": path, "at": entry["committed_at"]} for path in entry["superseded"]]
            expected += 1
        return State(warehouse_id, expected - 1, runs, superseded)

    # ------------------------------------------------------------------ writing

    @contextmanager
    def transaction(self, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
                    retention: timedelta = DEFAULT_RETENTION) -> Iterator[Transaction]:
        """The writer's transaction: holds the lock (a second writer waits, then refuses),
        removes what dead writers left, and on its way out removes its own uncommitted files
        and, past `retention`, files that commits superseded."""
        with self.locked(timeout_s):
            self.remove_dead_transactions()
            txn = Transaction(self, self.state())
            txn.start()
            try:
                yield txn
            finally:
                with interrupts_deferred():
                    final = txn.end()
                    self.vacuum(retention, locked=True, state=final)

    @contextmanager
    def locked(self, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
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
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def try_locked(self) -> bool:
        """Whether no writer holds the lock now (then a short maintenance may take it)."""
        try:
            with open(self.root / LOCK_NAME, "a+") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(handle, fcntl.LOCK_UN)
                return True
        except (BlockingIOError, OSError):
            return False

    def pending_markers(self) -> list[Path]:
        """The marker of each transaction that began and has not ended (its writer running, or dead)."""
        return sorted((self.log_dir / PENDING).glob("*.json"))

    def remove_dead_transactions(self) -> None:
        """Files of transactions that began and never ended (their writer died): removed,
        unless committed. Called under the lock, so no such writer is alive."""
        pending = self.log_dir / PENDING
        if not pending.is_dir():
            return
        referenced = None
        for marker in self.pending_markers():
            referenced = self.state().referenced() if referenced is None else referenced
            self._remove_uncommitted(marker.stem, referenced, _planned_runs(marker))
            marker.unlink(missing_ok=True)
        for aside in pending.glob("*.json.tmp"):  # a marker being rewritten when its writer died
            aside.unlink(missing_ok=True)
        shutil.rmtree(self.root / SCRATCH, ignore_errors=True)

    def _remove_uncommitted(self, txn_id: str, referenced: set[str], run_ids: list[str] | None = None) -> None:
        """Remove the transaction's files that are not `referenced`, and every run folder left
        empty, in one pass (os.scandir) over the folders of `run_ids`, the runs it planned to
        write, or of every run when it did not say (a scan of 300 runs' folders: ~40 ms)."""
        marker = part_prefix(txn_id)
        for table in TABLES:
            if run_ids is None:
                folders = _run_folders(self.root / table)
            else:
                folders = [folder for run_id in run_ids if (folder := self.root / table / f"run_id={run_id}").is_dir()]
            for folder in folders:
                with os.scandir(folder) as entries:
                    names = [entry.name for entry in entries]
                kept = len(names)
                for part in (folder / name for name in names if name.startswith(marker)):
                    if str(part.relative_to(self.root)) not in referenced:
                        part.unlink(missing_ok=True)
                        kept -= 1
                if not kept:
                    _remove_if_empty(folder)
        shutil.rmtree(self.root / SCRATCH / txn_id, ignore_errors=True)

    def vacuum(self, retention: timedelta = DEFAULT_RETENTION, *, locked: bool = False,
               state: State | None = None) -> list[str]:
        """Delete files that a committed transaction superseded more than `retention` ago
        (a reader that started before a commit finishes); returns what was deleted. `state`:
        the committed state, when the caller holds the lock and has it."""
        if not locked:
            with self.locked():
                self.remove_dead_transactions()
                return self.vacuum(retention, locked=True)
        state = state if state is not None else self.state()
        referenced = state.referenced()
        limit = datetime.now(UTC) - retention
        deleted = []
        for item in state.superseded:
            if item["path"] in referenced or datetime.fromisoformat(item["at"]) > limit:
                continue
            path = self.root / item["path"]
            if path.exists():
                path.unlink()
                deleted.append(item["path"])
                _remove_if_empty(path.parent)
        return deleted


class Transaction:
    """One writer's changes, visible only once `commit` writes its log entry."""

    def __init__(self, warehouse: Warehouse, state: State):
        self.warehouse = warehouse
        self.state = state
        self.id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.committed: State | None = None
        self._published = False  # its log entry may be in place (set before it is linked there)
        self._started_at = _now()
        self._run_ids: list[str] | None = None  # the runs it may write (None: it did not say)

    @property
    def root(self) -> Path:
        return self.warehouse.root

    def start(self) -> None:
        (self.warehouse.log_dir / PENDING).mkdir(parents=True, exist_ok=True)
        self._write_marker()

    def plan(self, run_ids: Iterable[str]) -> None:
        """Name the runs this transaction may write parts of, before it writes any: its end,
        or the next writer's cleanup should it die, then looks in their folders only, so that
        its cost follows the runs it wrote, not the warehouse's history (SPEC 9). Runs named
        by an earlier call stay named."""
        self._run_ids = sorted({*(self._run_ids or ()), *run_ids})
        self._write_marker()

    def _write_marker(self) -> None:
        marker = {"txn": self.id, "started_at": self._started_at, "pid": os.getpid()}
        if self._run_ids is not None:
            marker["runs"] = self._run_ids
        path = self.warehouse.log_dir / PENDING / f"{self.id}.json"
        aside = path.with_name(path.name + ".tmp")  # never a half-written marker in its place
        aside.write_text(json.dumps(marker))
        os.replace(aside, path)

    def end(self) -> State:
        """Remove what this transaction wrote and did not commit, and its marker; returns the
        state it leaves. A commit that failed once its log entry may have been linked into
        place (flushing the folder, reading the log back) is judged by the log as it is: its
        parts may be committed, and are never removed on the word of the state before it."""
        final = self.committed or (self.warehouse.state() if self._published else self.state)
        self.warehouse._remove_uncommitted(self.id, final.referenced(), self._run_ids)
        (self.warehouse.log_dir / PENDING / f"{self.id}.json").unlink(missing_ok=True)
        return final

    def scratch(self, run_id: str) -> Path:
        return scratch_dir(self.root, self.id, run_id)

    def commit(self, runs: dict[str, RunCommit]) -> State:
        """Make `runs` visible in one log entry; returns the new state."""
        with interrupts_deferred():
            return self._commit(runs)

    def _commit(self, runs: dict[str, RunCommit]) -> State:
        state = self.state
        for change in runs.values():
            for parts in change.tables.values():
                for part in parts:
                    fsync_path(self.root / part.path)
        superseded = sorted(
            {
                part.path
                for run_id, change in runs.items()
                if run_id in state.runs
                for table, part in state.runs[run_id].files()
                if table in change.tables
            }
            - {part.path for change in runs.values() for parts in change.tables.values() for part in parts}
        )
        version = state.version + 1
        entry = {
            "format": LOG_FORMAT,
            "version": version,
            "txn": self.id,
            "warehouse_id": state.warehouse_id or uuid.uuid4().hex,
            "committed_at": _now(),
            "tool_version": __version__,
            "runs": {
                run_id: {
                    "tables": {t: [p.to_json() for p in parts] for t, parts in sorted(change.tables.items())},
                    "evaluation_key": change.evaluation_key,
                    "source": change.source,
                }
                for run_id, change in sorted(runs.items())
            },
            "superseded": superseded,
        }
        self.warehouse.log_dir.mkdir(parents=True, exist_ok=True)
        self._published = True
        write_new_file(self.warehouse.log_dir / f"{version:020d}.json", json.dumps(entry, sort_keys=True))
        self.committed = self.warehouse.state()
        if version % CHECKPOINT_EVERY == 0:
            write_checkpoint(self.warehouse, self.committed)
        return self.committed


def write_checkpoint(warehouse: Warehouse, state: State) -> None:
    """The whole state at its version, so that readers do not fold every entry; superseded
    files already deleted are left out."""
    snapshot = {
        "format": LOG_FORMAT,
        "version": state.version,
        "warehouse_id": state.warehouse_id,
        "runs": {
            run_id: {
                "tables": {t: [p.to_json() for p in parts] for t, parts in sorted(run.tables.items())},
                "evaluation_key": run.evaluation_key,
                "source": run.source,
                "version": run.version,
            }
            for run_id, run in sorted(state.runs.items())
        },
        "superseded": [item for item in state.superseded if (warehouse.root / item["path"]).exists()],
    }
    path = warehouse.log_dir / f"{state.version:020d}.checkpoint.json"
    if not path.exists():
        write_new_file(path, json.dumps(snapshot, sort_keys=True))


def _run_state(data: dict) -> RunState:
    return RunState(
        {t: [PartFile(**p) for p in parts] for t, parts in data["tables"].items()},
        data["evaluation_key"],
        data["source"],
        data["version"],
    )


def new_part(root: Path, txn_id: str, table: str, run_id: str) -> Path:
    """A fresh, not yet visible file for one table's part of one run: a task computed again
    (a Dask worker lost) writes a new file, never over one another task reads."""
    folder = root / table / f"run_id={run_id}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{part_prefix(txn_id)}{uuid.uuid4().hex[:12]}.parquet"


def part_prefix(txn_id: str) -> str:
    """How every part a transaction writes is named: part-<txn>-<id>.parquet."""
    return f"part-{txn_id}-"


def scratch_dir(root: Path, txn_id: str, run_id: str) -> Path:
    folder = root / SCRATCH / txn_id / run_id
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _planned_runs(marker: Path) -> list[str] | None:
    """The runs a pending transaction's marker names (None: unreadable, or it named none)."""
    try:
        runs = json.loads(marker.read_text()).get("runs")
    except (OSError, ValueError, AttributeError):
        return None
    return runs if isinstance(runs, list) and all(map(is_safe_run_id, runs)) else None


def _run_folders(table_folder: Path) -> list[Path]:
    try:
        with os.scandir(table_folder) as entries:
            return [Path(entry.path) for entry in entries if entry.name.startswith("run_id=") and entry.is_dir()]
    except FileNotFoundError:
        return []


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()  # only when empty
    except OSError:
        pass
