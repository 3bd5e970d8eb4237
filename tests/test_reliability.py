"""Every run whole or absent: atomic commits under SIGKILL (in the log and in the catalog), a
lock between two writers, idempotent re-runs, reuse of unchanged runs, and clear messages for
an unwritable warehouse, a full disk or an overlong record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from builders import case, chunk, evaluate, job_options, reader, write_run
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.transforms.errors import RejectedRecords
from retrieval_eval.transforms.records import MAX_RECORD_BYTES

TABLES = ["aggregates", "case_metrics", "cases", "rejects", "retrieved", "runs"]


def synthetic_cases(n: int, salt: str = "") -> list[str]:
    lines = []
    for i in range(n):
        cards = [f"card-{(i * 7 + j) % 97}" for j in range(8)]
        items = [{"id": f"{c}::{j:02d}", "parent_id": c, "score": 1 - j / 10, "text": "lorem ipsum " * 8}
                 for j, c in enumerate(cards)]
        gold = [cards[i % 9]] if i % 9 < 8 else [f"card-missing{salt}"]
        lines.append(json.dumps(case(f"c{i}", items, gold, locale=("en", "es-419")[i % 2])))
    return lines


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "retrieval_eval", *args]


def whole_runs(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Each run has all its rows in every view; returns run → n_cases."""
    runs = {r[0]: r[1:] for r in con.execute("select run_id, n_cases, n_labelled, len(ks) from runs").fetchall()}
    for run_id, (n_cases, n_labelled, n_ks) in runs.items():
        params = {"id": run_id}
        cases, retrieved_expected = con.execute(
            "select count(*), sum(n_retrieved) from cases where run_id = $id", params).fetchone()
        assert cases == n_cases, run_id
        assert con.execute("select count(*) from retrieved where run_id = $id", params).fetchone()[0] == retrieved_expected
        assert con.execute("select count(*) from case_metrics where run_id = $id", params).fetchone()[0] == n_labelled * n_ks
        assert con.execute("select count(*) from aggregates where run_id = $id", params).fetchone()[0] > 0
    return {run_id: values[0] for run_id, values in runs.items()}


def assert_every_run_whole(warehouse: Path) -> dict[str, int]:
    """Whole runs as the log says (what every command reads) and as the catalog says (what a
    person reads with DuckDB); the catalog may be a commit behind, never half of one."""
    if not (warehouse / "_log").is_dir() or not Warehouse(warehouse).state().runs:
        return {}
    with reader(warehouse) as con:
        truth = whole_runs(con)
    if (warehouse / "catalog.duckdb").exists():
        with duckdb.connect(str(warehouse / "catalog.duckdb"), read_only=True) as con:
            whole_runs(con)
    return truth


def leftovers(warehouse: Path) -> set[Path]:
    """Parquet files that are neither committed nor superseded by a commit."""
    state = Warehouse(warehouse).state()
    known = state.referenced() | {item["path"] for item in state.superseded}
    return {p for p in warehouse.glob("*/run_id=*/*.parquet") if str(p.relative_to(warehouse)) not in known}


def test_sigkill_at_any_moment_leaves_each_run_as_before_or_whole(tmp_path):
    runs, warehouse = tmp_path / "runs", tmp_path / "wh"
    write_run(runs, "small", lines=synthetic_cases(50))
    write_run(runs, "big", lines=synthetic_cases(20_000))
    args = cli_command("run", str(runs), "--warehouse", str(warehouse), "--report-dir", str(tmp_path / "rep"), "--ks", "1,10")
    subprocess.run(args, check=True, capture_output=True)
    assert assert_every_run_whole(warehouse) == {"small": 50, "big": 20_000}

    write_run(runs, "big", lines=synthetic_cases(24_000, salt="-v2"))  # the new version: 24k cases
    for delay in (0.3, 0.8, 1.3, 1.8, 2.4, 3.0, 4.0):
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        state = assert_every_run_whole(warehouse)
        assert state["small"] == 50 and state["big"] in (20_000, 24_000), state
    finished = subprocess.run(args, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    assert assert_every_run_whole(warehouse) == {"small": 50, "big": 24_000}
    # Nothing of the killed writers is left behind (the next writer on this machine removed it:
    # their processes are gone); what the last
    # commit superseded stays for the retention, then goes.
    assert leftovers(warehouse) == set()
    assert not list((warehouse / "_log" / "pending").iterdir())
    Warehouse(warehouse).vacuum(timedelta(0))
    parts = sorted(p.relative_to(warehouse).parts[0] for p in warehouse.glob("*/run_id=*/*"))
    assert parts == sorted(TABLES * 2)


def test_two_writers_on_one_warehouse_both_finish_correctly(tmp_path):
    runs, warehouse = tmp_path / "runs", tmp_path / "wh"
    write_run(runs, "a", lines=synthetic_cases(8_000))
    write_run(runs, "b", lines=synthetic_cases(6_000))
    first = subprocess.Popen(cli_command("run", str(runs / "a"), "--warehouse", str(warehouse), "--report-dir", str(tmp_path / "r1")),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(cli_command("run", str(runs / "b"), "--warehouse", str(warehouse), "--report-dir", str(tmp_path / "r2")),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert second.wait(timeout=300) == 0, second.stderr.read()
    assert assert_every_run_whole(warehouse) == {"a": 8_000, "b": 6_000}


def test_rerunning_the_same_artifacts_changes_nothing(tmp_path):
    write_run(tmp_path / "runs", "run-a", lines=synthetic_cases(300))
    options = job_options(tmp_path / "runs", tmp_path / "wh", ks=(1, 5))

    def snapshot():
        with reader(tmp_path / "wh") as con:
            return {name: con.table(name).pl().sort(con.table(name).columns[:3]) for name in TABLES}

    evaluate(options)
    before, version = snapshot(), Warehouse(tmp_path / "wh").state().version
    evaluate(options)
    after = snapshot()
    for name in before:
        assert before[name].equals(after[name]), name
    assert Warehouse(tmp_path / "wh").state().version == version  # nothing changed: no commit at all
    assert len(list((tmp_path / "wh").glob("*/run_id=run-a/part-*.parquet"))) == 6


def test_overlong_record_is_rejected_by_its_line_number(tmp_path):
    good = json.dumps(case("good", [chunk("A::00", "A")], ["A"]))
    huge = json.dumps(case("huge", [chunk("A::00", "A")], ["A"], answer="x" * (MAX_RECORD_BYTES + 10)))
    write_run(tmp_path / "runs", "run-a", lines=[good, huge])
    with pytest.raises(RejectedRecords, match=rf"cases.jsonl:2: record longer than {MAX_RECORD_BYTES} bytes"):
        evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh", allow_rejects=True))
    with reader(tmp_path / "wh") as con:
        assert con.execute("select case_id from cases").fetchall() == [("good",)]
        [(line, raw_length)] = con.execute("select line, length(raw) from rejects").fetchall()
    assert line == 2 and raw_length == 1024  # the start of the line is kept, the rest is counted


def test_unwritable_warehouse_is_a_clear_message_and_nothing_is_written(tmp_path):
    write_run(tmp_path / "runs", "run-a", lines=synthetic_cases(10))
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    result = subprocess.run(cli_command("run", str(tmp_path / "runs"), "--warehouse", str(blocker / "wh")),
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    assert "cannot write the warehouse" in result.stderr and "Traceback" not in result.stderr


def test_a_long_record_past_the_readers_block_but_under_the_limit_loads(tmp_path):
    # About 40 MiB: the first read refuses it (it straddles 1 MiB blocks), the line-by-line
    # pass accepts it (64 MiB limit) and the clean copy loads, read in longer blocks.
    good = json.dumps(case("good", [chunk("A::00", "A")], ["A"]))
    long = json.dumps(case("long", [chunk("A::00", "A")], ["A"], answer="x" * (40 * 1024 * 1024)))
    write_run(tmp_path / "runs", "run-a", lines=[good, long])
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    with reader(tmp_path / "wh") as con:
        assert sorted(con.execute("select case_id from cases").fetchall()) == [("good",), ("long",)]


def committed_files(warehouse: Path, run_id: str) -> dict[str, list[str]]:
    run = Warehouse(warehouse).state().runs[run_id]
    return {table: [part.path for part in parts] for table, parts in run.tables.items()}


def test_an_unchanged_run_is_not_read_again(tmp_path, monkeypatch):
    import retrieval_eval.flows.sources.case_file as case_file

    run_dir = write_run(tmp_path / "runs", "run-a", lines=synthetic_cases(40))
    options = job_options(tmp_path / "runs", tmp_path / "wh")
    evaluate(options)
    first_parts = committed_files(tmp_path / "wh", "run-a")
    with reader(tmp_path / "wh") as con:
        first = con.table("case_metrics").pl().sort("case_id", "k")

    def must_not_read(*args, **kwargs):
        raise AssertionError("the unchanged run was read again")

    with monkeypatch.context() as patched:  # same stamp: not even opened
        patched.setattr(case_file.CaseFileRead, "__init__", must_not_read)
        evaluate(options)
    assert committed_files(tmp_path / "wh", "run-a") == first_parts  # the same files, kept

    # Touched, same bytes: found again by its digest; nothing of the read is committed, and the
    # new stamp is, so that the next run does not read it again.
    os.utime(run_dir / "cases.jsonl")
    evaluate(options)
    assert committed_files(tmp_path / "wh", "run-a") == first_parts
    with reader(tmp_path / "wh") as con:
        assert con.table("case_metrics").pl().sort("case_id", "k").equals(first)
    with monkeypatch.context() as patched:
        patched.setattr(case_file.CaseFileRead, "__init__", must_not_read)
        evaluate(options)

    # Other cutoffs: evaluated again, from the same bytes.
    evaluate(replace(options, ks=(1, 3)))
    assert committed_files(tmp_path / "wh", "run-a")["case_metrics"] != first_parts["case_metrics"]

    write_run(tmp_path / "runs", "run-a", lines=synthetic_cases(30))  # new bytes: read again
    evaluate(options)
    with reader(tmp_path / "wh") as con:
        assert con.execute("select n_cases from runs").fetchall() == [(30,)]
    assert leftovers(tmp_path / "wh") == set()
    Warehouse(tmp_path / "wh").vacuum(timedelta(0))  # superseded parts go past the retention
    referenced = {str(tmp_path / "wh" / p) for paths in committed_files(tmp_path / "wh", "run-a").values() for p in paths}
    assert {str(p) for p in (tmp_path / "wh").glob("*/run_id=*/*.parquet")} == referenced


def test_a_run_read_in_many_batches_equals_one_batch_and_repeats_across_batches_are_found(tmp_path):
    lines = synthetic_cases(60)
    write_run(tmp_path / "runs", "run-a", lines=lines)
    whole = job_options(tmp_path / "runs", tmp_path / "one")
    evaluate(whole)
    batched = replace(whole, warehouse=tmp_path / "many", batch_items=50)  # 8 items a case: 8 cases a batch
    evaluate(batched)
    assert len(committed_files(tmp_path / "many", "run-a")["retrieved"]) >= 8
    tables = ("cases", "retrieved", "case_metrics", "aggregates")
    with reader(whole.warehouse) as one, reader(batched.warehouse) as many:
        for table in tables:
            a, b = one.table(table).pl(), many.table(table).pl()
            assert a.sort(a.columns).equals(b.sort(b.columns)), table

    # The first and the last case share an id: they land in different batches.
    write_run(tmp_path / "runs", "run-a", lines=[*lines, lines[0]])
    with pytest.raises(RejectedRecords) as refused:
        evaluate(batched)
    assert [r.reason for r in refused.value.rejects] == ["case_id 'c0' repeats line 1"]


@pytest.fixture
def tiny_disk(tmp_path):
    """A 200 KiB tmpfs: a full disk for real (needs root, as on CI; skipped elsewhere)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount_point)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_full_disk_is_a_clear_message_and_leaves_nothing_half_written(tiny_disk, tmp_path):
    from builders import SAMPLE_RUNS

    result = subprocess.run(
        cli_command("run", str(SAMPLE_RUNS), "--warehouse", str(tiny_disk / "wh"), "--report-dir", str(tmp_path / "rep")),
        capture_output=True, text=True,
    )
    assert result.returncode == 2
    assert "No space left on device" in result.stderr and "Traceback" not in result.stderr
    assert list((tiny_disk / "wh").glob("*/run_id=*/*.parquet")) == []  # no part was left behind


def test_a_run_restored_after_a_refusal_is_evaluated_again_with_its_own_rejects(tmp_path):
    lines = synthetic_cases(10)
    write_run(tmp_path / "runs", "run-a", lines=lines)
    options = job_options(tmp_path / "runs", tmp_path / "wh")
    evaluate(options)
    write_run(tmp_path / "runs", "run-a", lines=[*lines, '{"case_id": "bad", "locale": 5, "category": "g"}'])
    with pytest.raises(RejectedRecords):
        evaluate(options)  # refused: the rejects are recorded beside the earlier evaluation
    with reader(options.warehouse) as con:
        assert con.execute("select line from rejects").fetchall() == [(11,)]
    write_run(tmp_path / "runs", "run-a", lines=lines)  # the very bytes evaluated first
    evaluate(options)
    with reader(options.warehouse) as con:
        assert con.execute("select count(*) from rejects").fetchall() == [(0,)]
        assert con.execute("select n_cases, n_rejected from runs").fetchall() == [(10, 0)]


def test_an_engine_error_while_evaluating_is_raised_not_taken_for_bad_records(tmp_path, monkeypatch):
    import retrieval_eval.flows.job.run_steps as evaluation
    import retrieval_eval.flows.sources.ingest as ingest

    write_run(tmp_path / "runs", "run-a", lines=synthetic_cases(10))

    def out_of_memory(*args, **kwargs):
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate")

    def must_not_run(*args, **kwargs):
        raise AssertionError("valid records were sent to the line-by-line pass")

    monkeypatch.setattr(evaluation, "scored_cases", out_of_memory)
    monkeypatch.setattr(ingest, "split_records", must_not_run)
    with pytest.raises(duckdb.OutOfMemoryException):
        evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    assert not (tmp_path / "wh" / "runs").exists() or not list((tmp_path / "wh").glob("*/run_id=*/*.parquet"))


def test_a_copy_with_the_same_size_and_mtime_but_other_bytes_is_read_again(tmp_path):
    run_dir = write_run(tmp_path / "runs", "run-a", [case("c1", [chunk("A::00", "A")], ["A"])])
    options = job_options(tmp_path / "runs", tmp_path / "wh")
    evaluate(options)
    cases_file = run_dir / "cases.jsonl"
    before = cases_file.stat()
    # The same size and mtime, other bytes, as `cp -p` or rsync leave them: a new inode.
    replacement = tmp_path / "replacement.jsonl"
    replacement.write_text(cases_file.read_text().replace('["A"]', '["B"]'))
    assert replacement.stat().st_size == before.st_size
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    replacement.replace(cases_file)
    evaluate(options)
    with reader(options.warehouse) as con:
        assert con.execute("select hit_at_k from case_metrics").fetchall() == [(0.0,)]
