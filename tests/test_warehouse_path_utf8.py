"""SPEC 16: a warehouse path that is not UTF-8 is refused up front (exit 2, one line naming
the path with its bytes escaped), before anything is written: DuckDB, which writes and reads
every table, takes paths as UTF-8 text only, so no such warehouse could be read back."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from builders import case, chunk, cli, write_run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def not_utf8_folder(tmp_path):
    folder = os.fsdecode(os.fsencode(str(tmp_path)) + b"/wh\xff")  # a real name with byte 0xff
    return folder


@pytest.mark.parametrize("command", [("run", "runs", "--report-dir", "rep"), ("query", "select 1"),
                                     ("warehouse", "check"), ("export", "run-a", "--format", "csv")])
def test_a_warehouse_path_that_is_not_utf8_is_refused_before_any_write(tmp_path, not_utf8_folder, command):
    write_run(tmp_path / "runs", "run-a", [case("c1", [chunk("A::00", "A", 0.9)], ["A"])])
    result = cli(*command, "--warehouse", not_utf8_folder, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"retrieval-eval: {tmp_path}/wh\\xff: the warehouse path is not UTF-8 (DuckDB, which "
                             "reads and writes the warehouse, takes UTF-8 paths only); choose one whose path is UTF-8\n")
    assert not os.path.exists(not_utf8_folder) and not (tmp_path / "rep").exists()


def test_a_relative_warehouse_under_a_folder_that_is_not_utf8_is_refused(tmp_path):
    cwd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/cwd\xfe")
    os.mkdir(cwd)
    write_run(tmp_path / "runs", "run-a", [case("c1", [chunk("A::00", "A", 0.9)], ["A"])])
    result = cli("run", str(tmp_path / "runs"), "--warehouse", "wh", "--report-dir", str(tmp_path / "rep"), cwd=cwd)
    assert result.returncode == 2 and "cwd\\xfe/wh: the warehouse path is not UTF-8" in result.stderr
    assert os.listdir(cwd) == []


@pytest.mark.parametrize("given", ["RUNS", "--kb", "--baseline"])
def test_a_runs_kb_or_baseline_path_that_is_not_utf8_is_refused_before_any_write(tmp_path, sample_copy, given):
    # The runs row records its artifacts' and KB's paths as text: such a path was a traceback
    # (exit 1, a failed gate's code) after the commit.
    odd = os.fsencode(str(tmp_path)) + b"/odd\xff"
    os.mkdir(odd)
    runs, kb = sample_copy / "runs", sample_copy / "kb" / "cards.jsonl"
    baseline = REPO / "data" / "baselines" / "baseline.json"
    if given == "RUNS":
        runs = os.fsdecode(odd + b"/runs")
        shutil.copytree(sample_copy / "runs", runs)
    elif given == "--kb":
        kb = os.fsdecode(odd + b"/cards.jsonl")
        shutil.copy(sample_copy / "kb" / "cards.jsonl", kb)
    else:
        baseline = os.fsdecode(odd + b"/baseline.json")
        shutil.copy(REPO / "data" / "baselines" / "baseline.json", baseline)
    result = cli("run", str(runs), "--kb", str(kb), "--baseline", str(baseline), "--warehouse", str(tmp_path / "wh"),
                 "--report-dir", str(tmp_path / "rep"))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "odd\\xff" in result.stderr and f": the {given} path is not UTF-8" in result.stderr
    assert not (tmp_path / "wh").exists() and not (tmp_path / "rep").exists()
