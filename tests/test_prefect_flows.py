"""The Prefect flow runs the one job (flows/job/job.py) with its steps as tasks: the same warehouse
as in-process, plus artifacts; a failed gate is a Failed flow run; Dask workers lost or quiet;
a dead, a lost and a serving API; a killed flow process seen as Crashed through the API.

One temporary Prefect server for the whole session (prefect_test_harness, ~10 s to enter);
each test works on a private copy of two of the committed sample runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import polars as pl
import pytest
from builders import (
    SAMPLE_BASELINE,
    SAMPLE_RUNS,
    evaluate,
    job_options,
    reader,
    write_run,
)
from polars.testing import assert_frame_equal
from retrieval_eval.flows.job import prefect_flows
from retrieval_eval.flows.outputs.warehouse_gate import GateOptions
from retrieval_eval.flows.sources.artifacts import RunFolder
from retrieval_eval.flows.job.prefect_settings import GateFailed, free_port
from retrieval_eval.flows.warehouse.warehouse import SCRATCH, Warehouse
from retrieval_eval.transforms.errors import InputError
from test_reliability import synthetic_cases

RUN_IDS = sorted(p.name for p in SAMPLE_RUNS.iterdir() if (p / "manifest.json").is_file())[-2:]
ARTIFACT_KEYS = [prefect_flows.REPORT_ARTIFACT, prefect_flows.HEADLINE_ARTIFACT, prefect_flows.FOLDER_ARTIFACT]


def sample_options(root: Path, run_ids: list[str] = RUN_IDS, name: str = "warehouse", **options):
    runs = root / "runs"
    for run_id in run_ids:
        if not (runs / run_id).exists():
            shutil.copytree(SAMPLE_RUNS / run_id, runs / run_id)
    return job_options(runs, root / name, report_dir=root / f"report-{name}", **options)


def view(warehouse: Path, name: str) -> pl.DataFrame:
    with reader(warehouse) as con:
        frame = con.table(name).pl()
    return frame.sort(frame.columns)


def artifacts_of(flow_run_id) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return {artifact.key: artifact for artifact in found if artifact.key}


def command(*args: str, api_url: str | None, env_more: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # as a user's shell has it
    if api_url:
        env["PREFECT_API_URL"] = api_url
    env.update(env_more or {})
    return subprocess.Popen([sys.executable, "-m", "retrieval_eval", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def ours_but_the_flow_runs_name(stderr: str) -> list[str]:
    """The lines of stderr but the tracked run's name, which it says once the run exists."""
    return [line for line in stderr.splitlines() if not line.startswith("retrieval-eval: flow run ")]


@pytest.fixture(scope="module")
def tracked_thread_run(prefect_server, tmp_path_factory):
    """One tracked flow run on the thread runner, gated: (options, final state)."""
    options = sample_options(tmp_path_factory.mktemp("tracked"))
    options = replace(options, gate=GateOptions(SAMPLE_BASELINE, options.warehouse))
    state = prefect_flows.run_tracked(options, task_runner="thread", return_state=True)
    return options, state


def test_a_failed_gate_fails_the_flow_run_after_its_artifacts(tracked_thread_run):
    from prefect.client.orchestration import get_client

    options, state = tracked_thread_run
    assert state.is_failed(), state
    assert state.message.startswith("gate failed: hit_at_k on locale=pt-BR")
    failed = state.result(raise_on_failure=False)
    assert isinstance(failed, GateFailed) and str(failed) == state.message
    result = failed.result
    assert result.run_ids == RUN_IDS and result.gate is not None and not result.gate.passed
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(state.state_details.flow_run_id)
    assert flow_run.state.type.value == "FAILED"  # as the API says it, so automations can alert
    by_key = artifacts_of(state.state_details.flow_run_id)
    assert set(ARTIFACT_KEYS) | {prefect_flows.GATE_ARTIFACT, prefect_flows.GATE_ARTIFACT + "-summary"} <= set(by_key)
    assert by_key[prefect_flows.REPORT_ARTIFACT].type == "markdown"
    assert "## What changed" in by_key[prefect_flows.REPORT_ARTIFACT].data
    assert "![" not in by_key[prefect_flows.REPORT_ARTIFACT].data  # no local images in the UI
    assert by_key[prefect_flows.HEADLINE_ARTIFACT].type == "table"
    assert all(run_id in by_key[prefect_flows.HEADLINE_ARTIFACT].data for run_id in RUN_IDS)
    assert options.report_dir.absolute().as_uri() in by_key[prefect_flows.FOLDER_ARTIFACT].data
    assert "FAIL" in by_key[prefect_flows.GATE_ARTIFACT].description
    assert "below_k" in by_key[prefect_flows.GATE_ARTIFACT + "-summary"].data


def test_thread_and_dask_runners_load_what_the_in_process_job_loads(tracked_thread_run, tmp_path):
    options, _ = tracked_thread_run
    in_process = sample_options(tmp_path, name="in-process")
    evaluate(in_process)
    # On Dask, each run (about 1,520 retrieved items) is also split into 3 partitions of at
    # most 600 items.
    dask = sample_options(tmp_path, name="dask", batch_items=600, charts=False)
    environment = dict(os.environ)
    result = prefect_flows.run_tracked(dask, task_runner="dask")
    assert result.run_ids == RUN_IDS
    # distributed's nanny writes the workers' environment (the run's API among it) into this
    # process's; the run takes it back, so what runs next here does not report to that API.
    assert dict(os.environ) == environment
    assert all(len(run.tables["case_metrics"]) == 3 for run in Warehouse(dask.warehouse).state().runs.values())
    expected = view(in_process.warehouse, "aggregates")
    assert expected.height > 0
    assert_frame_equal(view(options.warehouse, "aggregates"), expected)
    # Partial sums of other partitions, added in another order: fixed-point, so the same bits.
    assert_frame_equal(view(dask.warehouse, "aggregates"), expected, check_exact=True)
    assert_frame_equal(view(dask.warehouse, "case_metrics"), view(in_process.warehouse, "case_metrics"))


def test_dask_workers_get_one_engine_thread_each_and_the_drivers_api(monkeypatch):
    # The command sets the driver's distributed logging to "error" (prefect_environment): the
    # workers stay at "critical", where a heartbeat the closing scheduler missed is not printed,
    # unless the user chose a level.
    monkeypatch.setenv("DASK_LOGGING__DISTRIBUTED", "error")
    assert prefect_flows.dask_worker_env(None)["DASK_LOGGING__DISTRIBUTED"] == "critical"
    monkeypatch.setenv("DASK_LOGGING__DISTRIBUTED", "debug")
    assert prefect_flows.dask_worker_env(None)["DASK_LOGGING__DISTRIBUTED"] == "debug"
    kwargs = prefect_flows.dask_cluster_kwargs("http://127.0.0.1:4200/api")
    assert (kwargs["n_workers"], kwargs["threads_per_worker"], kwargs["processes"]) == (2, 1, True)
    assert kwargs["env"]["RETRIEVAL_EVAL_THREADS"] == "1" and kwargs["env"]["POLARS_MAX_THREADS"] == "1"
    assert kwargs["env"]["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"
    assert kwargs["env"]["DO_NOT_TRACK"] == "1"


@pytest.mark.parametrize("server", ["given", "temporary"])
def test_a_successful_dask_run_prints_no_traceback(prefect_server, tmp_path, server):
    # "temporary": no PREFECT_API_URL, so the command starts a server for its workers and stops
    # it when the run ends (left to Prefect's exit hook, that printed an INFO line).
    options = sample_options(tmp_path)
    process = command("run", str(options.runs), "--warehouse", str(options.warehouse), "--report-dir",
                      str(options.report_dir), "--task-runner", "dask",
                      api_url=prefect_server if server == "given" else None)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "INFO" not in stderr, stderr
    assert "What changed" in stdout


def test_a_trec_run_and_another_tools_export_are_tracked_runs_like_run_folders(prefect_server, tmp_path):
    # With PREFECT_API_URL set, `run` is a tracked flow run whatever its source: --trec-run (the
    # flow's parameters carry it as --source trec) and --source beir give the figures of the
    # same command in this process. Ranks by trec_eval's rule (score descending): q1 ranks a
    # (2.0) then b (1.0), gold b: RR@10 = 1/2; q2 ranks c, gold c: RR@10 = 1.
    run = tmp_path / "r.run"
    run.write_text("q1 Q0 a 1 2.0 t\nq1 Q0 b 2 1.0 t\nq2 Q0 c 1 1.0 t\n")
    qrels = tmp_path / "q.qrels"
    qrels.write_text("q1 0 b 1\nq2 0 c 1\n")
    beir = Path(__file__).parent / "fixtures" / "sources" / "beir"
    sources = {"trec": ("--trec-run", str(run), "--qrels", str(qrels)),
               "beir": ("--source", "beir", str(beir / "results.json"), "--qrels", str(beir / "qrels.tsv"),
                        "--allow-rejects")}
    for name, args in sources.items():
        figures = {}
        for mode, api_url in (("tracked", prefect_server), ("in-process", None)):
            warehouse = tmp_path / f"{name}-{mode}"
            process = command("run", *args, "--warehouse", str(warehouse), "--report-dir", str(tmp_path / f"rep-{name}-{mode}"),
                              "--quiet", api_url=api_url)
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr
            assert ("flow run" in stderr) == (mode == "tracked"), stderr
            figures[mode] = view(warehouse, "case_metrics").drop("run_id")
        assert_frame_equal(figures["tracked"], figures["in-process"])
        if name == "trec":
            rr = dict(figures["tracked"].filter(pl.col("k") == 10).select("case_id", "reciprocal_rank_at_k").iter_rows())
            assert rr == {"q1": 0.5, "q2": 1.0}


def test_bad_input_met_on_a_dask_worker_is_the_commands_one_line(prefect_server, tmp_path):
    options = sample_options(tmp_path, run_ids=RUN_IDS[-1:])
    cases_file = options.runs / RUN_IDS[-1] / "cases.jsonl"
    cases_file.write_text("\n\n")  # blank lines only: staging, on a worker, finds no record
    process = command("run", str(options.runs), "--warehouse", str(options.warehouse), "--report-dir",
                      str(options.report_dir), "--task-runner", "dask", api_url=prefect_server)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 2
    assert ours_but_the_flow_runs_name(stderr) == [f"retrieval-eval: {cases_file}: holds no records"], stderr


def kill_a_worker_once_partitions_are_staged(warehouse: Path, killed: list[int]) -> None:
    """Wait for the run's staged partitions, then SIGKILL one Dask worker process (the nannies
    live in this process; their workers are its children, started by multiprocessing's spawn)."""
    import psutil

    deadline = time.monotonic() + 120
    while not list(warehouse.glob(".scratch/*/*/staged-*.parquet")):
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    time.sleep(0.3)
    for child in psutil.Process().children():
        if "spawn_main" in " ".join(child.cmdline()):
            child.kill()
            killed.append(child.pid)
            return


def test_a_dask_worker_killed_mid_run_leaves_the_right_result(prefect_server, tmp_path):
    # One worker process is killed while partitions are evaluated: Dask runs its task again on
    # another; that task's first files are never committed (fresh names), the result is whole.
    import threading

    runs = tmp_path / "runs"
    write_run(runs, "big", lines=synthetic_cases(12_000))
    in_process = job_options(runs, tmp_path / "in-process")
    evaluate(in_process)
    options = job_options(runs, tmp_path / "dask", batch_items=4_000, charts=False)
    killed: list[int] = []
    killer = threading.Thread(target=kill_a_worker_once_partitions_are_staged, args=(options.warehouse, killed))
    killer.start()
    result = prefect_flows.run_tracked(options, task_runner="dask")
    killer.join()
    assert killed and result.run_ids == ["big"]
    assert_frame_equal(view(options.warehouse, "case_metrics"), view(in_process.warehouse, "case_metrics"))
    assert_frame_equal(view(options.warehouse, "aggregates"), view(in_process.warehouse, "aggregates"),
                       check_exact=False, rel_tol=0, abs_tol=1e-12)
    committed = Warehouse(options.warehouse).state().referenced()
    stray = [p for p in options.warehouse.glob("*/run_id=*/*.parquet") if str(p.relative_to(options.warehouse)) not in committed]
    assert stray == []  # the killed attempt's parts were removed with the transaction


def test_a_transient_io_error_is_retried(prefect_server, tmp_path, monkeypatch):
    calls = []
    real = prefect_flows.finish_run

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("transient: stale file handle")
        return real(*args, **kwargs)

    monkeypatch.setattr(prefect_flows, "finish_run", flaky)
    options = sample_options(tmp_path, RUN_IDS[:1], charts=False)
    state = prefect_flows.run_tracked(options, task_runner="thread", return_state=True)
    assert state.is_completed(), state
    assert len(calls) == 2
    assert view(options.warehouse, "aggregates").height > 0


def test_other_errors_are_not_retried_and_nothing_is_committed(prefect_server, tmp_path, monkeypatch):
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise ValueError("not an I/O problem")

    monkeypatch.setattr(prefect_flows, "finish_run", broken)
    options = sample_options(tmp_path, RUN_IDS[:1], charts=False)
    state = prefect_flows.run_tracked(options, task_runner="thread", return_state=True)
    assert state.is_failed()
    assert len(calls) == 1
    assert not Warehouse(options.warehouse).state().runs  # nothing was committed
    assert list(options.warehouse.glob("*/run_id=*/*.parquet")) == []


def test_an_existing_dask_cluster_is_used_by_address(prefect_server, tmp_path, monkeypatch):
    from distributed import LocalCluster

    monkeypatch.setenv("PREFECT_API_URL", prefect_server)  # the workers' environment (they share this process)
    options = sample_options(tmp_path, RUN_IDS[:1], charts=False)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        result = prefect_flows.run_tracked(options, dask_address=cluster.scheduler_address)
    assert result.run_ids == RUN_IDS[:1]
    assert view(options.warehouse, "aggregates").height > 0


def test_workers_that_report_elsewhere_are_refused_before_any_work(prefect_server, tmp_path, monkeypatch):
    from distributed import LocalCluster
    from retrieval_eval.transforms.errors import InputError

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    options = sample_options(tmp_path, RUN_IDS[:1], charts=False)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        with pytest.raises(InputError, match="reports to no Prefect API"):
            prefect_flows.run_tracked(options, dask_address=cluster.scheduler_address)
    assert not options.warehouse.exists()


def test_an_unchanged_run_is_reused_by_the_tracked_flow(prefect_server, tmp_path, monkeypatch):
    options = sample_options(tmp_path, RUN_IDS[:1], charts=False)
    prefect_flows.run_tracked(options, task_runner="thread")
    before = Warehouse(options.warehouse).state().version

    def must_not_run(*args, **kwargs):
        raise AssertionError("an unchanged run was staged or evaluated again")

    monkeypatch.setattr(prefect_flows, "score_batch", must_not_run)
    monkeypatch.setattr(RunFolder, "ingest", must_not_run)
    state = prefect_flows.run_tracked(options, task_runner="thread", return_state=True)
    assert state.is_completed(), state
    assert Warehouse(options.warehouse).state().version == before  # nothing was committed again


@pytest.fixture
def server_of_its_own(tmp_path_factory):
    """A Prefect server of this test's own, on a database of its own (the session's test
    harness does not run the automations' triggers), and this process's client pointed at it."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import (
        PREFECT_API_DATABASE_CONNECTION_URL,
        PREFECT_API_URL,
        temporary_settings,
    )

    database = tmp_path_factory.mktemp("prefect") / "prefect.db"
    with temporary_settings(updates={PREFECT_API_DATABASE_CONNECTION_URL: f"sqlite+aiosqlite:///{database}"}):
        server = SubprocessASGIServer(port=free_port())
        server.start(timeout=90)
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield server
    finally:
        server.stop()


def test_a_dead_api_at_start_is_one_line_and_exit_2_before_any_work(tmp_path):
    options = sample_options(tmp_path, RUN_IDS[:1])
    started = time.monotonic()
    process = command("run", str(options.runs), "--warehouse", str(options.warehouse), "--prefect",
                      api_url=f"http://127.0.0.1:{free_port()}/api")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert len(stderr.strip().splitlines()) == 1 and "does not answer" in stderr, stderr
    assert time.monotonic() - started < 20
    assert not options.warehouse.exists()


def test_a_bad_baseline_is_refused_before_prefect_is_asked_anything(tmp_path, monkeypatch):
    # The API named here does not answer: a job that reached for it first would say so.
    bad = tmp_path / "baseline.json"
    bad.write_text("{}")
    options = replace(sample_options(tmp_path, RUN_IDS[:1]), gate=GateOptions(bad, tmp_path / "wh"))
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{free_port()}/api")
    with pytest.raises(InputError, match="not a valid baseline snapshot"):
        prefect_flows.run_tracked(options)
    assert not options.warehouse.exists()


def test_an_api_lost_mid_run_ends_within_seconds_with_one_warning(server_of_its_own, tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "big", lines=synthetic_cases(80_000))
    server = server_of_its_own
    try:
        process = command("run", str(runs), "--warehouse", str(tmp_path / "wh"), "--report-dir",
                          str(tmp_path / "rep"), "--prefect", api_url=server.api_url)
        # The flow run is under way once its staging task has made the run's scratch folder.
        staging = tmp_path / "wh" / SCRATCH
        deadline = time.monotonic() + 60
        while not (staging.is_dir() and any(staging.glob("*/big"))) and process.poll() is None:
            assert time.monotonic() < deadline, "the flow run did not start"
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before the API could be lost"
        server.stop()
        lost = time.monotonic()
        _, stderr = process.communicate(timeout=180)
    finally:
        server.stop()
    assert time.monotonic() - lost < 40, "ended long after the API was lost"
    assert process.returncode in (1, 2), stderr
    assert "Traceback" not in stderr, stderr
    warnings = [line for line in ours_but_the_flow_runs_name(stderr) if line.strip()]
    assert len(warnings) == 1 and "lost the Prefect API" in warnings[0], stderr


def test_serve_registers_the_nightly_deployment_and_a_killed_flow_run_is_crashed(server_of_its_own, tmp_path):
    api_url = server_of_its_own.api_url
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    runs = tmp_path / "runs"
    big = synthetic_cases(60_000)
    for n in range(4):  # long enough to be killed while it runs (about a second a run)
        write_run(runs, f"big-{n}", lines=big)
    server = command("serve", str(runs), "--cron", "30 3 * * *", "--warehouse", str(tmp_path / "wh"),
                     "--report-dir", str(tmp_path / "rep"), "--crash-after", "30", api_url=api_url,
                     start_new_session=True)
    try:
        deployment, deadline = None, time.monotonic() + 120
        with get_client(sync_client=True) as client:
            while deployment is None and time.monotonic() < deadline and server.poll() is None:
                try:
                    deployment = client.read_deployment_by_name("retrieval-eval/nightly")
                except Exception:  # not registered yet
                    time.sleep(1)
            assert deployment is not None, "the deployment was not registered"
            assert [s.schedule.cron for s in deployment.schedules] == ["30 3 * * *"]
            assert deployment.parameters["runs"] == str(runs)
            while not client.read_automations_by_name("retrieval-eval-crash-silent-flow-runs"):
                assert time.monotonic() < deadline and server.poll() is None, "no crash automation"
                time.sleep(0.5)

            flow_run = run_deployment("retrieval-eval/nightly", timeout=0)
            # The automation counts from a heartbeat: the run is killed once the server holds its
            # first (sent as it starts; a fixed second after Running was too short for a loaded
            # server, and a shorter run could end before it).
            heartbeats = {"filter": {"event": {"name": ["prefect.flow-run.heartbeat"]},
                                     "resource": {"id": [f"prefect.flow-run.{flow_run.id}"]}}, "limit": 1}
            while not httpx.post(f"{api_url}/events/filter", json=heartbeats, timeout=10).json()["events"]:
                assert time.monotonic() < deadline + 120, "the flow run sent no heartbeat"
                assert client.read_flow_run(flow_run.id).state.type.value in ("SCHEDULED", "PENDING", "RUNNING")
                time.sleep(0.2)
            os.killpg(server.pid, signal.SIGKILL)  # the serving process and the flow run's, at once
            server.wait()
            crashed_by = time.monotonic() + 150
            while (state := client.read_flow_run(flow_run.id).state).type.value == "RUNNING":
                assert time.monotonic() < crashed_by, "the killed flow run is still Running"
                time.sleep(2)
            assert state.type.value == "CRASHED", state
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def processes_with(text: str) -> list[int]:
    """This machine's processes whose environment holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def test_serve_without_an_api_gets_a_server_whose_scheduler_makes_the_cron_runs(tmp_path):
    # Prefect's temporary server runs no scheduler: a deployment served on it never fired. The
    # run it serves fails its gate (the pt-BR regression against the sample baseline): that is
    # logged as the gate's line, without a traceback (a Failed state's plain data had one),
    # for a user who asked for Prefect's errors.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.settings import PREFECT_API_URL, temporary_settings

    home = tmp_path / "prefect-home"  # the server's database: this test's own
    runs = tmp_path / "runs"
    shutil.copytree(SAMPLE_RUNS / RUN_IDS[-1], runs / RUN_IDS[-1])
    server = command("serve", str(runs), "--cron", "* * * * *", "--warehouse", str(tmp_path / "wh"),
                     "--report-dir", str(tmp_path / "rep"), "--baseline", str(SAMPLE_BASELINE), api_url=None, env_more={"PREFECT_HOME": str(home), "PREFECT_LOGGING_LEVEL": "ERROR"},
                     start_new_session=True)
    said: list[str] = []  # both streams, read as they come (the flow run's process writes to them)
    readers = [threading.Thread(target=lambda stream=stream: said.extend(stream), daemon=True)
               for stream in (server.stdout, server.stderr)]
    try:
        starting = server.stderr.readline()
        assert starting.startswith("retrieval-eval: starting a Prefect server for serving"), starting
        first = server.stderr.readline()  # said once its server answers
        assert "serving the nightly deployment (* * * * *) on the Prefect API at http://127.0.0.1:" in first, first
        api_url = first.split(" at ")[1].split(";")[0]
        for reader_thread in readers:
            reader_thread.start()
        ended, deadline = [], time.monotonic() + 240
        with temporary_settings(updates={PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
            while not ended:
                assert server.poll() is None and time.monotonic() < deadline, "no cron run ended"
                time.sleep(2)
                ended = client.read_flow_runs(flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                    type=FlowRunFilterStateType(any_=["COMPLETED", "FAILED", "CRASHED"]))))
        assert ended[0].deployment_id is not None and ended[0].auto_scheduled
        assert ended[0].state.type.value == "FAILED" and ended[0].state.message.startswith("gate failed: "), ended[0].state
        assert (tmp_path / "rep" / "report.md").is_file()
        # The run's process logs its end after the API has its state: wait for the line.
        logged_by = time.monotonic() + 90
        while not any("gate failed: hit_at_k on locale=pt-BR" in line for line in said):
            assert server.poll() is None and time.monotonic() < logged_by, "".join(said)
            time.sleep(0.5)
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        for reader_thread in readers:
            reader_thread.join(timeout=10)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    output = "".join(said)
    assert server.returncode == 143, output
    assert "retrieval-eval: terminated (SIGTERM); what was committed before stands" in output, output
    assert "Traceback" not in output, output
    assert processes_with(str(home)) == []  # its server stopped with it
