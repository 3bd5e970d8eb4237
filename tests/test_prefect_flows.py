"""The Prefect flow runs the same steps as the in-process job: same warehouse, plus artifacts.

One temporary Prefect server for the whole session (prefect_test_harness, ~10 s to enter);
each test works on a private copy of two of the committed sample runs.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import duckdb
import polars as pl
import pytest
from builders import SAMPLE_RUNS, evaluate, job_options
from polars.testing import assert_frame_equal
from retrieval_eval.flows import prefect_flows

RUN_IDS = sorted(p.name for p in SAMPLE_RUNS.iterdir() if (p / "manifest.json").is_file())[:2]
ARTIFACT_KEYS = [prefect_flows.REPORT_ARTIFACT, prefect_flows.HEADLINE_ARTIFACT, prefect_flows.FOLDER_ARTIFACT]


@pytest.fixture(scope="session")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


def sample_options(root: Path, run_ids: list[str] = RUN_IDS, name: str = "warehouse") -> EvaluationOptions:
    runs = root / "runs"
    for run_id in run_ids:
        if not (runs / run_id).exists():
            shutil.copytree(SAMPLE_RUNS / run_id, runs / run_id)
    return job_options(runs, root / name, report_dir=root / f"report-{name}")


def view(warehouse: Path, name: str) -> pl.DataFrame:
    with duckdb.connect(str(warehouse / "catalog.duckdb"), read_only=True) as con:
        frame = con.table(name).pl()
    return frame.sort(frame.columns)


def aggregates(warehouse: Path) -> pl.DataFrame:
    return view(warehouse, "aggregates")


@pytest.fixture(scope="module")
def tracked_thread_run(prefect_server, tmp_path_factory):
    """One tracked flow run on the thread runner: (options, final state)."""
    options = sample_options(tmp_path_factory.mktemp("tracked"))
    state = prefect_flows.run_tracked(options, task_runner="thread", return_state=True)
    return options, state


def test_tracked_flow_completes_with_report_artifacts(tracked_thread_run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
    )

    options, state = tracked_thread_run
    assert state.is_completed(), state
    outcome = state.result()
    assert outcome.run_ids == RUN_IDS
    assert outcome.gate_passed is None
    assert Path(outcome.report_path).is_file()

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=ARTIFACT_KEYS),
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]),
            )
        )
    by_key = {artifact.key: artifact for artifact in artifacts}
    assert sorted(by_key) == sorted(ARTIFACT_KEYS)
    assert by_key[prefect_flows.REPORT_ARTIFACT].type == "markdown"
    assert "# Retrieval evaluation report" in by_key[prefect_flows.REPORT_ARTIFACT].data
    assert "![" not in by_key[prefect_flows.REPORT_ARTIFACT].data  # no local images in the UI
    assert by_key[prefect_flows.HEADLINE_ARTIFACT].type == "table"
    assert all(run_id in by_key[prefect_flows.HEADLINE_ARTIFACT].data for run_id in RUN_IDS)
    assert by_key[prefect_flows.FOLDER_ARTIFACT].type == "markdown"  # link artifacts are stored as markdown
    assert options.report_dir.absolute().as_uri() in by_key[prefect_flows.FOLDER_ARTIFACT].data


def test_thread_and_dask_runners_load_what_the_in_process_job_loads(tracked_thread_run, tmp_path):
    options, _ = tracked_thread_run
    in_process = sample_options(tmp_path, name="in-process")
    evaluate(in_process)
    # On Dask, each run (about 1,520 retrieved items) is also split into 3 partitions of
    # at most 600 items.
    dask = replace(sample_options(tmp_path, name="dask"), batch_items=600)
    outcome = prefect_flows.run_tracked(dask, task_runner="dask", charts=False)
    assert outcome.run_ids == RUN_IDS
    with duckdb.connect(str(dask.warehouse / "catalog.duckdb"), read_only=True) as con:
        n_files = con.execute("select count(*) from _partitions where table_name = 'case_metrics'").fetchone()[0]
    assert n_files == 3 * len(RUN_IDS)

    expected = aggregates(in_process.warehouse)
    assert expected.height > 0
    assert_frame_equal(aggregates(options.warehouse), expected)
    # Partial sums added in another order: equal up to float rounding, n exactly.
    assert_frame_equal(aggregates(dask.warehouse), expected, check_exact=False, rel_tol=0, abs_tol=1e-12)
    assert_frame_equal(view(dask.warehouse, "case_metrics"), view(in_process.warehouse, "case_metrics"))


def test_dask_workers_get_one_engine_thread_each():
    kwargs = prefect_flows.dask_cluster_kwargs("http://127.0.0.1:4200/api")
    assert (kwargs["n_workers"], kwargs["threads_per_worker"], kwargs["processes"]) == (2, 1, True)
    assert kwargs["env"]["RETRIEVAL_EVAL_THREADS"] == "1"
    assert kwargs["env"]["POLARS_MAX_THREADS"] == "1"
    assert kwargs["env"]["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"


def test_a_transient_io_error_is_retried(prefect_server, tmp_path, monkeypatch):
    calls = []
    real = prefect_flows.stage_run

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("transient: stale file handle")
        return real(*args, **kwargs)

    monkeypatch.setattr(prefect_flows, "stage_run", flaky)
    options = sample_options(tmp_path, RUN_IDS[:1])
    state = prefect_flows.run_tracked(options, task_runner="thread", charts=False, return_state=True)
    assert state.is_completed(), state
    assert len(calls) == 2
    assert aggregates(options.warehouse).height > 0


def test_other_errors_are_not_retried(prefect_server, tmp_path, monkeypatch):
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise ValueError("not an I/O problem")

    monkeypatch.setattr(prefect_flows, "stage_run", broken)
    options = sample_options(tmp_path, RUN_IDS[:1])
    state = prefect_flows.run_tracked(options, task_runner="thread", charts=False, return_state=True)
    assert state.is_failed()
    assert len(calls) == 1
    assert not (options.warehouse / "catalog.duckdb").exists()  # nothing was committed


def test_serve_registers_the_nightly_cron_deployment(prefect_server, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    env = dict(os.environ, PREFECT_API_URL=PREFECT_API_URL.value())
    server = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "serve", "--cron", "30 3 * * *"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deployment, deadline = None, time.monotonic() + 90
        with get_client(sync_client=True) as client:
            while deployment is None and time.monotonic() < deadline and server.poll() is None:
                try:
                    deployment = client.read_deployment_by_name("retrieval-eval/nightly")
                except Exception:  # not registered yet
                    time.sleep(1)
        assert deployment is not None, "the deployment was not registered"
        assert [s.schedule.cron for s in deployment.schedules] == ["30 3 * * *"]
        assert deployment.parameters["runs"] == "data/runs"
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def test_an_existing_dask_cluster_is_used_by_address(prefect_server, tmp_path):
    from distributed import LocalCluster

    options = sample_options(tmp_path, RUN_IDS[:1])
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        outcome = prefect_flows.run_tracked(options, dask_address=cluster.scheduler_address, charts=False)
    assert outcome.run_ids == RUN_IDS[:1]
    assert aggregates(options.warehouse).height > 0


def test_an_unchanged_run_is_reused_by_the_tracked_flow(prefect_server, tmp_path, monkeypatch):
    from flows.warehouse import Warehouse

    options = sample_options(tmp_path, RUN_IDS[:1])
    prefect_flows.run_tracked(options, task_runner="thread", charts=False)
    before = Warehouse(options.warehouse).committed(RUN_IDS[0])[1]

    def must_not_run(*args, **kwargs):
        raise AssertionError("an unchanged run was staged or evaluated again")

    monkeypatch.setattr(prefect_flows, "evaluate_partition", must_not_run)
    monkeypatch.setattr("flows.pipeline.stage_partitions", must_not_run)
    state = prefect_flows.run_tracked(options, task_runner="thread", charts=False, return_state=True)
    assert state.is_completed(), state
    assert Warehouse(options.warehouse).committed(RUN_IDS[0])[1] == before  # the same files, kept
