"""The warehouse never loses a committed run, whatever happens to its files (SPEC 10): a lost,
foreign or unreadable catalog, a damaged part, a folder moved or copied, a reader holding the
catalog open, an older DuckDB opening it, a warehouse written before the transaction log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from builders import SAMPLE_BASELINE, SAMPLE_RUN_IDS, cli, evaluate, job_options, reader
from retrieval_eval.flows.outputs import reports as reports_module
from retrieval_eval.flows.outputs.reports import ReportOptions, write_report
from retrieval_eval.flows.warehouse import catalog as catalog_module
from retrieval_eval.flows.warehouse.summary import summary_files
from retrieval_eval.transforms.errors import InputError
from retrieval_eval.flows.warehouse.warehouse import DamagedLog, Warehouse, machine_id
from retrieval_eval.flows.warehouse.warehouse_check import check_warehouse

REGRESSION = "2026-11-23-hybrid-rerank-ptbr-regression"


@pytest.fixture
def sample(sample_copy):
    """The committed sample evaluated into a private warehouse, through the command."""
    result = cli("run", cwd=sample_copy.parent)
    assert result.returncode == 0, result.stderr
    return sample_copy.parent


def views(warehouse: Path) -> dict[str, list]:
    with reader(warehouse) as con:
        return {name: sorted(con.table(name).fetchall(), key=repr)
                for name in ("runs", "cases", "retrieved", "case_metrics", "aggregates", "rejects")}


def catalog_views(catalog: Path) -> dict[str, list]:
    with duckdb.connect(str(catalog), read_only=True) as con:
        return {name: sorted(con.table(name).fetchall(), key=repr)
                for name in ("runs", "cases", "case_metrics", "aggregates")}


def parts(root: Path) -> set[Path]:
    return set(root.glob("data/warehouse/*/run_id=*/*.parquet"))


def test_a_deleted_catalog_loses_nothing_when_a_subset_of_runs_is_run(sample):
    warehouse = sample / "data" / "warehouse"
    before_parts, before = parts(sample), views(warehouse)
    (warehouse / "catalog.duckdb").unlink()
    result = cli("run", f"data/runs/{REGRESSION}", cwd=sample)
    assert result.returncode == 0, result.stderr
    assert parts(sample) >= before_parts  # no file was deleted
    assert views(warehouse) == before  # all four runs' history is there
    # The catalog is made again, with every run in it.
    with duckdb.connect(str(warehouse / "catalog.duckdb"), read_only=True) as con:
        assert sorted(r[0] for r in con.execute("select run_id from runs").fetchall()) == SAMPLE_RUN_IDS


def test_a_catalog_rebuilt_from_the_log_equals_the_original(sample):
    catalog = sample / "data" / "warehouse" / "catalog.duckdb"
    original = catalog_views(catalog)
    catalog.unlink()
    result = cli("warehouse", "rebuild", cwd=sample)
    assert result.returncode == 0, result.stderr
    assert catalog_views(catalog) == original
    # A reading command makes a missing catalog again by itself, and says so.
    catalog.unlink()
    queried = cli("query", "select count(*) as n from runs", "--format", "csv", cwd=sample)
    assert queried.returncode == 0 and queried.stdout == "n\n4\n"
    assert "catalog.duckdb was missing; made it again from the transaction log" in queried.stderr
    assert catalog_views(catalog) == original


def test_a_rebuild_over_a_missing_part_names_it_and_the_next_run_heals_it(sample):
    warehouse = sample / "data" / "warehouse"
    lost = next((warehouse / "retrieved" / f"run_id={SAMPLE_RUN_IDS[1]}").glob("*.parquet"))
    lost.unlink()
    (warehouse / "catalog.duckdb").unlink()
    named = f"{lost}: part of table retrieved of run {SAMPLE_RUN_IDS[1]} is missing; re-run `retrieval-eval run`"
    rebuilt = cli("warehouse", "rebuild", cwd=sample)
    assert rebuilt.returncode == 2 and named in rebuilt.stderr and "Traceback" not in rebuilt.stderr
    # A reader warns that the catalog was not made, then refuses, each naming the part; never
    # with DuckDB's text of the view it could not make.
    queried = cli("query", "select count(*) from runs", cwd=sample)
    assert queried.returncode == 2 and queried.stderr.count(named) == 2 and "LINE 1" not in queried.stderr
    assert "catalog.duckdb not made: " in queried.stderr
    healed = cli("run", cwd=sample)
    assert healed.returncode == 0, healed.stderr
    assert cli("warehouse", "rebuild", cwd=sample).returncode == 0
    assert cli("warehouse", "check", cwd=sample).returncode == 0


@pytest.mark.parametrize("spoil", ["garbage", "foreign", "emptied record", "a user's table in ours"])
def test_an_unreadable_or_foreign_catalog_never_leads_to_a_deletion(sample, spoil):
    warehouse = sample / "data" / "warehouse"
    catalog = warehouse / "catalog.duckdb"
    before_parts = parts(sample)
    if spoil == "a user's table in ours":  # a catalog written anew would drop it
        with duckdb.connect(str(catalog)) as con:
            con.execute("create table notes as select 'mine' as text")
    else:
        catalog.unlink()
    if spoil == "garbage":
        catalog.write_bytes(b"not a database at all" * 100)
    elif spoil == "foreign":  # someone's own database under the same name
        with duckdb.connect(str(catalog)) as con:
            con.execute("create table notes as select 'mine' as text")
    elif spoil == "emptied record":  # the record of whose catalog it is, emptied (it had raised a TypeError)
        with duckdb.connect(str(catalog)) as con:
            con.execute("create table _retrieval_eval (warehouse_id varchar, log_version bigint, root varchar)")
    result = cli("run", f"data/runs/{SAMPLE_RUN_IDS[0]}", cwd=sample)
    assert result.returncode == 0, result.stderr
    assert parts(sample) >= before_parts
    assert len(views(warehouse)["runs"]) == 4
    if spoil != "garbage":  # moved aside, never overwritten
        [aside] = warehouse.glob("catalog.duckdb.foreign-*")
        with duckdb.connect(str(aside), read_only=True) as con:
            tables = {row[0] for row in con.execute("select table_name from duckdb_tables()").fetchall()}
            expected = {"foreign": {"notes"}, "emptied record": {"_retrieval_eval"},
                        "a user's table in ours": {"notes", "_retrieval_eval", "_partitions"}}
            assert tables == expected[spoil]
        assert "moved it to catalog.duckdb.foreign-" in result.stderr


@pytest.mark.damages_warehouse
@pytest.mark.parametrize("damage", ["deleted", "truncated", "corrupt", "corrupt, its mtime kept"])
def test_a_damaged_part_is_named_with_its_run_and_healed_by_run(sample, damage):
    warehouse = sample / "data" / "warehouse"
    state = Warehouse(warehouse).state()
    [part] = state.runs[REGRESSION].tables["case_metrics"]
    path = warehouse / part.path
    data, before = path.read_bytes(), path.stat()
    if damage == "deleted":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:  # same size, other bytes in the middle
        path.write_bytes(data[:100] + bytes(b ^ 0x5A for b in data[100:400]) + data[400:])
    if damage == "corrupt, its mtime kept":  # the stat tells nothing: only the bytes do
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    gated = cli("gate", REGRESSION, "--baseline", str(SAMPLE_BASELINE), cwd=sample)
    assert gated.returncode == 2, gated.stdout
    assert str(path) in gated.stderr and f"run {REGRESSION}" in gated.stderr
    assert "retrieval-eval run" in gated.stderr and "Traceback" not in gated.stderr
    for command in (("compare", REGRESSION, SAMPLE_RUN_IDS[0]), ("export", REGRESSION, "--format", "csv"),
                    ("query", "select * from case_metrics")):
        read = cli(*command, cwd=sample)
        assert read.returncode == 2 and str(path) in read.stderr and "Traceback" not in read.stderr, command
    if damage == "corrupt, its mtime kept":  # the views open (the stat is as committed), then:
        # a statement's own error is its own, not blamed on the damaged part.
        own = cli("query", "select error('boom')", cwd=sample)
        assert own.returncode == 2 and "query failed:" in own.stderr and "boom" in own.stderr
        assert str(path) not in own.stderr
    checked = cli("warehouse", "check", cwd=sample)
    assert checked.returncode == 1 and str(path) in checked.stdout and REGRESSION in checked.stdout

    healed = cli("run", cwd=sample)
    assert healed.returncode == 0, healed.stderr
    assert f"run {REGRESSION}: part {part.path} of table case_metrics is" in healed.stderr
    assert cli("warehouse", "check", cwd=sample).returncode == 0
    assert cli("gate", REGRESSION, "--baseline", str(SAMPLE_BASELINE), cwd=sample).returncode == 1  # its true verdict


@pytest.mark.parametrize("how", ["moved", "copied"])
def test_a_moved_or_copied_warehouse_works_at_its_new_path_for_every_command(sample, tmp_path, how):
    old = sample / "data" / "warehouse"
    new = tmp_path / "elsewhere" / "warehouse"
    new.parent.mkdir()
    (shutil.move if how == "moved" else shutil.copytree)(str(old), str(new))
    args = ["--warehouse", str(new)]
    queried = cli("query", "select count(*) as n from case_metrics where k = 4", *args, "--format", "csv", cwd=tmp_path)
    assert queried.returncode == 0 and queried.stdout == "n\n960\n", queried.stderr
    assert f"made for {old}" in queried.stderr  # the catalog followed the folder
    gated = cli("gate", REGRESSION, *args, "--baseline", str(SAMPLE_BASELINE), cwd=tmp_path)
    assert gated.returncode == 1 and "pt-BR" in gated.stdout, gated.stderr
    refreshed = cli("baseline", "refresh", REGRESSION, *args, "--out", str(tmp_path / "b.json"), cwd=tmp_path)
    assert refreshed.returncode == 0, refreshed.stderr
    assert cli("warehouse", "check", *args, cwd=tmp_path).returncode == 0
    ran = cli("run", str(sample / "data" / "runs"), *args, "--report-dir", str(tmp_path / "rep"), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    # People's view of it: the catalog names the new folder's files.
    with duckdb.connect(str(new / "catalog.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from case_metrics where k = 4").fetchone() == (960,)
        assert con.execute("select root from _retrieval_eval").fetchone() == (str(new),)


def test_a_reader_holding_the_catalog_open_does_not_make_run_lose_its_work(sample):
    warehouse = sample / "data" / "warehouse"
    shutil.rmtree(sample / "data" / "runs" / SAMPLE_RUN_IDS[0])  # one run fewer in the folder...
    held = duckdb.connect(str(warehouse / "catalog.duckdb"), read_only=True)
    try:
        assert held.execute("select count(*) from runs").fetchone() == (4,)
        # ... and a new one beside the others, committed while the catalog is held.
        new_run = sample / "data" / "runs" / "2026-11-30-new"
        shutil.copytree(sample / "data" / "runs" / REGRESSION, new_run)
        manifest = json.loads((new_run / "manifest.json").read_text())
        (new_run / "manifest.json").write_text(json.dumps({**manifest, "run_id": "2026-11-30-new",
                                                           "created_at": "2026-11-30T02:00:00Z"}))
        result = cli("run", cwd=sample)
        assert result.returncode == 0, result.stderr
        assert held.execute("select count(*) from runs").fetchone() == (4,)  # its snapshot, unharmed
    finally:
        held.close()
    with duckdb.connect(str(warehouse / "catalog.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from runs").fetchone() == (5,)


def test_the_duckdb_cli_users_install_opens_the_catalog(sample):
    duckdb_cli = shutil.which("duckdb")
    assert duckdb_cli, "the duckdb-cli package (a test dependency) provides the `duckdb` command"
    version = subprocess.run([duckdb_cli, "--version"], capture_output=True, text=True).stdout
    result = subprocess.run(
        [duckdb_cli, "-readonly", "-csv", str(sample / "data" / "warehouse" / "catalog.duckdb"),
         "-c", "select run_id, n_labelled from runs order by run_id"],
        capture_output=True, text=True, cwd="/",
    )
    assert result.returncode == 0, (version, result.stderr)
    assert result.stdout.splitlines() == ["run_id,n_labelled", *[f"{run_id},240" for run_id in SAMPLE_RUN_IDS]]


def test_superseded_files_are_kept_for_the_retention_then_vacuumed(sample):
    warehouse = Warehouse(sample / "data" / "warehouse")
    run_dir = sample / "data" / "runs" / SAMPLE_RUN_IDS[0]
    (run_dir / "cases.jsonl").write_text((run_dir / "cases.jsonl").read_text() + "\n")  # new bytes, same cases
    before = parts(sample)
    assert cli("run", cwd=sample).returncode == 0
    superseded = {sample / "data" / "warehouse" / item["path"] for item in warehouse.state().superseded}
    assert superseded and superseded <= before and all(p.exists() for p in superseded)  # kept: within retention
    vacuumed = cli("warehouse", "vacuum", "--retention-days", "0", cwd=sample)
    assert vacuumed.returncode == 0 and f"deleted {len(superseded)} superseded or orphaned file(s)" in vacuumed.stdout
    assert not any(p.exists() for p in superseded)
    assert len(views(sample / "data" / "warehouse")["runs"]) == 4
    assert warehouse.vacuum(timedelta(0)) == []


def test_a_warehouse_written_before_the_log_is_adopted_not_lost(tmp_path):
    # What an earlier version left: parts and a catalog whose _partitions table alone says
    # which files make each run.
    root = tmp_path / "wh"
    folder = root / "runs" / "run_id=old-run"
    folder.mkdir(parents=True)
    import polars as pl

    pl.DataFrame({"run_id": ["old-run"], "n_cases": [3]}).write_parquet(folder / "part-20261101T000000-abcd1234-000.parquet")
    with duckdb.connect(str(root / "catalog.duckdb")) as con:
        con.execute("create table _partitions (table_name varchar, run_id varchar, path varchar)")
        con.execute("insert into _partitions values ('runs', 'old-run', 'runs/run_id=old-run/part-20261101T000000-abcd1234-000.parquet')")
    result = cli("query", "select run_id, n_cases from runs", "--warehouse", str(root), "--format", "csv", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "run_id,n_cases\nold-run,3\n"
    assert "adopted 1 run(s)" in result.stderr
    assert Warehouse(root).state().runs["old-run"].tables["runs"][0].rows == 1


def test_a_transaction_leaves_none_of_its_uncommitted_files_or_emptied_folders(tmp_path):
    from retrieval_eval.flows.warehouse.warehouse import new_part

    warehouse = Warehouse(tmp_path / "wh")
    (warehouse.root / "cases" / "run_id=other").mkdir(parents=True)
    someone_elses = warehouse.root / "cases" / "run_id=other" / "part-another-txn-0.parquet"
    someone_elses.write_bytes(b"not this transaction's")
    with warehouse.transaction() as txn:
        written = [new_part(warehouse.root, txn.id, "cases", run_id) for run_id in ("a", "other")]
        for path in written:
            path.write_bytes(b"uncommitted")
        never_written = new_part(warehouse.root, txn.id, "retrieved", "b")  # a write that failed before its file
        assert never_written.parent.is_dir()
    assert not any(path.exists() for path in written)
    assert not written[0].parent.exists() and not never_written.parent.exists()  # emptied folders go
    assert someone_elses.read_bytes() == b"not this transaction's"  # a file it did not write stays


def test_a_transaction_that_named_its_runs_cleans_their_folders_only(tmp_path):
    # SPEC 9: the cost of a transaction's end follows the runs it wrote, not the history; and
    # the runs it named are cleaned whether it ends or dies (the next writer's cleanup).
    import json

    from retrieval_eval.flows.job.run_steps import TxnRef
    from retrieval_eval.flows.warehouse.warehouse import PENDING, new_part

    warehouse = Warehouse(tmp_path / "wh")
    with warehouse.transaction() as txn:
        txn.plan(["b"])
        txn.plan(["a"])  # a later call adds to the runs named
        assert json.loads((warehouse.log_dir / PENDING / f"{txn.id}.json").read_text())["runs"] == ["a", "b"]
        ref = TxnRef(warehouse.root, txn.id, frozenset("ab"))
        planned = [ref.new_part(table, run_id) for table in ("cases", "retrieved") for run_id in "ab"]
        for path in planned:
            path.write_bytes(b"uncommitted")
        with pytest.raises(ValueError, match="did not plan to write run 'c'"):
            ref.new_part("cases", "c")  # its cleanup would never look there
    assert not any(path.exists() for path in planned) and not planned[0].parent.exists()
    assert not (warehouse.root / "cases" / "run_id=c").exists()

    # A writer of this machine that named its runs, then died: its process is gone, so the
    # next writer here removes its files (in the folders of its runs only).
    finished = subprocess.Popen(["true"])
    finished.wait()
    gone = finished.pid  # exited and reaped: no process has this id now
    dead = "20261201T000000-deadbeef"
    (warehouse.log_dir / PENDING / f"{dead}.json").write_text(
        json.dumps({"txn": dead, "runs": ["d"], "machine": machine_id(), "pid": gone}))
    left = new_part(warehouse.root, dead, "retrieved", "d")
    left.write_bytes(b"uncommitted")
    with warehouse.transaction() as txn:
        txn.plan([])
    assert not left.exists() and not left.parent.exists()
    assert not list((warehouse.log_dir / PENDING).iterdir())


@pytest.mark.parametrize("marker", ['{"txn": "t"}', "{", '{"runs": ["../.."]}', '{"runs": [".."]}', '{"runs": "d"}',
                                    '{"runs": ["d"], "machine": "elsewhere/0/0", "pid": 1}'],
                         ids=["no runs", "unreadable", "unsafe name", "parent folder", "not a list", "another machine"])
def test_a_transaction_not_known_dead_is_left_to_the_vacuum_past_the_retention(tmp_path, marker):
    # A marker that does not prove its writer is gone (written elsewhere, or saying nothing of
    # where) may belong to a writer still running on another machine: the next writer leaves
    # its files, and `warehouse vacuum` removes them once the marker is older than the
    # retention.
    from retrieval_eval.flows.warehouse.warehouse import PENDING, new_part

    warehouse = Warehouse(tmp_path / "wh")
    warehouse.log_dir.joinpath(PENDING).mkdir(parents=True)
    dead = "20261201T000000-deadbeef"
    marker_file = warehouse.log_dir / PENDING / f"{dead}.json"
    marker_file.write_text(marker)
    left = [new_part(warehouse.root, dead, "cases", run_id) for run_id in ("d", "e")]
    for path in left:
        path.write_bytes(b"uncommitted")
    with warehouse.transaction():
        pass
    assert all(path.exists() for path in left)
    warehouse.vacuum(timedelta(0), orphans=True)  # a marker written just now: its writer may be running
    assert all(path.exists() for path in left) and marker_file.exists()
    two_hours_ago = time.time() - 2 * 3600  # past ORPHAN_FLOOR (1 h): its writer is taken for gone
    os.utime(marker_file, (two_hours_ago, two_hours_ago))
    warehouse.vacuum(timedelta(days=1), orphans=True)  # the files are within the retention: kept
    assert all(path.exists() for path in left)
    warehouse.vacuum(timedelta(0), orphans=True)  # every file no commit names
    assert not any(path.exists() or path.parent.exists() for path in left)
    assert not (warehouse.log_dir / PENDING / f"{dead}.json").exists()


@pytest.mark.damages_warehouse
@pytest.mark.parametrize("damage", ["unreadable", "missing"])
def test_a_damaged_log_entry_is_named_by_check_and_nothing_writes_over_it(sample, damage):
    warehouse = sample / "data" / "warehouse"
    [entry] = sorted((warehouse / "_log").glob("*[0-9].json"))[:1]
    if damage == "unreadable":
        entry.write_text("{")
    else:  # a later entry must exist for a gap: the sample's first run makes one more
        assert cli("run", f"data/runs/{SAMPLE_RUN_IDS[0]}", "--ks", "1,4", cwd=sample).returncode == 0
        entry.unlink()
    files = sorted(p.relative_to(warehouse) for p in warehouse.rglob("*.parquet"))
    checked = cli("warehouse", "check", cwd=sample)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr  # damage found, said as such
    assert "restore the file from a backup" in checked.stdout and "warehouse check" not in checked.stdout
    for command in (("run",), ("query", "select 1"), ("warehouse", "rebuild")):
        refused = cli(*command, cwd=sample)
        assert refused.returncode == 2 and "nothing is written until it is whole again" in refused.stderr, command
    assert sorted(p.relative_to(warehouse) for p in warehouse.rglob("*.parquet")) == files


def test_a_failure_after_the_commit_says_the_warehouse_is_committed(sample_copy, tmp_path):
    # A path that cannot be a folder (a file stands there) fails as a full disk or a read-only
    # folder does, for root too.
    root = sample_copy.parent
    (tmp_path / "file").write_text("")
    failed = cli("run", "--report-dir", str(tmp_path / "file" / "rep"), cwd=root)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert "the report was not written, but the warehouse is committed (4 run(s) written now)" in failed.stderr
    assert len(views(root / "data" / "warehouse")["runs"]) == 4
    # The summary is derived data: not written, it is a warning, and the report reads the parts.
    summary = root / "data" / "warehouse" / "_summary"
    shutil.rmtree(summary)
    summary.write_text("")
    again = cli("run", f"data/runs/{SAMPLE_RUN_IDS[0]}", "--ks", "1,4", cwd=root)
    assert again.returncode == 0, again.stderr
    assert "could not write" in again.stderr and "the warehouse is committed" in again.stderr
    assert (root / "data" / "reports" / "report.md").is_file()


def test_warehouse_check_lists_a_killed_writers_files_apart_from_damage(sample):
    # What SIGKILL leaves: the writer's marker and the parts it wrote, in no log entry.
    import json

    from retrieval_eval.flows.warehouse.warehouse import PENDING, new_part

    warehouse = sample / "data" / "warehouse"
    dead = "20261201T000000-deadbeef"
    (warehouse / "_log" / PENDING).mkdir(exist_ok=True)
    finished = subprocess.Popen(["true"])
    finished.wait()  # a writer of this machine whose process is gone
    (warehouse / "_log" / PENDING / f"{dead}.json").write_text(
        json.dumps({"txn": dead, "runs": [REGRESSION], "machine": machine_id(), "pid": finished.pid}))
    left = new_part(warehouse, dead, "cases", REGRESSION)
    left.write_bytes(b"uncommitted")
    stray = warehouse / "cases" / f"run_id={REGRESSION}" / "part-of-no-transaction.parquet"
    stray.write_bytes(b"someone's")
    checked = cli("warehouse", "check", cwd=sample)
    assert checked.returncode == 1  # the stray file, which no transaction accounts for
    assert str(stray) in checked.stdout and str(left) not in checked.stdout
    assert "1 file(s) of a transaction that has not ended" in checked.stderr and str(left) in checked.stderr
    stray.unlink()
    assert cli("warehouse", "check", cwd=sample).returncode == 0  # a killed writer's files are not damage
    assert cli("run", cwd=sample).returncode == 0
    assert not left.exists()
    cleaned = cli("warehouse", "check", cwd=sample)
    assert cleaned.returncode == 0 and "has not ended" not in cleaned.stderr


def test_a_commit_that_fails_once_its_log_entry_is_in_place_keeps_its_parts(tmp_path, monkeypatch):
    # The log entry is linked into place, then flushing the log's folder fails (EIO): the
    # commit raises, but the log names the run's parts, so ending the transaction must not
    # remove them as uncommitted (before, it judged them by the state it began from).
    import pyarrow as pa
    import pyarrow.parquet as pq
    from retrieval_eval.flows.storage import local_store as store_module
    from retrieval_eval.flows.storage.errors import StoreError
    from retrieval_eval.flows.warehouse.warehouse import RunCommit, describe_part, new_part

    warehouse = Warehouse(tmp_path / "wh")
    flush = store_module.fsync_path

    def failing_on_the_log(path):
        if path == warehouse.log_dir:
            raise OSError(5, "Input/output error")
        flush(path)

    monkeypatch.setattr(store_module, "fsync_path", failing_on_the_log)
    with pytest.raises(StoreError, match="Input/output error"):
        with warehouse.transaction() as txn:
            path = new_part(warehouse.root, txn.id, "runs", "run-a")
            pq.write_table(pa.table({"run_id": ["run-a"]}), path)
            txn.commit({"run-a": RunCommit({"runs": [describe_part(path, warehouse.root)]}, None, None)})
    assert path.exists()
    monkeypatch.setattr(store_module, "fsync_path", flush)
    committed = Warehouse(tmp_path / "wh").state().runs["run-a"].tables["runs"]
    assert [warehouse.root / part.path for part in committed] == [path]


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_vacuum_with_no_retention_keeps_the_parts_of_a_writer_still_running(tmp_path, where, request):
    # `warehouse vacuum --retention-days 0` beside a writer that has written a part and not yet
    # committed: the writer's marker is fresh and its process alive, so its part stays, and
    # the commit that follows names a part that is there.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from retrieval_eval.flows.warehouse.warehouse import RunCommit, describe_part, new_part

    location = str(tmp_path / "wh") if where == "local" else f"s3://{request.getfixturevalue('s3_bucket')}/wh"
    writer = Warehouse(location)
    with writer.transaction() as txn:
        txn.plan(["run-a"])
        staged = new_part(writer.root, txn.id, "runs", "run-a")
        pq.write_table(pa.table({"run_id": ["run-a"]}), staged)
        part = describe_part(staged, writer.root)
        if writer.remote:
            writer.put_part(part)  # as a task puts the parts it writes
        assert Warehouse(location).vacuum(timedelta(0), orphans=True) == []
        txn.commit({"run-a": RunCommit({"runs": [part]}, None, None)})
    assert check_warehouse(Warehouse(location)).problems == []



def damaged_log_met_by_the_catalog(made_on: list[str]):
    """`write_catalog` meeting a damaged log as it reads the log again after its commit: the
    one error `refresh_catalog` does not turn into a warning (injected)."""
    def write_catalog(warehouse, state):
        made_on.append(threading.current_thread().name)
        raise DamagedLog(f"{warehouse.shown('_log')}: entry 00000000000000000002.json is missing (injected)")
    return write_catalog


def test_an_error_the_catalog_meets_ends_the_run_once_its_report_is_written_and_its_runs_committed(
        sample_copy, tmp_path, monkeypatch):
    """The catalog is made on a thread of its own while the report is written (flows/job/job.py
    `Beside`): an error it meets still ends the command with that error, and loses neither
    the commit nor the report."""
    made_on: list[str] = []
    monkeypatch.setattr(catalog_module, "write_catalog", damaged_log_met_by_the_catalog(made_on))
    options = job_options(sample_copy / "runs", tmp_path / "wh", report_dir=tmp_path / "report")
    with pytest.raises(DamagedLog, match="injected"):
        evaluate(options)
    assert len(made_on) == 1 and made_on[0] != threading.main_thread().name
    assert (tmp_path / "report" / "report.md").is_file() and (tmp_path / "report" / "report.html").is_file()
    assert sorted(Warehouse(tmp_path / "wh").state().runs) == SAMPLE_RUN_IDS


def test_when_the_report_fails_too_its_error_is_raised_and_the_catalogs_is_said(sample_copy, tmp_path, monkeypatch,
                                                                                 capsys):
    made_on: list[str] = []
    monkeypatch.setattr(catalog_module, "write_catalog", damaged_log_met_by_the_catalog(made_on))
    (tmp_path / "a-file").write_text("not a folder")
    options = job_options(sample_copy / "runs", tmp_path / "wh", report_dir=tmp_path / "a-file" / "report")
    with pytest.raises(InputError, match="the report was not written, but the warehouse is committed"):
        evaluate(options)
    assert len(made_on) == 1
    warnings = [line for line in capsys.readouterr().err.splitlines() if "injected" in line]
    assert len(warnings) == 1 and warnings[0].startswith("retrieval-eval: warning: ") and "_log" in warnings[0]
    assert sorted(Warehouse(tmp_path / "wh").state().runs) == SAMPLE_RUN_IDS


def test_a_report_whose_summary_a_later_commit_removes_as_it_is_read_reads_the_parts(sample, tmp_path, monkeypatch):
    """Each writer keeps the summaries of the versions before and after its own commit only,
    so the report of an earlier writer may find its version's summary there and then gone (two
    writers at once: tests/test_reliability.py met it). It reads the runs' parts instead, and
    says the same."""
    warehouse = Warehouse(sample / "data" / "warehouse")
    state = warehouse.state()
    assert summary_files(warehouse, state) is not None
    as_read = write_report(ReportOptions(warehouse.root, tmp_path / "as-read", charts=False), state)

    def found_then_removed(warehouse, state):
        found = summary_files(warehouse, state)
        for path in (found or {}).values():
            path.unlink()  # as a writer committing next removes it
        return found

    monkeypatch.setattr(reports_module, "summary_files", found_then_removed)
    removed = write_report(ReportOptions(warehouse.root, tmp_path / "removed", charts=False), state)
    assert summary_files(warehouse, state) is None  # it was read from the parts
    assert (tmp_path / "removed" / "report.md").read_text() == (tmp_path / "as-read" / "report.md").read_text()
    assert removed.report.runs.equals(as_read.report.runs)
