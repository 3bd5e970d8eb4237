"""SPEC 14 "With --dask-address, workers need share no disk with the driver": a real Dask
scheduler and two workers as processes of their own, each worker in a mount namespace where
the driver's folders (pytest's whole temporary root) are an empty tmpfs, with a HOME and a
cache of its own, against the loopback S3 (tests/s3_server.py) and the session's Prefect API.

- Runs and warehouse in the bucket: the figures are those of the job in this process.
  A run's cases file is cut into byte ranges that the workers read from the store; a run
  whose ranges together are not one clean read (a case id repeated across ranges, a line
  that breaks a rule) is judged whole, and its rejects are those of the in-process job.
- Local paths with that cluster: exit 2 naming the path the workers do not see.
- A worker SIGKILLed mid-run: Dask computes its tasks again on the other worker; the run
  ends with the in-process figures, and no part of the lost attempts is left in the bucket.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest
from builders import SAMPLE_RUNS, cli, evaluate, reader, write_run
from polars.testing import assert_frame_equal
from prefect.settings import PREFECT_API_URL
from retrieval_eval.flows.job import prefect_flows
from retrieval_eval.flows.job.job import JobOptions
from retrieval_eval.flows.storage import open_store
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from s3_server import free_port
from test_inputs_on_object_storage import figures, upload
from test_reliability import synthetic_cases

WORKERS = 2
CLUSTER_READY_SECONDS = 90


def unshare_refused() -> str | None:
    """Why a process cannot get a mount namespace of its own here (None: it can)."""
    try:
        probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True)
    except FileNotFoundError:
        return "unshare(1) is not installed"
    return None if probe.returncode == 0 else f"unshare -m is not permitted here: {probe.stderr.strip()}"


pytestmark = pytest.mark.skipif(unshare_refused() is not None, reason=str(unshare_refused()))


@contextmanager
def cluster_without_the_drivers_disk(hidden: Path, api_url: str, logs: Path):
    """(scheduler address, worker processes): a scheduler and WORKERS workers without a nanny
    (a killed worker stays dead), each worker seeing an empty tmpfs at `hidden`."""
    from distributed import Client  # deferred: the optional dask extra, needed only once a cluster starts

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    logs.mkdir(parents=True, exist_ok=True)
    processes = [subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--no-dashboard"], env=base, stdout=subprocess.DEVNULL, stderr=open(logs / "scheduler.log", "wb"))]
    workers = []
    for number in range(WORKERS):
        env = {**base, **prefect_flows.dask_worker_env(api_url), "HOME": str(hidden / "home"),
               "XDG_CACHE_HOME": str(hidden / "worker-cache")}
        worker = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount -t tmpfs tmpfs "$1" && shift && exec "$@"',
             "sh", str(hidden), sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
             "--no-nanny", "--no-dashboard", "--name", f"no-shared-disk-{number}"],
            env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=open(logs / f"worker-{number}.log", "wb"))
        processes.append(worker)
        workers.append(worker)
    try:
        with Client(address, timeout=CLUSTER_READY_SECONDS) as client:
            client.wait_for_workers(WORKERS, timeout=CLUSTER_READY_SECONDS)
            hidden_there = client.run(os.path.exists, str(hidden / "runs"))
        assert not any(hidden_there.values()), hidden_there  # the driver's folders are not theirs
        yield address, workers
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def cluster(prefect_server, s3_bucket, tmp_path_factory, monkeypatch):
    """A cluster of workers that share no disk with this process, reporting to its Prefect API
    and reaching the test's bucket; this process's own cache is in the hidden folders too."""
    hidden = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("driver-cache")))
    with cluster_without_the_drivers_disk(hidden, prefect_server, tmp_path_factory.mktemp("cluster-logs")) as running:
        yield running


def bucket_runs(bucket: str, root: Path) -> str:
    """Three runs in the bucket, each cut into several byte ranges at 20,000 items a batch:
    `big` (12,000 clean cases); `dup`, whose first case comes again as its last line (every
    range is clean alone: only the check across ranges finds it); `bad`, whose middle line is
    not JSON."""
    runs = root / "runs"
    write_run(runs, "big", lines=synthetic_cases(12_000))
    write_run(runs, "dup", lines=[*(lines := synthetic_cases(6_000, salt="d")), lines[0]])
    write_run(runs, "bad", lines=[*(lines := synthetic_cases(6_000, salt="b"))[:3_000], "{not json", *lines[3_001:]])
    upload(runs, f"s3://{bucket}/runs")
    return f"s3://{bucket}/runs"


def job_options(runs: str, warehouse: str | Path, report_dir: Path, **options) -> JobOptions:
    """The job's options with URIs kept as given (tests/builders.py's take local paths)."""
    return JobOptions(runs=runs, warehouse=warehouse, report_dir=report_dir, **options)


def table(warehouse: str | Path, name: str) -> pl.DataFrame:
    with reader(warehouse) as con:
        frame = con.table(name).pl()
    return frame.sort(frame.columns)


def stray_parts(warehouse_uri: str) -> list[str]:
    """Parts of the warehouse's tables that no commit names, and transactions not ended."""
    warehouse = Warehouse(warehouse_uri)
    referenced = warehouse.state().referenced()
    return sorted([path for path, _ in warehouse.part_paths() if path not in referenced]
                  + [marker["txn"] for marker in warehouse.pending_markers()])


def test_runs_and_warehouse_in_the_bucket_give_the_in_process_figures(cluster, s3_bucket, tmp_path):
    address, _ = cluster
    runs = bucket_runs(s3_bucket, tmp_path)
    evaluate(job_options(runs, tmp_path / "in-process", tmp_path / "report-in-process", allow_rejects=True))
    warehouse = f"s3://{s3_bucket}/wh"
    options = job_options(runs, warehouse, tmp_path / "report", batch_items=20_000, charts=False, allow_rejects=True)
    result = prefect_flows.run_tracked(options, dask_address=address)
    assert sorted(result.run_ids) == ["bad", "big", "dup"]
    state = Warehouse(warehouse).state()
    assert len(state.runs["big"].tables["case_metrics"]) > 1  # several byte ranges, each its own parts
    for name in ("aggregates", "case_metrics", "rejects"):
        assert_frame_equal(table(warehouse, name), table(tmp_path / "in-process", name),
                           check_exact=False, rel_tol=0, abs_tol=1e-12)
    # By the lines written: `bad`'s line 3,001 is not JSON; `dup`'s line 6,001 repeats line 1.
    assert table(warehouse, "rejects").select("run_id", "line").rows() == [("bad", 3_001), ("dup", 6_001)]
    runs_rows = table(warehouse, "runs").select("run_id", "n_cases", "n_rejected")
    assert runs_rows.rows() == [("bad", 5_999, 1), ("big", 12_000, 0), ("dup", 6_000, 1)]
    assert stray_parts(warehouse) == []


def test_the_command_with_everything_in_the_bucket_gives_the_figures_of_the_command_in_process(cluster, s3_bucket,
                                                                                               tmp_path):
    address, _ = cluster
    upload(SAMPLE_RUNS, f"s3://{s3_bucket}/runs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    local = cli("run", f"s3://{s3_bucket}/runs", "--warehouse", str(tmp_path / "wh"), "--report-dir",
                str(tmp_path / "report-local"), "--json", env=env)
    assert local.returncode == 0, local.stderr
    remote = cli("run", f"s3://{s3_bucket}/runs", "--warehouse", f"s3://{s3_bucket}/wh", "--report-dir",
                 str(tmp_path / "report"), "--dask-address", address, "--json",
                 env={**env, "PREFECT_API_URL": PREFECT_API_URL.value()})
    assert remote.returncode == 0, remote.stderr
    assert "Traceback" not in remote.stderr
    assert figures(json.loads(remote.stdout)) == figures(json.loads(local.stdout))
    assert stray_parts(f"s3://{s3_bucket}/wh") == []


def test_local_paths_the_workers_do_not_see_are_exit_2_naming_the_path(cluster, tmp_path):
    address, _ = cluster
    runs = tmp_path / "runs"
    write_run(runs, "small", lines=synthetic_cases(10))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}, "PREFECT_API_URL": PREFECT_API_URL.value()}
    result = cli("run", str(runs), "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "report"),
                 "--dask-address", address, env=env)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("retrieval-eval: flow run ")]
    assert len(lines) == 1 and lines[0].startswith(f"retrieval-eval: {runs}: Dask worker "), result.stderr
    assert "(RUNS)" in lines[0]
    assert not (tmp_path / "wh").exists()  # refused before any task, and before the warehouse


def kill_a_worker_once_parts_are_put(warehouse_uri: str, worker: subprocess.Popen, killed: list[int]) -> None:
    """SIGKILL `worker` as soon as the first part of the run is in the bucket."""
    store, prefix = open_store(warehouse_uri)
    deadline = time.monotonic() + 120
    while not any(True for _ in store.list(f"{prefix}/case_metrics")):
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    killed.append(worker.pid)


def test_a_worker_killed_mid_run_leaves_the_in_process_result_and_no_stray_part(cluster, s3_bucket, tmp_path):
    address, workers = cluster
    runs = tmp_path / "runs"
    write_run(runs, "big", lines=synthetic_cases(12_000))
    upload(runs, f"s3://{s3_bucket}/runs")
    in_process = tmp_path / "in-process"
    evaluate(job_options(f"s3://{s3_bucket}/runs", in_process, tmp_path / "report-in-process"))
    warehouse = f"s3://{s3_bucket}/wh"
    options = job_options(f"s3://{s3_bucket}/runs", warehouse, tmp_path / "report", batch_items=5_000, charts=False)
    killed: list[int] = []
    killer = threading.Thread(target=kill_a_worker_once_parts_are_put, args=(warehouse, workers[0], killed))
    killer.start()
    result = prefect_flows.run_tracked(options, dask_address=address)
    killer.join()
    # The run ends correctly: the lost worker's tasks were computed again on the other one.
    assert killed and workers[0].wait(timeout=10) == -signal.SIGKILL
    assert result.run_ids == ["big"]
    for name in ("aggregates", "case_metrics"):
        assert_frame_equal(table(warehouse, name), table(in_process, name), check_exact=False, rel_tol=0, abs_tol=1e-12)
    assert stray_parts(warehouse) == []  # the killed attempts' parts went with the transaction
