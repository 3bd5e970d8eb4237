"""Options mean the same in every mode (SPEC 16): every option of flows/inputs/options.py is an argument
of `run` and `serve`, a parameter of the Prefect flow, of the deployment `serve` makes and of the
committed prefect.yaml, and reaches the gate in-process, with `--prefect` and on Dask."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from builders import REPO, SAMPLE_BASELINE, SAMPLE_RUNS, cli
from retrieval_eval.flows.inputs import options as definition
from retrieval_eval.flows.commands.cli import build_parser
from retrieval_eval.flows.job.job import flow_parameters, job_options
from retrieval_eval.flows.inputs.options import BY_NAME, OPTIONS

# A value other than its default for every option (each within its bounds).
CHANGED = {
    "runs": "elsewhere/runs", "source": "beir", "qrels": "elsewhere/qrels.tsv", "run_id": "mine", "kb": "elsewhere/cards.jsonl", "warehouse": "elsewhere/wh", "report_dir": "elsewhere/rep",
    "k": 3, "ks": [1, 3], "relevance_level": 2, "allow_rejects": True, "baseline": "elsewhere/baseline.json",
    "tolerance": 0.01, "locale_tolerance": 0.02, "min_hit": 0.5, "min_recall": 0.4, "allow_missing_cases": True,
    "decision": "significant", "alpha": 0.01, "charts": False, "batch_items": 500,
}
# The two sample runs the gate reads: the newest is the pt-BR regression of the sample baseline.
RUN_IDS = sorted(p.name for p in SAMPLE_RUNS.iterdir() if (p / "manifest.json").is_file())[-2:]


def test_every_option_has_a_changed_value_here():
    assert set(CHANGED) == set(BY_NAME)


def test_flow_parameters_give_back_every_option():
    assert flow_parameters(job_options(CHANGED)) == CHANGED
    gated = {"baseline": "b.json"}  # the gate's options count when there is a gate
    defaults = job_options(gated)
    for name, value in CHANGED.items():  # each option alone changes the job's options: none is dropped
        assert job_options({**gated, name: value}) != defaults, name


def test_the_flow_takes_every_option_as_a_typed_parameter_with_its_default():
    from retrieval_eval.flows.job.prefect_flows import job_flow

    schema = job_flow.parameters.properties
    assert list(schema) == [option.name for option in OPTIONS]
    assert {name: schema[name].get("default") for name in schema} == {o.name: o.default for o in OPTIONS}
    assert schema["decision"]["enum"] == ["point", "significant", "non-inferior"]
    assert job_flow.validate_parameters(CHANGED) == CHANGED


def test_prefect_yaml_holds_every_option_at_the_definitions_value():
    deployment = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"][0]
    assert list(deployment["parameters"].items()) == list(definition.deployment_parameters().items())
    assert deployment["parameters"]["baseline"] == "data/baselines/baseline.json"  # the nightly gates


def test_serve_deploys_every_option():
    from retrieval_eval.flows.job.prefect_flows import nightly_deployment

    absolute = {**CHANGED, **{name: str(Path(CHANGED[name]).absolute())
                              for name in ("runs", "kb", "warehouse", "report_dir", "baseline")}}
    deployment = nightly_deployment("0 2 * * *", job_options(CHANGED))
    assert deployment.parameters == absolute


@pytest.mark.parametrize("command", ["run", "serve"])
def test_run_and_serve_take_every_cli_option(command):
    parser = build_parser()
    args = parser.parse_args([command, "r", "--source", "beir", "--qrels", "elsewhere/qrels.tsv", "--run-id", "mine",
                              "--kb", "k.jsonl", "--warehouse", "w", "--report-dir", "d", "--k", "3",
                              "--ks", "1,3", "--relevance-level", "2", "--allow-rejects", "--baseline", "b.json",
                              "--tolerance", "0.01", "--locale-tolerance", "0.02", "--min-hit", "0.5",
                              "--min-recall", "0.4", "--allow-missing-cases", "--decision", "significant",
                              "--alpha", "0.01"])
    given = flow_parameters(job_options(definition.values_of(args)))
    assert given == {**CHANGED, "runs": "r", "kb": "k.jsonl", "warehouse": "w", "report_dir": "d",
                     "baseline": "b.json", "charts": True, "batch_items": None}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    for run_id in RUN_IDS:
        shutil.copytree(SAMPLE_RUNS / run_id, runs / run_id)
    return runs


def gated_json(result) -> dict:
    assert result.returncode == 1, result.stderr  # the sample's pt-BR regression fails the gate
    return json.loads(result.stdout)["gate"]


GATE_OPTIONS = ("--baseline", str(SAMPLE_BASELINE), "--decision", "significant", "--alpha", "0.01",
                "--tolerance", "0.04", "--min-hit", "0.99", "--json")


def prefect_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    return env


def assert_gate_as_asked(gate: dict) -> None:
    assert gate["decision"] == "significant" and gate["alpha"] == 0.01
    assert {line["tolerance"] for line in gate["lines"] if line["slice"] == "all"} == {0.04}
    assert any(failure.startswith("hit_at_k on all: ") and failure.endswith("below the floor 0.99")
               for failure in gate["failures"]), gate["failures"]


def test_the_gate_options_reach_the_gate_in_process(two_runs, tmp_path):
    result = cli("run", str(two_runs), "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"),
                 *GATE_OPTIONS)
    assert_gate_as_asked(gated_json(result))


def test_the_gate_options_reach_the_gate_of_a_tracked_run_and_it_is_named(two_runs, tmp_path):
    result = cli("run", str(two_runs), "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"),
                 "--prefect", *GATE_OPTIONS, env=prefect_env(tmp_path))
    assert_gate_as_asked(gated_json(result))
    lines = result.stderr.splitlines()
    assert lines[0] == "retrieval-eval: starting a temporary Prefect server for this run (10-30 s)", result.stderr
    assert lines[1].startswith("retrieval-eval: flow run ") and lines[1].endswith(")"), result.stderr
    flow_run_id = lines[1].rsplit("(", 1)[1].rstrip(")")
    home = tmp_path / "prefect-home"
    assert lines[2] == (f"retrieval-eval: flow run {flow_run_id} is tracked in PREFECT_HOME={home}: `PREFECT_HOME={home} "
                        f"prefect flow-run inspect {flow_run_id}` shows it, `prefect flow-run ls` lists every run, "
                        "`prefect server start` serves them in a UI"), result.stderr
    assert len(lines) == 3, result.stderr


def test_the_gate_options_reach_the_gate_on_dask(two_runs, tmp_path):
    result = cli("run", str(two_runs), "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"),
                 "--task-runner", "dask", *GATE_OPTIONS, env=prefect_env(tmp_path))
    assert_gate_as_asked(gated_json(result))


def test_a_server_without_its_ui_gets_no_links_to_it(tmp_path):
    # Prefect prints "View at <UI>/runs/flow-run/<id>" for each flow run; the servers this
    # command starts have no UI, where such a link is a 404.
    script = """
import os, sys, uuid, httpx
from prefect.utilities.urls import url_for
from retrieval_eval.flows.job.prefect_settings import api_for_run, configured

with configured(), api_for_run() as api_url:
    link = api_url[: -len("/api")] + f"/runs/flow-run/{uuid.uuid4()}"
    print(url_for("flow-run", obj_id=uuid.uuid4()), repr(os.environ["PREFECT_UI_URL"]), httpx.get(link).status_code)
print("PREFECT_UI_URL" in os.environ)
"""
    done = subprocess.run([sys.executable, "-c", script], env=prefect_env(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["None '' 404", "False"], done.stdout
    assert done.stderr == "retrieval-eval: starting a temporary Prefect server for this run (10-30 s)\n"
