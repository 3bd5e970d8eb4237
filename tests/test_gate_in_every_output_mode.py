"""The gate is visible in every output mode, a closed pipe ends a command quietly, and `--help`
shows the defaults (SPEC 16, issue 32 items 16 and 17), through the real command."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from builders import SAMPLE_BASELINE, SAMPLE_RUNS, cli

NEWEST, BASELINE_RUN = "2026-11-23-hybrid-rerank-ptbr-regression", "2026-11-16-hybrid-rerank"


@pytest.fixture(scope="module")
def sample_warehouse(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample")
    result = cli("run", str(SAMPLE_RUNS), "--warehouse", str(root / "wh"), "--report-dir", str(root / "rep"), "--quiet")
    assert result.returncode == 0, result.stderr
    return root


def gated_run(root, *mode: str):
    return cli("run", str(SAMPLE_RUNS), "--warehouse", str(root / "wh"), "--report-dir", str(root / "rep"),
               "--baseline", str(SAMPLE_BASELINE), *mode)


def test_run_json_carries_the_gate_document_that_gate_json_prints(sample_warehouse):
    result = gated_run(sample_warehouse, "--json")
    assert result.returncode == 1, result.stderr  # the sample's pt-BR regression fails the gate
    document = json.loads(result.stdout)
    gate = cli("gate", NEWEST, "--warehouse", str(sample_warehouse / "wh"), "--baseline", str(SAMPLE_BASELINE),
               "--format", "json")
    assert gate.returncode == 1, gate.stderr
    assert document["gate"] == json.loads(gate.stdout)
    assert [run["run_id"] for run in document["runs"]][-1] == NEWEST  # the report's document is still there


def test_run_quiet_prints_the_gates_one_line_verdict_and_exits_1(sample_warehouse):
    result = gated_run(sample_warehouse, "--quiet")
    assert result.returncode == 1, result.stderr
    report_line, verdict = result.stdout.splitlines()
    assert report_line.startswith("Report written to ")
    assert verdict.startswith(f"gate: run {NEWEST} against baseline {BASELINE_RUN} at k=4, decision point: FAIL: "
                              "hit_at_k on locale=pt-BR"), verdict
    passing = gated_run(sample_warehouse, "--quiet", "--tolerance", "1", "--locale-tolerance", "1")
    assert passing.returncode == 0, passing.stderr
    assert passing.stdout.splitlines()[1] == (f"gate: run {NEWEST} against baseline {BASELINE_RUN} at k=4, "
                                              "decision point: PASS")


def closed_early(args: list[str]) -> tuple[int, str]:
    """The command with stdout a pipe whose reader reads one line and closes it."""
    process = subprocess.Popen([sys.executable, "-m", "retrieval_eval", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()
    _, stderr = process.communicate(timeout=600)
    return process.returncode, stderr.decode()


def closed_at_once(args: list[str]) -> tuple[int, str]:
    """The command with stdout a pipe whose reader has gone before the command writes."""
    process = subprocess.Popen([sys.executable, "-m", "retrieval_eval", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()
    _, stderr = process.communicate(timeout=600)
    return process.returncode, stderr.decode()


COMMANDS = {
    "query": ["query", "select * from retrieved"],
    "export": ["export", NEWEST, "--format", "trec-run"],
    "export-csv": ["export", NEWEST, "--format", "csv"],  # Polars' writer says EPIPE its own way
    "query-csv": ["query", "select * from retrieved", "--format", "csv"],
    "compare": ["compare", BASELINE_RUN, NEWEST],
    "gate": ["gate", NEWEST, "--baseline", str(SAMPLE_BASELINE), "--tolerance", "1", "--locale-tolerance", "1"],
}


@pytest.mark.parametrize("closing", [closed_early, closed_at_once], ids=["after-one-line", "at-once"])
@pytest.mark.parametrize("name", [*COMMANDS, "run"])
def test_a_closed_pipe_ends_the_command_quietly(sample_warehouse, name, closing):
    warehouse = ["--warehouse", str(sample_warehouse / "wh")]
    args = [*COMMANDS[name], *warehouse] if name in COMMANDS else \
        ["run", str(SAMPLE_RUNS), *warehouse, "--report-dir", str(sample_warehouse / "rep")]
    started = time.monotonic()
    code, stderr = closing(args)
    assert code in (0, 141) and stderr == "", (code, stderr)
    assert time.monotonic() - started < 120


def help_of(*command: str) -> str:
    result = cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())  # argparse wraps lines


@pytest.mark.parametrize("command, defaults", [
    (("run",), ["(a path, or a URI: s3://bucket/runs) (default: data/runs)",
                "--warehouse WAREHOUSE the warehouse: a folder, or a URI (s3://bucket/warehouse) (default: data/warehouse)", "(default: data/reports)", "(default: data/kb/cards.jsonl when present)",
                "default: no gate)"]),
    (("serve",), ["(default: data/runs)", "(default: data/warehouse)", "(default: data/reports)",
                  "(default: data/kb/cards.jsonl when present)", "default: no gate)"]),
    (("gate",), ["(default: data/warehouse)", "the baseline snapshot (default: data/baselines/baseline.json)",
                 "(default: the KB the run was judged against)", "(default: table)"]),
    (("query",), ["(default: data/warehouse)", "(default: table)"]),
    (("compare",), ["(default: data/warehouse)", "(default: table)", "(default: hit_at_k,recall_at_k,ndcg_at_k)",
                    "(default: all,locale)"]),
    (("export",), ["(default: data/warehouse)"]),
    (("baseline", "refresh"), ["(default: data/warehouse)", "(default: data/baselines/baseline.json)"]),
    (("baseline", "floors"), ["the baseline snapshot (default: data/baselines/baseline.json)"]),
    (("warehouse", "check"), ["(default: data/warehouse)"]),
])
def test_help_shows_the_defaults(command, defaults):
    text = help_of(*command)
    for default in defaults:
        assert default in text, (default, text)
    assert "['" not in text  # no Python list
