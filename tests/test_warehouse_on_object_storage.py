"""The warehouse in a bucket keeps every promise of SPEC 10, with several writers on several
machines (SPEC 14), proved against a real S3 API on loopback (moto's server, tests/s3_server.py)
with the real command in processes of its own. A "machine" is a HOME, a cache folder
(XDG_CACHE_HOME: the cache of parts and the warehouse's work folder) and a working directory
of its own; machines share only the bucket.

The protocol itself (a lost response, a lost race, a partial rewrite, a missing entry, a stale
checkpoint hint) is tested on both stores, a local folder and the bucket (`store_under_test`):
moto checks a conditional create and then writes without a lock, so the race logic must hold on
the local store too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from builders import cli, reader, write_run
from retrieval_eval.flows.storage import LocalStore, StoreUnavailable, open_store
from retrieval_eval.transforms.errors import InputError
from retrieval_eval.flows.warehouse.warehouse import (
    CHECKPOINT_HINT,
    ORPHAN_FLOOR,
    CommitConflict,
    DamagedLog,
    RunCommit,
    Warehouse,
    describe_part,
    new_part,
    write_checkpoint,
)
from test_reliability import cli_command, synthetic_cases, whole_runs

NEWEST = "2026-11-23-hybrid-rerank-ptbr-regression"
BASELINE_RUN = "2026-11-16-hybrid-rerank"
# A reader's view of each run, in one statement: what the runs row says against what the other
# views hold. A half run (a runs row without its cases, or cases of another version) shows here.
WHOLE_RUNS_QUERY = """
select r.run_id, r.n_cases,
       (select count(*) from cases c where c.run_id = r.run_id) as cases,
       (select count(*) from case_metrics m where m.run_id = r.run_id) as case_metrics,
       r.n_labelled * len(r.ks) as case_metrics_expected,
       (select count(*) from retrieved t where t.run_id = r.run_id) as retrieved,
       (select sum(n_retrieved) from cases c where c.run_id = r.run_id) as retrieved_expected
from runs r order by r.run_id
"""


@dataclass(frozen=True)
class Machine:
    """A machine that shares only the bucket with the others: its own HOME, cache of parts and
    work folder (XDG_CACHE_HOME), and working directory."""

    folder: Path
    env: dict

    @property
    def cache(self) -> Path:
        return Path(self.env["XDG_CACHE_HOME"])

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return cli(*args, cwd=self.folder / "cwd", env=self.env, timeout=timeout)

    def start(self, *args: str, command: list[str] | None = None) -> subprocess.Popen:
        return subprocess.Popen(command or cli_command(*args), cwd=self.folder / "cwd", env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def machine(tmp_path: Path, name: str) -> Machine:
    folder = tmp_path / "machines" / name
    for sub in ("home", "cache", "cwd"):
        (folder / sub).mkdir(parents=True)
    env = {**os.environ, "HOME": str(folder / "home"), "XDG_CACHE_HOME": str(folder / "cache"),
           "PREFECT_HOME": str(folder / "prefect"), "NO_COLOR": "1"}
    return Machine(folder, env)


@pytest.fixture(autouse=True)
def observer_cache(tmp_path, monkeypatch):
    """This test process reads the bucket too (to check it): its cache of parts is its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "observer-cache"))


@pytest.fixture
def bucket_warehouse(s3_bucket) -> str:
    return f"s3://{s3_bucket}/wh"


def whole_in(uri: str) -> dict[str, int]:
    """Each run of the warehouse at `uri` whole in every view, as the log says; run → n_cases."""
    with reader(Warehouse(uri)) as con:
        return whole_runs(con)


def bucket_keys(uri: str) -> set[str]:
    """Every object below the warehouse's prefix, relative to it (a listing, to prove what
    lies in the bucket)."""
    store, prefix = open_store(uri)
    return {info.key[len(prefix) + 1:] for info in store.list(prefix)}


def uncommitted_parts(uri: str) -> set[str]:
    """Parts in the bucket that no commit names, nor supersedes: a killed writer's."""
    warehouse = Warehouse(uri)
    state = warehouse.state()
    known = state.referenced() | {item["path"] for item in state.superseded}
    return {path for path, _ in warehouse.part_paths()} - known


def bucket_catalog(uri: str, folder: Path) -> duckdb.DuckDBPyConnection:
    """The analysts' way in: catalog.duckdb fetched from the bucket and attached read-only by
    DuckDB, with an fsspec S3 filesystem registered through which its views read the parts."""
    store, prefix = open_store(uri)
    local = folder / f"catalog-{uuid.uuid4().hex[:8]}.duckdb"
    local.write_bytes(store.get(f"{prefix}/catalog.duckdb"))
    con = duckdb.connect()
    con.register_filesystem(s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"]))
    con.execute("attach $path as warehouse (read_only)", {"path": str(local)})
    con.execute("use warehouse")
    return con


def query_rows(on: Machine, uri: str, sql_text: str) -> list[dict]:
    result = on.cli("query", sql_text, "--warehouse", uri, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_whole_rows(rows: list[dict]) -> dict[str, int]:
    """WHOLE_RUNS_QUERY's rows agree run by run; returns run → n_cases."""
    for row in rows:
        assert row["cases"] == row["n_cases"], row
        assert row["case_metrics"] == row["case_metrics_expected"], row
        assert row["retrieved"] == row["retrieved_expected"], row
    return {row["run_id"]: row["n_cases"] for row in rows}


# ---------------------------------------------------------------- 1. the same figures as on disk


def test_the_sample_evaluated_into_a_bucket_gives_the_figures_of_a_local_warehouse(bucket_warehouse, sample_copy,
                                                                                    tmp_path):
    ci = machine(tmp_path, "ci")
    for warehouse in (bucket_warehouse, str(tmp_path / "local-wh")):
        result = ci.cli("run", str(sample_copy / "runs"), "--kb", str(sample_copy / "kb" / "cards.jsonl"),
                        "--warehouse", warehouse, "--report-dir", str(tmp_path / "rep"), "--quiet")
        assert result.returncode == 0, result.stderr
    for sql_text in ("select * from case_metrics order by run_id, case_id, k",
                     "select * from aggregates order by all"):
        in_bucket = query_rows(ci, bucket_warehouse, sql_text)
        on_disk = query_rows(ci, str(tmp_path / "local-wh"), sql_text)
        assert in_bucket and in_bucket == on_disk, sql_text
    assert whole_in(bucket_warehouse) == dict.fromkeys(sorted(p.name for p in (sample_copy / "runs").iterdir()), 315)


# ---------------------------------------------------------------- 2. writers racing


# `retrieval-eval run` in a process held at its first `Transaction._create` (the create of its
# log entry, every part in the bucket) until `sys.argv[2]` writers are held there: each says
# so by a file in the folder `sys.argv[1]` naming the entry it is about to create. The writers
# then race for that entry, the moment they do made exact, where delays only make it likely.
# A writer the others never join exits 3.
HELD_AT_CREATE = """
import os, sys, time
from pathlib import Path
from retrieval_eval.flows.warehouse.warehouse import Transaction
from retrieval_eval.flows.commands.entry import console

barrier, writers, create = Path(sys.argv[1]), int(sys.argv[2]), Transaction._create
held = []

def create_once_all_are_here(self, name, data):
    if not held:
        held.append(name)
        (barrier / self.id).write_text(name)
        deadline = time.monotonic() + 240
        while len(list(barrier.iterdir())) < writers:
            if time.monotonic() > deadline:
                os._exit(3)
            time.sleep(0.02)
    return create(self, name, data)

Transaction._create = create_once_all_are_here
sys.argv = ["retrieval-eval", *sys.argv[3:]]
sys.exit(console())
"""


def test_three_writers_racing_on_one_bucket_all_land_whole(bucket_warehouse, tmp_path):
    sizes = {"run-a": 3_000, "run-b": 2_000, "run-c": 1_000}
    for run_id, n in sizes.items():
        write_run(tmp_path / "runs", run_id, lines=synthetic_cases(n))
    barrier = tmp_path / "held-at-create"
    barrier.mkdir()
    writers = [machine(tmp_path, run_id).start(command=[
        sys.executable, "-c", HELD_AT_CREATE, str(barrier), str(len(sizes)), "run", str(tmp_path / "runs" / run_id),
        "--warehouse", bucket_warehouse, "--report-dir", str(tmp_path / f"rep-{run_id}"), "--quiet"])
               for run_id in sizes]
    for writer in writers:
        assert writer.wait(timeout=300) == 0, writer.stderr.read()
    # All three were held at once, each about to create the first entry: they raced for it.
    assert sorted(path.read_text() for path in barrier.iterdir()) == ["_log/00000000000000000001.json"] * 3
    assert whole_in(bucket_warehouse) == sizes
    assert Warehouse(bucket_warehouse).state().version == 3  # one entry each, none lost, none twice
    # The catalog in the bucket is the newest version's, whichever writer put it last.
    with bucket_catalog(bucket_warehouse, tmp_path) as con:
        assert con.execute("select log_version from _retrieval_eval").fetchone() == (3,)
        assert whole_runs(con) == sizes
    assert not [key for key in bucket_keys(bucket_warehouse) if key.startswith("_log/pending/")]


def test_two_writers_of_the_same_run_end_with_one_whole_version_of_it(bucket_warehouse, tmp_path):
    sizes = {"first": 3_000, "second": 2_000}
    for version, n in sizes.items():
        write_run(tmp_path / version, "run-x", lines=synthetic_cases(n, salt=version))
    writers = {version: machine(tmp_path, version).start("run", str(tmp_path / version), "--warehouse", bucket_warehouse,
                                                         "--report-dir", str(tmp_path / f"rep-{version}"), "--quiet")
               for version in sizes}
    for writer in writers.values():
        assert writer.wait(timeout=300) == 0, writer.stderr.read()
    state = Warehouse(bucket_warehouse).state()
    # Both committed, the later on top: the run is the version of the last entry, whole.
    assert state.version == 2
    last = Path(state.runs["run-x"].source["cases_file"]).parent.parent.name
    assert whole_in(bucket_warehouse) == {"run-x": sizes[last]}
    with bucket_catalog(bucket_warehouse, tmp_path) as con:
        assert whole_runs(con) == {"run-x": sizes[last]}


# ---------------------------------------------------------------- 3. a writer killed


# `retrieval-eval run` in a process that kills itself at one moment of its commit: after every
# part is in the bucket and before its log entry is created ("before-entry"), or right after it
# is ("after-entry"). The moment is exact, where a delay only spreads over the moments.
KILLED_AT = """
import os, signal, sys
from retrieval_eval.flows.warehouse.warehouse import Transaction
from retrieval_eval.flows.commands.entry import console

moment, create = sys.argv[1], Transaction._create

def create_then_die(self, name, data):
    if moment == "after-entry":
        create(self, name, data)
    os.kill(os.getpid(), signal.SIGKILL)

Transaction._create = create_then_die
sys.argv = ["retrieval-eval", *sys.argv[2:]]
sys.exit(console())
"""


def test_a_writer_killed_at_any_moment_leaves_each_run_whole_or_as_before(bucket_warehouse, tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "small", lines=synthetic_cases(50))
    write_run(runs, "big", lines=synthetic_cases(20_000))
    nightly, analyst = machine(tmp_path, "nightly"), machine(tmp_path, "analyst")
    args = ("run", str(runs), "--warehouse", bucket_warehouse, "--report-dir", str(tmp_path / "rep"), "--ks", "1,10",
            "--quiet")
    assert nightly.cli(*args).returncode == 0
    committed = whole_in(bucket_warehouse)
    assert committed == {"small": 50, "big": 20_000}

    # A new version of `big` before each kill, so that every writer has a commit to make.
    # This writer commits about 0.6 s after it starts (more on a loaded machine): the delays
    # are dense there, and the exact moments around the entry follow (KILLED_AT).
    for number, delay in enumerate((0.25, 0.4, 0.5, 0.6, 0.7, 0.85, 1.1, 1.5), start=1):
        n = 20_000 + 100 * number
        write_run(runs, "big", lines=synthetic_cases(n))
        writer = nightly.start(*args)
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        now = whole_in(bucket_warehouse)
        assert now["small"] == 50 and now["big"] in (committed["big"], n), (delay, now, committed)
        committed = now

    # Killed with every part in the bucket and no entry: nothing of it is visible, its parts
    # stay (a reader, a check and a vacuum within the retention leave them), until a vacuum
    # past the retention removes them.
    write_run(runs, "big", lines=synthetic_cases(25_000))
    before_kill = bucket_keys(bucket_warehouse)
    killed = nightly.start(command=[sys.executable, "-c", KILLED_AT, "before-entry", *args])
    assert killed.wait(timeout=300) == -signal.SIGKILL, killed.stderr.read()
    assert whole_in(bucket_warehouse) == committed
    orphans = uncommitted_parts(bucket_warehouse)
    assert len(orphans) == 6 and all(path.split("/")[1] == "run_id=big" for path in orphans), orphans
    marker = {key for key in bucket_keys(bucket_warehouse) - before_kill if key.startswith("_log/pending/")}
    assert len(marker) == 1
    assert assert_whole_rows(query_rows(analyst, bucket_warehouse, WHOLE_RUNS_QUERY)) == committed
    checked = analyst.cli("warehouse", "check", "--warehouse", bucket_warehouse)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "6 file(s) of a transaction that has not ended" in checked.stderr
    assert analyst.cli("warehouse", "vacuum", "--warehouse", bucket_warehouse).returncode == 0
    assert orphans <= bucket_keys(bucket_warehouse) and marker <= bucket_keys(bucket_warehouse)
    vacuumed = analyst.cli("warehouse", "vacuum", "--retention-days", "0", "--warehouse", bucket_warehouse)
    assert vacuumed.returncode == 0, vacuumed.stderr
    left = bucket_keys(bucket_warehouse)
    assert not orphans & left and not marker & left
    assert Warehouse(bucket_warehouse).state().referenced() <= left
    assert whole_in(bucket_warehouse) == committed

    # Killed right after its entry was created: the run is committed, whole, and a vacuum past
    # the retention keeps every part the log names.
    killed = nightly.start(command=[sys.executable, "-c", KILLED_AT, "after-entry", *args])
    assert killed.wait(timeout=300) == -signal.SIGKILL, killed.stderr.read()
    assert whole_in(bucket_warehouse) == {"small": 50, "big": 25_000}
    assert analyst.cli("warehouse", "vacuum", "--retention-days", "0", "--warehouse", bucket_warehouse).returncode == 0
    assert whole_in(bucket_warehouse) == {"small": 50, "big": 25_000}
    assert analyst.cli("warehouse", "check", "--warehouse", bucket_warehouse).returncode == 0

    finished = nightly.cli(*args)
    assert finished.returncode == 0, finished.stderr
    assert whole_in(bucket_warehouse) == {"small": 50, "big": 25_000}
    assert uncommitted_parts(bucket_warehouse) == set()


# ---------------------------------------------------------------- 4. readers during commit and vacuum


def test_a_reader_in_a_loop_during_a_commit_and_a_vacuum_never_fails_nor_sees_half_a_run(bucket_warehouse, tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "small", lines=synthetic_cases(50))
    write_run(runs, "big", lines=synthetic_cases(20_000))
    nightly, upkeep = machine(tmp_path, "nightly"), machine(tmp_path, "upkeep")
    args = ("run", str(runs), "--warehouse", bucket_warehouse, "--report-dir", str(tmp_path / "rep"), "--quiet")
    assert nightly.cli(*args).returncode == 0
    write_run(runs, "big", lines=synthetic_cases(24_000))

    # Each query on a machine of its own, whose cache of parts is empty: every part it reads
    # comes from the bucket while the writer and the vacuum work on it.
    seen: list[tuple[float, float, dict[str, int]]] = []  # (started, ended, run → n_cases)
    failures: list[str] = []
    stop = threading.Event()

    def read_in_a_loop() -> None:
        while not stop.is_set():
            started = time.monotonic()
            result = machine(tmp_path, f"reader-{len(seen) + len(failures)}").cli(
                "query", WHOLE_RUNS_QUERY, "--warehouse", bucket_warehouse, "--format", "json")
            if result.returncode != 0:
                failures.append(result.stderr)
                continue
            seen.append((started, time.monotonic(), assert_whole_rows(json.loads(result.stdout))))

    loop = threading.Thread(target=read_in_a_loop)
    loop.start()
    try:
        writer = nightly.start(*args)
        assert writer.wait(timeout=300) == 0, writer.stderr.read()
        committed_at = time.monotonic()
        # A vacuum past a retention of 0 once no query that began before the commit is still
        # reading (the retention a reader is owed, shrunk to that), while the loop reads on.
        while not any(started > committed_at for started, _, _ in seen) and not failures:
            time.sleep(0.05)
        vacuumed = upkeep.cli("warehouse", "vacuum", "--retention-days", "0", "--warehouse", bucket_warehouse)
        vacuumed_at = time.monotonic()
        while not any(started > vacuumed_at for started, _, _ in seen) and not failures:
            time.sleep(0.05)
    finally:
        stop.set()
        loop.join()
    assert failures == []
    assert vacuumed.returncode == 0 and "deleted 6 superseded" in vacuumed.stdout, vacuumed.stdout + vacuumed.stderr
    versions = [figures["big"] for _, _, figures in seen]
    assert all(figures["small"] == 50 for _, _, figures in seen)
    assert versions[0] == 20_000 and versions[-1] == 24_000
    assert versions == sorted(versions) and set(versions) == {20_000, 24_000}  # never back to the old one
    assert len(seen) >= 3


# ---------------------------------------------------------------- 5. a second machine


def test_a_second_machine_gets_the_same_answers_and_its_unchanged_rerun_commits_nothing(bucket_warehouse,
                                                                                        sample_copy, tmp_path):
    first, second = machine(tmp_path, "first"), machine(tmp_path, "second")
    run = ("run", str(sample_copy / "runs"), "--kb", str(sample_copy / "kb" / "cards.jsonl"),
           "--warehouse", bucket_warehouse, "--report-dir", "report", "--quiet")  # each in its own cwd
    assert first.cli(*run).returncode == 0
    log_entries = {key for key in bucket_keys(bucket_warehouse) if key.startswith("_log/0")}
    assert log_entries == {"_log/00000000000000000001.json"}
    commands = [
        ("query", "select run_id, n_cases, n_labelled, headline_k from runs order by run_id", "--format", "json"),
        ("gate", NEWEST, "--baseline", str(Path(__file__).resolve().parents[1] / "data" / "baselines" / "baseline.json"),
         "--format", "json"),
        ("compare", BASELINE_RUN, NEWEST, "--format", "json"),
        ("export", NEWEST, "--format", "trec-eval", "--out", "export.txt"),
    ]
    for command in commands:
        answers = [on.cli(*command, "--warehouse", bucket_warehouse) for on in (first, second)]
        assert answers[0].returncode in (0, 1), answers[0].stderr  # the gate fails the pt-BR regression: 1
        assert [a.returncode for a in answers[1:]] == [answers[0].returncode], answers[1].stderr
        assert answers[1].stdout == answers[0].stdout, command[0]
        assert answers[0].stdout or command[0] == "export", command[0]  # export writes its --out
    exported = [(on.folder / "cwd" / "export.txt").read_bytes() for on in (first, second)]
    assert exported[0] and exported[1] == exported[0]
    # The second machine downloaded the parts it read into its own cache, none into the first's.
    assert list((second.cache / "retrieval-eval" / "objects").rglob("*/*"))

    rerun = second.cli(*run)
    assert rerun.returncode == 0, rerun.stderr
    assert {key for key in bucket_keys(bucket_warehouse) if key.startswith("_log/0")} == log_entries
    assert Warehouse(bucket_warehouse).state().version == 1
    reports = [(on.folder / "cwd" / "report" / "report.md").read_text() for on in (first, second)]
    assert reports[1] == reports[0] and NEWEST in reports[0]


# ---------------------------------------------------------------- 6. the analysts' catalog


def test_the_catalog_in_the_bucket_opens_in_duckdb_and_its_views_read_the_parts_by_uri(bucket_warehouse, s3_bucket,
                                                                                       sample_copy, tmp_path):
    result = machine(tmp_path, "ci").cli("run", str(sample_copy / "runs"), "--kb", str(sample_copy / "kb" / "cards.jsonl"),
                                         "--warehouse", bucket_warehouse, "--report-dir", str(tmp_path / "rep"), "--quiet")
    assert result.returncode == 0, result.stderr
    by_run = "select run_id, count(*), sum(hit_at_k) from case_metrics group by run_id order by run_id"
    with reader(Warehouse(bucket_warehouse)) as con:
        expected = con.execute(by_run).fetchall()
    with bucket_catalog(bucket_warehouse, tmp_path) as con:
        for view in ("runs", "cases", "retrieved", "case_metrics", "aggregates"):
            (text,) = con.execute("select sql from duckdb_views() where database_name = 'warehouse' and view_name = $v",
                                  {"v": view}).fetchone()
            assert f"'s3://{s3_bucket}/wh/{view}/run_id=" in text and str(tmp_path) not in text, text[:300]
        assert con.execute(by_run).fetchall() == expected
        assert len(expected) == 4
        assert whole_runs(con) == {run_id: 315 for run_id, _, _ in expected}


# ---------------------------------------------------------------- 7. the log's protocol, on both stores


class ResponseLost:
    """A store whose first create of a log entry is taken by the store (or, with `arrives`
    False, never arrives) and whose answer is lost: the writer hears StoreUnavailable."""

    def __init__(self, store, *, arrives: bool):
        self.inner, self.arrives, self.lost = store, arrives, 0

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key.rsplit("/", 1)[-1][0].isdigit() and not self.lost:
            self.lost += 1
            if self.arrives:
                self.inner.put_if_absent(key, data)
            raise StoreUnavailable(f"{key}: the connection was reset")
        return self.inner.put_if_absent(key, data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class CountingGets:
    """A store that counts its `get` requests (reads of the log)."""

    def __init__(self, store):
        self.inner, self.gets = store, 0

    def get(self, key: str, expected_checksum: str | None = None) -> bytes:
        self.gets += 1
        return self.inner.get(key, expected_checksum)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def warehouse_location(store_under_test) -> str:
    """Where a warehouse lies on the store under test: a local folder, or a bucket prefix."""
    store, prefix = store_under_test
    return f"/{prefix}" if isinstance(store, LocalStore) else f"s3://{store.location.bucket}/{prefix}"


def part_of(txn, table: str, run_id: str, rows: int):
    """A real Parquet part of `rows` rows written where the transaction stages its parts."""
    path = new_part(txn.root, txn.id, table, run_id)
    pq.write_table(pa.table({"run_id": [run_id] * rows, "row": list(range(rows))}), path)
    return describe_part(path, txn.root)


def run_commit(txn, run_id: str, tables=("runs", "cases"), rows: int = 1) -> RunCommit:
    return RunCommit({table: [part_of(txn, table, run_id, rows)] for table in tables}, f"key-{txn.id}", None)


def commit_runs(location: str, *run_ids: str, rows: int = 1):
    """One commit per run, each by a writer of its own; the state after the last."""
    state = None
    for run_id in run_ids:
        with Warehouse(location).transaction() as txn:
            state = txn.commit({run_id: run_commit(txn, run_id, rows=rows)})
    return state


def log_entries(warehouse: Warehouse) -> list[str]:
    return sorted(info.key.rsplit("/", 1)[-1] for info in warehouse.store.list(warehouse.key("_log"))
                  if info.key.rsplit("/", 1)[-1][0].isdigit() and "checkpoint" not in info.key)


@pytest.mark.parametrize("arrives", [True, False], ids=["created-then-lost", "never-arrived"])
def test_a_lost_response_is_recognised_as_the_writers_own_commit_and_not_committed_twice(warehouse_location, arrives):
    warehouse = Warehouse(warehouse_location)
    warehouse.store = lossy = ResponseLost(warehouse.store, arrives=arrives)
    with warehouse.transaction() as txn:
        state = txn.commit({"run-a": run_commit(txn, "run-a")})
    assert lossy.lost == 1
    assert state.version == 1 and list(state.runs) == ["run-a"]
    assert log_entries(warehouse) == ["00000000000000000001.json"]  # one entry, its own
    assert json.loads(warehouse.store.get(warehouse.key("_log/00000000000000000001.json")))["txn"] == txn.id
    assert Warehouse(warehouse_location).state().runs["run-a"].tables == state.runs["run-a"].tables


def test_a_writer_that_loses_the_race_commits_on_top_of_the_winner(warehouse_location):
    commit_runs(warehouse_location, "run-0")
    with Warehouse(warehouse_location).transaction() as first, Warehouse(warehouse_location).transaction() as second:
        assert first.state.version == second.state.version == 1  # the same read state
        first.commit({"run-a": run_commit(first, "run-a")})
        state = second.commit({"run-b": run_commit(second, "run-b")})  # version 2 is taken: it takes 3
    assert state.version == 3 and sorted(state.runs) == ["run-0", "run-a", "run-b"]
    warehouse = Warehouse(warehouse_location)
    assert log_entries(warehouse) == [f"{v:020d}.json" for v in (1, 2, 3)]
    entries = [json.loads(warehouse.store.get(warehouse.key(f"_log/{name}"))) for name in log_entries(warehouse)]
    assert [(e["txn"], list(e["runs"])) for e in entries[1:]] == [(first.id, ["run-a"]), (second.id, ["run-b"])]
    assert warehouse.state().runs == state.runs


def test_a_partial_rewrite_of_a_run_another_writer_changed_is_a_conflict(warehouse_location):
    commit_runs(warehouse_location, "run-x")
    warehouse = Warehouse(warehouse_location)
    with pytest.raises(CommitConflict, match="another writer committed run run-x while this one ran"):
        with Warehouse(warehouse_location).transaction() as whole, warehouse.transaction() as partial:
            whole.commit({"run-x": run_commit(whole, "run-x", rows=2)})
            lost = run_commit(partial, "run-x", tables=("runs",), rows=3)  # its runs row only
            partial.commit({"run-x": lost})
    state = Warehouse(warehouse_location).state()
    assert state.version == 2  # the conflicting writer committed nothing
    assert [part.rows for _, part in state.runs["run-x"].files()] == [2, 2]  # the whole rewrite, as it was
    assert not warehouse.store.exists(warehouse.key(lost.tables["runs"][0].path))  # its part went with it


def test_a_whole_rewrite_of_a_run_another_writer_changed_lands_on_top(warehouse_location):
    commit_runs(warehouse_location, "run-x")
    with Warehouse(warehouse_location).transaction() as first, Warehouse(warehouse_location).transaction() as second:
        first.commit({"run-x": run_commit(first, "run-x", rows=2)})
        state = second.commit({"run-x": run_commit(second, "run-x", rows=3)})
    assert state.version == 3
    assert [part.rows for _, part in state.runs["run-x"].files()] == [3, 3]  # one version, never a mix


@pytest.mark.damages_warehouse
def test_a_missing_entry_in_the_middle_of_the_log_is_a_damaged_log(warehouse_location):
    commit_runs(warehouse_location, "run-a", "run-b", "run-c")
    warehouse = Warehouse(warehouse_location)
    warehouse.store.delete(warehouse.key("_log/00000000000000000002.json"))
    with pytest.raises(DamagedLog, match="log entry 00000000000000000002.json is missing"):
        Warehouse(warehouse_location).state()
    with pytest.raises(DamagedLog):  # and no writer commits over it
        with Warehouse(warehouse_location).transaction():
            pass


def test_a_stale_or_missing_checkpoint_hint_costs_reads_not_correctness(warehouse_location):
    at_two = commit_runs(warehouse_location, "run-a", "run-b")
    warehouse = Warehouse(warehouse_location)
    write_checkpoint(warehouse, at_two)
    truth = commit_runs(warehouse_location, "run-c", "run-d", "run-e")
    write_checkpoint(warehouse, truth)
    hint = warehouse.key(CHECKPOINT_HINT)

    def read_with(hint_text: bytes | None):
        if hint_text is None:
            warehouse.store.delete(hint)
        else:
            warehouse.store.put(hint, hint_text, overwrite=True)
        reading = Warehouse(warehouse_location)
        reading.store = counting = CountingGets(reading.store)
        state = reading.state()
        assert (state.version, state.runs, state.warehouse_id) == (truth.version, truth.runs, truth.warehouse_id)
        return counting.gets

    current = read_with(b'{"version": 5}')
    stale = read_with(b'{"version": 2}')
    assert read_with(b'{"version": 9}') > current  # names a checkpoint that is not there
    assert read_with(b"not json") > current
    missing = read_with(None)
    assert current < stale < missing  # 2 + 1 entry read, 2 + 3 entries, 6 probes from the start


# ---------------------------------------------------------------- 8. warehouse check on a bucket



class CountingHeads:
    """A store that counts the parts it is asked about (`exists`: a HEAD in a bucket)."""

    def __init__(self, store):
        self.inner, self.asked = store, []

    def exists(self, key: str) -> bool:
        self.asked.append(key)
        return self.inner.exists(key)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def put_by_a_task(warehouse: Warehouse, txn, run_id: str) -> RunCommit:
    """A run's parts put to the bucket as a task puts its own (`put_part`), wherever it ran:
    the commit finds none of them staged here."""
    change = run_commit(txn, run_id)
    for parts in change.tables.values():
        for part in parts:
            warehouse.put_part(part)
    return change


def test_a_young_transaction_commits_its_tasks_parts_without_asking_the_bucket_for_each(bucket_warehouse):
    """A vacuum takes a pending transaction for dead only once its marker is older than
    ORPHAN_FLOOR, whatever retention it is given (`_remove_orphans`); until then the parts its
    tasks put are there, and the commit sends no request per part. Shown with a vacuum of zero
    retention between the puts and the commit: the parts stay and the run reads whole."""
    warehouse = Warehouse(bucket_warehouse)
    warehouse.store = counting = CountingHeads(warehouse.store)
    with warehouse.transaction() as txn:
        txn.plan(["run-a"])
        change = put_by_a_task(warehouse, txn, "run-a")
        assert Warehouse(bucket_warehouse).vacuum(timedelta(0), orphans=True) == []
        state = txn.commit({"run-a": change})
    assert [key for key in counting.asked if "/run_id=" in key] == []
    parts = [part for _, part in state.runs["run-a"].files()]
    assert len(parts) == 2 and all(warehouse.store.inner.exists(warehouse.key(part.path)) for part in parts)


def test_a_part_gone_before_the_commit_of_a_transaction_a_vacuum_may_judge_dead_commits_nothing(bucket_warehouse):
    """Past half of ORPHAN_FLOOR (the other half is room for clocks that differ), a vacuum
    elsewhere may have taken the transaction for dead and removed its parts: each part its
    tasks put is asked for, and one that is gone stops the commit with nothing committed."""
    commit_runs(bucket_warehouse, "run-0")
    warehouse = Warehouse(bucket_warehouse)
    warehouse.store = counting = CountingHeads(warehouse.store)
    with pytest.raises(InputError, match="a part this run wrote is gone from the store before its commit"):
        with warehouse.transaction() as txn:
            txn.plan(["run-a"])
            change = put_by_a_task(warehouse, txn, "run-a")
            gone = change.tables["cases"][0]
            warehouse.store.delete(warehouse.key(gone.path))  # as a vacuum on another machine would
            # its marker put that long ago, by either clock
            txn._marked_at = tuple(clock - ORPHAN_FLOOR.total_seconds() / 2 - 1 for clock in txn._marked_at)
            txn.commit({"run-a": change})
    assert sorted(key.rsplit("/", 1)[-1] for key in counting.asked if "/run_id=run-a/" in key) == sorted(
        part.path.rsplit("/", 1)[-1] for parts in change.tables.values() for part in parts)
    state = Warehouse(bucket_warehouse).state()
    assert state.version == 1 and list(state.runs) == ["run-0"]
    assert uncommitted_parts(bucket_warehouse) == set()  # the one left went with the transaction



def test_a_part_a_task_put_elsewhere_is_asked_for_and_one_missing_stops_even_a_young_commit(bucket_warehouse):
    """A part this process did not put (a Dask worker's) is asked for at every commit: a
    worker whose settings name another store puts its parts there, and the commit of a young
    transaction that names them stops with nothing committed."""
    warehouse = Warehouse(bucket_warehouse)
    warehouse.store = counting = CountingHeads(warehouse.store)
    with pytest.raises(InputError, match="a part this run wrote is gone from the store before its commit"):
        with warehouse.transaction() as txn:
            txn.plan(["run-a"])
            change = run_commit(txn, "run-a")
            elsewhere, there = change.tables["cases"][0], change.tables["runs"][0]
            other_store, other_prefix = open_store(f"{bucket_warehouse}-another-store")
            other_store.put(f"{other_prefix}/{elsewhere.path}", txn.root / elsewhere.path)
            warehouse.store.inner.put(warehouse.key(there.path), txn.root / there.path)
            for part in (elsewhere, there):
                (txn.root / part.path).unlink()  # put by a task that ran elsewhere: nothing staged here
            txn.commit({"run-a": change})
    assert sorted(key.rsplit("/", 1)[-1] for key in counting.asked if "/run_id=run-a/" in key) == sorted(
        part.path.rsplit("/", 1)[-1] for part in (elsewhere, there))
    assert Warehouse(bucket_warehouse).state().version == 0


@pytest.mark.parametrize("monotonic_ago, wall_ago, judged", [
    (0, 0, False),
    (0, ORPHAN_FLOOR.total_seconds(), True),  # the machine slept: the monotonic clock stood still
    (ORPHAN_FLOOR.total_seconds(), -ORPHAN_FLOOR.total_seconds(), True),  # the wall clock was set back
    (ORPHAN_FLOOR.total_seconds() / 2 - 60, 0, False),
])
def test_a_transaction_is_taken_for_one_a_vacuum_may_judge_dead_by_either_clock(bucket_warehouse, monotonic_ago,
                                                                               wall_ago, judged):
    with Warehouse(bucket_warehouse).transaction() as txn:
        txn._marked_at = (time.monotonic() - monotonic_ago, time.time() - wall_ago)
        assert txn._may_be_judged_dead() is judged


@pytest.mark.damages_warehouse
def test_warehouse_check_names_a_part_deleted_from_the_bucket_and_one_whose_bytes_were_replaced(bucket_warehouse,
                                                                                               tmp_path):
    for run_id, n in (("run-a", 40), ("run-b", 30)):  # parts of other bytes (a cache of parts is by content)
        write_run(tmp_path / "runs", run_id, lines=synthetic_cases(n))
    writer, elsewhere = machine(tmp_path, "writer"), machine(tmp_path, "elsewhere")
    result = writer.cli("run", str(tmp_path / "runs"), "--warehouse", bucket_warehouse,
                        "--report-dir", str(tmp_path / "rep"), "--quiet")
    assert result.returncode == 0, result.stderr
    assert writer.cli("warehouse", "check", "--warehouse", bucket_warehouse).returncode == 0
    state = Warehouse(bucket_warehouse).state()
    deleted = state.runs["run-a"].tables["cases"][0]
    replaced = state.runs["run-b"].tables["case_metrics"][0]
    store, prefix = open_store(bucket_warehouse)
    store.delete(f"{prefix}/{deleted.path}")
    data = bytearray(store.get(f"{prefix}/{replaced.path}"))
    data[len(data) // 2] ^= 0xFF  # the same size, one byte other: only its digest tells
    store.put(f"{prefix}/{replaced.path}", bytes(data), overwrite=True)

    # Named by every machine: one that never read the parts, and the writer, whose cache of
    # parts still holds both as they were committed (the check reads the bucket, not the cache).
    for on in (elsewhere, writer):
        checked = on.cli("warehouse", "check", "--warehouse", bucket_warehouse)
        assert checked.returncode == 1, (on.folder.name, checked.stdout + checked.stderr)
        lines = checked.stdout.splitlines()
        assert any(line.startswith(f"{bucket_warehouse}/{deleted.path}: table cases of run run-a: missing")
                   for line in lines), lines
        assert any(line.startswith(f"{bucket_warehouse}/{replaced.path}: table case_metrics of run run-b: ")
                   and "its bytes differ from those committed" in line for line in lines), lines
        assert "warehouse check: 2 problem(s)" in checked.stderr and "Traceback" not in checked.stderr
