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

import hashlib
import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ... import __version__
from ...transforms.errors import InputError
from ...transforms.manifest import is_safe_run_id
from ..storage.cache import cache_folder, cached, keep
from ..storage.errors import NotFound, StoreError, StoreUnavailable
from ..storage.hashing import file_digest
from ..storage.interrupts import interrupts_deferred
from ..storage.local_store import LocalStore, fsync_path
from ..storage.locations import LocationError, is_uri, join_key, parse_location
from ..storage import open_store

TABLES = ("runs", "cases", "retrieved", "case_metrics", "aggregates", "rejects")
LOG = "_log"
PENDING = "pending"
CATALOG_NAME = "catalog.duckdb"
CHECKPOINT_HINT = f"{LOG}/_last_checkpoint.json"  # {"version": N}: where a reader starts
SCRATCH = ".scratch"
LOG_FORMAT = 1
CHECKPOINT_EVERY = 25
DEFAULT_RETENTION = timedelta(days=7)
# A pending transaction of another machine is taken for alive this long at least, whatever
# retention a vacuum is given: its writer may still be running.
ORPHAN_FLOOR = timedelta(hours=1)
# Requests to a bucket sent at once where many small ones are due together (parts put or
# checked, folders listed): each costs a round trip, not bandwidth.
PARALLEL_REQUESTS = 8
# The parts this process put to a bucket (by URI), until the commit that names them asks about
# them (`Transaction._put_parts`): their puts succeeded on this process's own store.
_PUT_HERE: set[str] = set()
_PUT_HERE_LOCK = threading.Lock()


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
    """A warehouse at a local folder or a bucket prefix (SPEC 14), read and written through its
    store: the log's entries are created only if absent, parts are put under fresh keys, and
    one code path serves both. `root` is a local folder either way: the warehouse itself on
    local disk; for one in a bucket, a working folder on this machine (keyed by the URI) where
    a writer stages its parts before it puts them, and where the catalog is made."""

    def __init__(self, root: Path | str):
        text = os.fspath(root)
        self.remote = is_uri(text)
        if self.remote:
            try:
                self.location = parse_location(text)
            except LocationError as error:
                raise InputError(f"--warehouse: {error}") from None
            self.store, self.prefix = open_store(self.location)
            self.root = work_folder(str(self.location))
        else:
            local = Path(str(parse_location(text))) if "://" in text else Path(text)  # file:///…
            self.root = utf8_root(local)
            self.location = parse_location(str(self.root))
            self.store, self.prefix = LocalStore(self.root), ""
        self._known: State | None = None  # the newest state read: the log after it is read, not before

    @property
    def name(self) -> str:
        """How messages name the warehouse: its folder, or its URI (never a credential)."""
        return str(self.location) if self.remote else str(self.root)

    def key(self, relative: str) -> str:
        """The store's key of a path relative to the warehouse (a part's `path`, a log entry)."""
        return join_key(self.prefix, relative) if self.prefix else relative

    def relative(self, key: str) -> str:
        """The path relative to the warehouse of one of its store's keys (`key`'s inverse)."""
        return key[len(self.prefix) + 1:] if self.prefix else key

    def shown(self, relative: str) -> str:
        """A file of the warehouse as messages name it: its path, or its URI."""
        return f"{self.name}/{relative}" if self.remote else str(self.root / relative)

    def uri(self, relative: str) -> str:
        """What DuckDB reads a file of the warehouse by: its absolute path, or its URI."""
        return f"{self.location.scheme}://{self.location.bucket}/{self.key(relative)}" if self.remote \
            else str(self.root / relative)

    def part_file(self, part: PartFile) -> Path:
        """A local file holding a committed part: the part itself on local disk; for a bucket, a
        copy in the cache of parts (storage/cache.py), fetched once and checked by its digest,
        so that a second command on this machine reads no byte of the store."""
        if not self.remote:
            return self.root / part.path
        return cached(self.store, self.key(part.path), part.blake3)

    def put_part(self, part: PartFile) -> None:
        """Put a part staged under `root` under its fresh key, then move it into the cache of
        parts (a bucket's only): a writer on any machine, a Dask worker included, calls this
        for its own parts, so that the commit puts none but those still staged here."""
        staged = self.root / part.path
        try:
            self.store.put(self.key(part.path), staged, checksum=part.blake3)  # hashed as it was written
        except BaseException:
            staged.unlink(missing_ok=True)  # its key is fresh: a retry writes another part
            raise
        with _PUT_HERE_LOCK:
            _PUT_HERE.add(self.uri(part.path))
        keep(staged, part.blake3)

    def read_folders(self) -> list[Path]:
        """The local folders whose files a reader of this warehouse opens (its parts' copies
        for a bucket are in the cache of parts)."""
        return [self.root, cache_folder()] if self.remote else [self.root]

    @property
    def log_dir(self) -> Path:
        return self.root / LOG

    @property
    def catalog_path(self) -> Path:
        """The catalog on local disk (for a bucket, the local copy put beside the log)."""
        return self.root / CATALOG_NAME

    def exists(self) -> bool:
        if not self.remote:
            return self.log_dir.is_dir()
        return self.store.exists(self.key(_entry_name(1))) or self.store.exists(self.key(CHECKPOINT_HINT))

    # ------------------------------------------------------------------ reading the log

    def _read_entry(self, name: str) -> dict | None:
        """A log entry (None when absent): DamagedLog when it cannot be read."""
        try:
            data = self.store.get(self.key(name))
        except NotFound:
            return None
        try:
            entry = json.loads(data.decode("utf-8"))
        except ValueError as error:
            raise DamagedLog(f"{self.shown(name)}: a transaction log entry cannot be read ({error}); {LOG_HEAL}") from None
        if not isinstance(entry, dict) or entry.get("format") != LOG_FORMAT:
            raise DamagedLog(f"{self.shown(name)}: not a transaction log entry of this version of retrieval-eval; "
                             f"{LOG_HEAL}")
        return entry

    def _from_checkpoint(self) -> State:
        """The state of the newest checkpoint the hint names (version 0 without one). The hint
        only saves reading entries: one behind, or gone, costs reads, never correctness."""
        try:
            hint = json.loads(self.store.get(self.key(CHECKPOINT_HINT)))
            version = int(hint["version"])
        except NotFound:
            return State(None, 0, {}, [])
        except (ValueError, KeyError, TypeError):
            return State(None, 0, {}, [])
        snapshot = self._read_entry(_checkpoint_name(version))
        if snapshot is None:
            return State(None, 0, {}, [])
        runs = {run_id: _run_state(data) for run_id, data in snapshot["runs"].items()}
        return State(snapshot["warehouse_id"], version, runs, list(snapshot["superseded"]))

    def committed_sources(self) -> dict[str, dict]:
        """The source record of each run the warehouse holds (flows/job/plan.py `RunPlan.source`:
        where its artifacts were read, their stamp and digest), by run id."""
        return {run_id: run.source for run_id, run in self.state().runs.items() if run.source}

    def state(self) -> State:
        """The current state: the newest checkpoint (or the state this object read before),
        then every entry after it, found by reading the next version until it is absent (no
        listing: a bucket's listing is not what says which commits exist)."""
        state = self._known or self._from_checkpoint()
        version = state.version + 1
        runs, superseded, warehouse_id = dict(state.runs), list(state.superseded), state.warehouse_id
        while (entry := self._read_entry(_entry_name(version))) is not None:
            warehouse_id = warehouse_id or entry["warehouse_id"]
            for run_id, change in entry["runs"].items():
                before = runs.get(run_id)
                tables = dict(before.tables) if before else {}
                tables.update({t: [PartFile(**p) for p in parts] for t, parts in change["tables"].items()})
                runs[run_id] = RunState(tables, change["evaluation_key"], change["source"], version)
            superseded += [{"path": path, "at": entry["committed_at"]} for path in entry["superseded"]]
            version += 1
        if self.store.exists(self.key(_entry_name(version + 1))):
            raise DamagedLog(f"{self.shown(LOG)}: log entry {version:020d}.json is missing; {LOG_HEAL}")
        self._known = State(warehouse_id, version - 1, runs, superseded)
        return self._known

    # ------------------------------------------------------------------ writing

    @contextmanager
    def transaction(self, retention: timedelta = DEFAULT_RETENTION) -> Iterator[Transaction]:
        """A writer's transaction. Writers do not wait for each other: each commits one log
        entry created only if absent, and one that loses the race commits on top of the winner
        (`Transaction.commit`). On its way in it removes what dead writers of this machine
        left; on its way out its own uncommitted files and, after a commit, past `retention`,
        the files that commits superseded."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise InputError(f"{self.root}: cannot write the warehouse ({error.strerror})") from None
        self.remove_dead_transactions()
        txn = Transaction(self, self.state())
        txn.start()
        try:
            yield txn
        finally:
            with interrupts_deferred():
                final = txn.end()
                if txn.committed is not None:
                    self.vacuum(retention, state=final)

    def pending_markers(self) -> list[dict]:
        """The marker of each transaction that began and has not ended (its writer running, or
        dead), as written: txn, started_at, machine, pid, runs. A listing: cleanup only."""
        markers = []
        for info in self.store.list(self.key(f"{LOG}/{PENDING}")):
            name = info.key.rsplit("/", 1)[-1]
            try:
                marker = json.loads(self.store.get(info.key)) if name.endswith(".json") else {}
            except NotFound:
                continue
            except ValueError:  # half written by a writer that died: it says nothing but its name
                marker = {}
            marker = marker if isinstance(marker, dict) else {}
            txn = name.split(".", 1)[0]  # a transaction's marker is named after it: <txn>.json
            markers.append({**marker, "txn": txn, "key": info.key, "modified": info.modified})
        return markers

    def remove_dead_transactions(self) -> None:
        """Files of transactions that began and never ended, removed unless committed, when
        their writer was a process of this machine that is gone. A writer elsewhere that was
        killed leaves its files to `vacuum` with `orphans`, past the retention."""
        referenced = None
        for marker in self.pending_markers():
            if not _dead_here(marker):
                continue
            referenced = self.state().referenced() if referenced is None else referenced
            runs = marker.get("runs")
            runs = runs if isinstance(runs, list) and all(map(is_safe_run_id, runs)) else None
            self._remove_uncommitted(marker["txn"], referenced, runs)
            self.store.delete(marker["key"])

    def part_paths(self) -> Iterator[tuple[str, datetime]]:
        """Every Parquet file under the tables' folders (relative to the warehouse) and when it
        was written: a listing, for upkeep and `warehouse check`, never for what is committed."""
        for table in TABLES:
            for info in self.store.list(self.key(table)):
                relative = self.relative(info.key)
                segments = relative.split("/")
                if len(segments) == 3 and segments[1].startswith("run_id=") and segments[2].endswith(".parquet"):
                    yield relative, info.modified

    def _remove_uncommitted(self, txn_id: str, referenced: set[str], run_ids: list[str] | None = None) -> None:
        """Remove the transaction's parts that are not `referenced`, looking in the folders of
        `run_ids`, the runs it planned to write, or of every run when it did not say; and
        what it staged or kept as scratch on this machine."""
        marker = part_prefix(txn_id)
        folders = list(TABLES) if run_ids is None else [f"{table}/run_id={run_id}" for table in TABLES for run_id in run_ids]
        with ThreadPoolExecutor(max_workers=PARALLEL_REQUESTS) as pool:
            listings = list(pool.map(lambda folder: list(self.store.list(self.key(folder))), folders))
        for folder, listed in zip(folders, listings):
            for info in listed:
                relative = self.relative(info.key)
                if relative.rsplit("/", 1)[-1].startswith(marker) and relative not in referenced:
                    self.store.delete(info.key)
            if not self.remote:
                for emptied in _run_folders(self.root / folder) if run_ids is None else [self.root / folder]:
                    _remove_if_empty(emptied)
        if self.remote:  # what it staged here before putting it
            for staged in self.root.glob(f"*/run_id=*/{marker}*"):
                staged.unlink(missing_ok=True)
        shutil.rmtree(self.root / SCRATCH / txn_id, ignore_errors=True)

    def vacuum(self, retention: timedelta = DEFAULT_RETENTION, *, state: State | None = None,
               orphans: bool = False) -> list[str]:
        """Delete files that a committed transaction superseded more than `retention` ago (a
        reader that started before a commit finishes); with `orphans` (`warehouse vacuum`),
        also files no commit names, written more than `retention` ago (a killed writer's).
        Returns what was deleted."""
        deleted = self._remove_orphans(retention) if orphans else []
        state = state if state is not None else self.state()
        referenced = state.referenced()
        limit = datetime.now(UTC) - retention
        for item in state.superseded:
            if item["path"] in referenced or datetime.fromisoformat(item["at"]) > limit:
                continue
            if self.store.exists(self.key(item["path"])):
                self.store.delete(self.key(item["path"]))
                deleted.append(item["path"])
                if not self.remote:
                    _remove_if_empty((self.root / item["path"]).parent)
        return deleted


    def _remove_orphans(self, retention: timedelta) -> list[str]:
        """Files no commit names (a killed writer's), written more than `retention` ago, and
        the markers of the transactions they came from. A transaction is taken for alive,
        and its files kept, unless its writer was a process of this machine that is gone or
        its marker is older than the retention and ORPHAN_FLOOR both (a writer elsewhere may
        be running, whatever retention is asked). The log is read after the listing, so a
        commit that lands meanwhile names its parts before any is judged."""
        now = datetime.now(UTC)
        listed = list(self.part_paths())
        markers = self.pending_markers()
        alive = {marker["txn"] for marker in markers
                 if not _dead_here(marker) and marker["modified"] >= now - max(retention, ORPHAN_FLOOR)}
        kept = tuple(part_prefix(txn) for txn in alive)
        state = self.state()
        known = state.referenced() | {item["path"] for item in state.superseded}
        deleted = []
        for relative, modified in listed:
            name = relative.rsplit("/", 1)[-1]
            if relative in known or modified >= now - retention or (kept and name.startswith(kept)):
                continue
            self.store.delete(self.key(relative))
            deleted.append(relative)
            if not self.remote:
                _remove_if_empty((self.root / relative).parent)
        for marker in markers:
            if marker["txn"] not in alive and marker["modified"] < now - retention:
                self.store.delete(marker["key"])
                shutil.rmtree(self.root / SCRATCH / marker["txn"], ignore_errors=True)
        return deleted


class CommitConflict(InputError):
    """Another writer changed a run this transaction rewrote only in part, after it read it."""


class Transaction:
    """One writer's changes, visible only once `commit` creates its log entry."""

    def __init__(self, warehouse: Warehouse, state: State):
        self.warehouse = warehouse
        self.state = state
        self.id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.committed: State | None = None
        self._published = False  # its log entry may be in place (set before it is created)
        self._started_at = _now()
        self._run_ids: list[str] | None = None  # the runs it may write (None: it did not say)
        self._marked_at: tuple[float, float] | None = None  # (time.monotonic(), time.time()) as its marker was first put

    @property
    def root(self) -> Path:
        return self.warehouse.root

    def start(self) -> None:
        self._write_marker()

    def plan(self, run_ids: Iterable[str]) -> None:
        """Name the runs this transaction may write parts of, before it writes any: its end,
        or the cleanup of it should it die, then looks in their folders only, so that its cost
        follows the runs it wrote, not the warehouse's history (SPEC 9). Runs named by an
        earlier call stay named."""
        self._run_ids = sorted({*(self._run_ids or ()), *run_ids})
        self._write_marker()

    def _write_marker(self) -> None:
        marker = {"txn": self.id, "started_at": self._started_at, "pid": os.getpid(), "machine": machine_id()}
        if self._run_ids is not None:
            marker["runs"] = self._run_ids
        if self._marked_at is None:  # taken before the put, which may take long (retries)
            self._marked_at = (time.monotonic(), time.time())
        self.warehouse.store.put(self._marker_key, json.dumps(marker).encode(), overwrite=True)

    @property
    def _marker_key(self) -> str:
        return self.warehouse.key(f"{LOG}/{PENDING}/{self.id}.json")

    def end(self) -> State:
        """Remove what this transaction wrote and did not commit, and its marker; returns the
        state it leaves. A commit that failed once its log entry may have been created (the
        store did not answer) is judged by the log as it is: its parts may be committed, and
        are never removed on the word of the state before it; when the log cannot be read
        either, they are left for the vacuum."""
        try:
            final = self.committed or (self.warehouse.state() if self._published else self.state)
        except StoreError:
            return self.state
        self.warehouse._remove_uncommitted(self.id, final.referenced(), self._run_ids)
        self.warehouse.store.delete(self._marker_key)
        return final

    def scratch(self, run_id: str) -> Path:
        return scratch_dir(self.root, self.id, run_id)

    def commit(self, runs: dict[str, RunCommit]) -> State:
        """Make `runs` visible in one log entry; returns the new state."""
        with interrupts_deferred():
            return self._commit(runs)

    def _commit(self, runs: dict[str, RunCommit]) -> State:
        self._put_parts(runs)
        base = self.state
        while True:
            entry = self._entry(base, runs)
            name = _entry_name(entry["version"])
            self._published = True
            if self._create(name, json.dumps(entry, sort_keys=True).encode()):
                break
            newer = self.warehouse.state()  # another writer took this version: commit on top of it
            self._check_conflicts(newer, runs)
            base = newer
        self.committed = self.warehouse.state()
        if entry["version"] % CHECKPOINT_EVERY == 0:
            write_checkpoint(self.warehouse, self.committed)
        return self.committed

    def _create(self, name: str, data: bytes) -> bool:
        """Create the log entry `name`; whether this transaction's entry is the one there. A
        response lost on the way back (the store did not answer, or the key was taken by this
        very request retried) is told by reading the entry back: its `txn` is this one's."""
        key = self.warehouse.key(name)
        for _ in range(3):
            try:
                if self.warehouse.store.put_if_absent(key, data):
                    return True
            except StoreUnavailable:
                pass
            try:
                there = json.loads(self.warehouse.store.get(key))
            except NotFound:
                continue  # the request never arrived: create it again
            except ValueError:
                return False
            return isinstance(there, dict) and there.get("txn") == self.id
        raise StoreUnavailable(f"{self.warehouse.shown(name)}: the store did not take the commit; nothing changed "
                               "that a reader sees unless that entry is there, and `retrieval-eval run` again is safe")

    def _check_conflicts(self, newer: State, runs: dict[str, RunCommit]) -> None:
        """A run another writer changed after this one read it can be committed on top only
        whole: a change of some of its tables (a `runs` row written again with another KB)
        would mix the two versions."""
        for run_id, change in runs.items():
            theirs = newer.runs.get(run_id)
            if theirs is None or theirs.version <= self.state.version:
                continue
            if set(theirs.tables) - set(change.tables):
                raise CommitConflict(f"{self.warehouse.name}: another writer committed run {run_id} while this one "
                                     "ran; run again (unchanged runs are not read again)")

    def _entry(self, base: State, runs: dict[str, RunCommit]) -> dict:
        new = {part.path for change in runs.values() for parts in change.tables.values() for part in parts}
        superseded = sorted(
            {
                part.path
                for run_id, change in runs.items()
                if run_id in base.runs
                for table, part in base.runs[run_id].files()
                if table in change.tables
            }
            - new
        )
        return {
            "format": LOG_FORMAT,
            "version": base.version + 1,
            "txn": self.id,
            "warehouse_id": base.warehouse_id or uuid.uuid4().hex,
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

    def _put_parts(self, runs: dict[str, RunCommit]) -> None:
        """Every part the commit names, durable in the store before the entry that names it:
        flushed on local disk; for a bucket, each part still staged here put under its fresh key
        (`put_part`: a task that wrote a part put it already, from wherever it ran) and kept in
        the cache of parts, so that the report reads it from here."""
        parts = [part for change in runs.values() for table_parts in change.tables.values() for part in table_parts]
        if not self.warehouse.remote:
            for part in parts:
                fsync_path(self.root / part.path)
            return
        staged = [part for part in parts if (self.root / part.path).exists()]
        with ThreadPoolExecutor(max_workers=PARALLEL_REQUESTS) as pool:
            list(pool.map(self.warehouse.put_part, staged))
            uris = [self.warehouse.uri(part.path) for part in parts]
            with _PUT_HERE_LOCK:
                put_here = [uri in _PUT_HERE for uri in uris]
                _PUT_HERE.difference_update(uris)
            # A part is asked for unless this process put it while no vacuum could take it: a
            # task elsewhere (a Dask worker) may have put its part into another store.
            judged = self._may_be_judged_dead()
            asked = [part for part, here in zip(parts, put_here) if judged or not here]
            there = list(pool.map(lambda part: self.warehouse.store.exists(self.warehouse.key(part.path)), asked))
        missing = [part for part, found in zip(asked, there) if not found]
        if missing:
            raise InputError(f"{self.warehouse.shown(missing[0].path)}: a part this run wrote is gone from the store "
                             "before its commit (a vacuum with a retention shorter than the run, or a worker "
                             "whose settings name another store?); nothing was committed: run again")

    def _may_be_judged_dead(self) -> bool:
        """Whether a vacuum may have taken this transaction for a dead one, and removed parts
        it put: only once its marker is older than ORPHAN_FLOOR (`_remove_orphans`). Until half
        of that has passed here (room for a vacuuming machine's clock that differs from the
        store's), the parts this process put are known to be there without asking the store for
        each. The time passed is the larger of the monotonic clock's and the wall clock's (the
        first stops while the machine sleeps, the second may be set back)."""
        if self._marked_at is None:
            return True
        since, since_wall = self._marked_at
        passed = max(time.monotonic() - since, time.time() - since_wall)
        return passed > ORPHAN_FLOOR.total_seconds() / 2


def write_checkpoint(warehouse: Warehouse, state: State) -> None:
    """The whole state at its version, so that readers do not fold every entry; superseded
    files already deleted are left out. The hint beside it names the newest checkpoint."""
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
        "superseded": [item for item in state.superseded if warehouse.store.exists(warehouse.key(item["path"]))],
    }
    warehouse.store.put_if_absent(warehouse.key(_checkpoint_name(state.version)),
                                  json.dumps(snapshot, sort_keys=True).encode())
    warehouse.store.put(warehouse.key(CHECKPOINT_HINT), json.dumps({"version": state.version}).encode(), overwrite=True)


def _entry_name(version: int) -> str:
    return f"{LOG}/{version:020d}.json"


def _checkpoint_name(version: int) -> str:
    return f"{LOG}/{version:020d}.checkpoint.json"


def machine_id() -> str:
    """This machine and process namespace: a writer's process id means something only here
    (a container has its own pids, and may share a host name)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return f"{socket.gethostname()}/{boot}/{namespace}"


def _dead_here(marker: dict) -> bool:
    """Whether a pending transaction's writer was a process of this machine that is gone."""
    if marker.get("machine") != machine_id() or not isinstance(marker.get("pid"), int):
        return False
    try:
        os.kill(marker["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def work_folder(uri: str) -> Path:
    """This machine's working folder for the warehouse at `uri`: staged parts, scratch, the
    catalog before it is put."""
    return cache_folder().parent / "warehouses" / hashlib.sha256(uri.encode()).hexdigest()[:16]


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
