"""Every input of `run` may be a URI (SPEC 14): a runs root or one run folder, the KB, the
baseline, a TREC run and its qrels, read from a real S3 API on loopback (moto's server,
tests/s3_server.py) through the real command. The figures equal those of the same files read
from local disk; a missing object or a dead endpoint is exit 2 in one line; an unchanged run
is not downloaded again (counted in moto's own request log); an object replaced after it was
listed is not read as the one listed."""

from __future__ import annotations

import json
import re
import shutil
import threading
from pathlib import Path

import pytest
from builders import cli, reader
from retrieval_eval.flows.sources.strict_read import Prefetch
from retrieval_eval.flows.sources.stored_file import StoredFile
from retrieval_eval.flows.storage import open_store
from retrieval_eval.flows.storage.errors import ObjectChanged
from s3_server import free_port

SAMPLE = Path(__file__).resolve().parents[1] / "data"
NEWEST = "2026-11-23-hybrid-rerank-ptbr-regression"
# A TREC run of two topics and its qrels; the figures at k = 1 and 2, by hand:
# q1 ranks its one relevant doc d1 first (hit@1 = 1); q2 ranks d4 (not relevant) then d3
# (relevant): hit@1 = 0, hit@2 = 1, reciprocal rank 1/2. Means: hit@1 = 0.5, hit@2 = 1.0, RR@2 = 0.75.
TREC_RUN = "q1 Q0 d1 1 2.0 bm25\nq1 Q0 d2 2 1.0 bm25\nq2 Q0 d4 1 3.0 bm25\nq2 Q0 d3 2 2.5 bm25\n"
QRELS = "q1 0 d1 1\nq2 0 d3 1\n"


def upload(folder: Path, uri: str) -> None:
    """Every file below `folder` to the objects below `uri`, as an eval runner pushes them."""
    store, prefix = open_store(uri)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        store.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path)


def run_json(*args: str) -> tuple[int, dict | None, str]:
    result = cli("run", *args, "--json")
    return result.returncode, json.loads(result.stdout) if result.stdout.strip() else None, result.stderr


def figures(document: dict) -> dict:
    """Each run's aggregates and counts: what must not depend on where the files were read."""
    return {run["run_id"]: (run["n_cases"], run["n_labelled"], run["n_rejected"], run["aggregates"])
            for run in document["runs"]}


def moto_log(tmp_path_factory) -> Path:
    """The request log of the session's moto server (tests/s3_server.py writes it)."""
    (log,) = {path.resolve() for path in tmp_path_factory.getbasetemp().glob("moto*/server.log")}
    return log


def gets_of(log: Path, bucket: str, name: str) -> int:
    """How many GET requests moto has served for objects of `bucket` named `name`."""
    return sum(1 for line in log.read_text(errors="replace").splitlines()
               if '"GET /' + bucket + "/" in line and name + " HTTP" in line)


@pytest.fixture
def sample_on_s3(s3_bucket) -> str:
    """The committed sample's runs, KB and baseline under s3://<bucket>/data."""
    upload(SAMPLE / "runs", f"s3://{s3_bucket}/data/runs")
    upload(SAMPLE / "kb", f"s3://{s3_bucket}/data/kb")
    upload(SAMPLE / "baselines", f"s3://{s3_bucket}/data/baselines")
    return f"s3://{s3_bucket}/data"


def test_a_runs_root_kb_and_baseline_on_s3_give_the_figures_and_gate_of_the_same_files_on_disk(sample_on_s3, tmp_path):
    local_code, local, _ = run_json(str(SAMPLE / "runs"), "--kb", str(SAMPLE / "kb" / "cards.jsonl"),
                                    "--baseline", str(SAMPLE / "baselines" / "baseline.json"),
                                    "--warehouse", str(tmp_path / "local-wh"), "--report-dir", str(tmp_path / "local-rep"))
    code, remote, stderr = run_json(f"{sample_on_s3}/runs", "--kb", f"{sample_on_s3}/kb/cards.jsonl",
                                    "--baseline", f"{sample_on_s3}/baselines/baseline.json",
                                    "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"))
    assert code == local_code and remote is not None, stderr
    assert len(remote["runs"]) == 4
    assert figures(remote) == figures(local)
    # The gate's verdict is the same; its note names the KB where it was read.
    local_gate = json.dumps(local["gate"]).replace(str(SAMPLE / "kb" / "cards.jsonl"), f"{sample_on_s3}/kb/cards.jsonl")
    assert json.dumps(remote["gate"]) == local_gate
    with reader(tmp_path / "wh") as con:
        rows = con.execute("select run_id, source_file, kb_uri from runs order by run_id").fetchall()
    assert [(run_id, source) for run_id, source, _ in rows] == [
        (run_id, f"{sample_on_s3}/runs/{run_id}/cases.jsonl") for run_id, _, _ in rows]
    assert {kb_uri for _, _, kb_uri in rows} == {f"{sample_on_s3}/kb/cards.jsonl"}


def test_one_run_folder_on_s3_is_that_run_alone(sample_on_s3, tmp_path):
    _, local, _ = run_json(str(SAMPLE / "runs" / NEWEST), "--warehouse", str(tmp_path / "local-wh"),
                           "--report-dir", str(tmp_path / "local-rep"))
    code, remote, stderr = run_json(f"{sample_on_s3}/runs/{NEWEST}", "--warehouse", str(tmp_path / "wh"),
                                    "--report-dir", str(tmp_path / "rep"))
    assert code == 0, stderr
    assert list(figures(remote)) == [NEWEST]
    assert figures(remote) == figures(local)


def test_the_gate_reads_a_runs_own_kb_back_from_its_uri(sample_on_s3, tmp_path):
    """`gate` judges flips against the KB the run recorded (`runs.kb_uri`), here an object:
    read back as it was, it says nothing of it; replaced in the bucket, it says the run's KB
    has changed (SPEC 16), naming its URI."""
    kb = f"{sample_on_s3}/kb/cards.jsonl"
    code, _, stderr = run_json(f"{sample_on_s3}/runs", "--kb", kb,
                               "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"))
    assert code == 0, stderr

    def gate_warnings() -> list[str]:
        gated = cli("gate", NEWEST, "--baseline", str(SAMPLE / "baselines" / "baseline.json"),
                    "--warehouse", str(tmp_path / "wh"), "--format", "json")
        assert gated.returncode == 1, gated.stderr  # the sample's newest run regresses on pt-BR
        return [warning for warning in json.loads(gated.stdout)["warnings"] if "KB" in warning]

    assert gate_warnings() == []  # its own KB, read from the bucket with the bytes recorded
    store, key = open_store(kb)
    store.put(key, store.get(key) + b"\n", overwrite=True)  # a blank line more: other bytes, the same cards
    [note] = gate_warnings()
    assert f"run {NEWEST}'s KB {kb} has changed since the run" in note, note
    assert "no flip could be judged gold_not_in_kb" in note, note


def test_a_trec_run_and_qrels_on_s3_give_the_figures_of_the_same_files_on_disk(s3_bucket, tmp_path):
    for name, text in (("bm25.run", TREC_RUN), ("qrels.txt", QRELS)):
        (tmp_path / name).write_text(text)
    upload(tmp_path, f"s3://{s3_bucket}/trec")
    _, local, _ = run_json("--trec-run", str(tmp_path / "bm25.run"), "--qrels", str(tmp_path / "qrels.txt"),
                           "--ks", "1,2", "--warehouse", str(tmp_path / "local-wh"),
                           "--report-dir", str(tmp_path / "local-rep"))
    code, remote, stderr = run_json("--trec-run", f"s3://{s3_bucket}/trec/bm25.run",
                                    "--qrels", f"s3://{s3_bucket}/trec/qrels.txt", "--ks", "1,2",
                                    "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"))
    assert code == 0, stderr
    assert figures(remote) == figures(local)
    (run,) = remote["runs"]
    assert run["run_id"] == "bm25"
    headline = {(a["k"], a["metric"]): a["mean"] for a in run["aggregates"] if a["slice"] == "all"}
    assert headline[(1, "hit_at_k")] == 0.5
    assert headline[(2, "hit_at_k")] == 1.0
    assert headline[(2, "reciprocal_rank_at_k")] == 0.75


@pytest.mark.parametrize("option", ["runs", "kb", "baseline", "trec-run"])
def test_a_missing_object_is_exit_2_naming_its_uri(sample_on_s3, tmp_path, option):
    missing = f"{sample_on_s3}/nothing-here/x.json"
    args = {
        "runs": [missing.removesuffix("/x.json")],
        "kb": [f"{sample_on_s3}/runs", "--kb", missing],
        "baseline": [f"{sample_on_s3}/runs", "--baseline", missing],
        "trec-run": ["--trec-run", missing, "--qrels", f"{sample_on_s3}/kb/cards.jsonl"],
    }[option]
    result = cli("run", *args, "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and missing.removesuffix("/x.json") in lines[0], result.stderr
    assert not (tmp_path / "wh").exists() or not any((tmp_path / "wh").rglob("*.parquet"))


def test_an_endpoint_nobody_answers_is_exit_2_saying_the_store_is_unavailable(sample_on_s3, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    result = cli("run", f"{sample_on_s3}/runs", "--warehouse", str(tmp_path / "wh"),
                 "--report-dir", str(tmp_path / "rep"), timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "store unavailable" in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert "testing" not in result.stderr  # the fixture's secret key is never said


def test_an_unchanged_run_on_s3_is_not_downloaded_again(sample_on_s3, s3_bucket, tmp_path, tmp_path_factory):
    log = moto_log(tmp_path_factory)
    args = ["run", f"{sample_on_s3}/runs", "--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep"),
            "--quiet"]
    manifest_store, manifest_key = open_store(f"{sample_on_s3}/runs/{NEWEST}/manifest.json")
    manifest_bytes = manifest_store.get(manifest_key)
    before = gets_of(log, s3_bucket, "cases.jsonl")
    before_manifests = gets_of(log, s3_bucket, "manifest.json")
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    after_first = gets_of(log, s3_bucket, "cases.jsonl")
    assert after_first - before >= 4  # each run's cases file was read (the count sees them)
    manifests = gets_of(log, s3_bucket, "manifest.json")
    assert manifests - before_manifests >= 4  # the first run read every manifest
    shutil.rmtree(tmp_path / "wh" / ".scratch", ignore_errors=True)
    second = cli(*args)
    assert second.returncode == 0, second.stderr
    assert gets_of(log, s3_bucket, "cases.jsonl") == after_first
    # Nor a manifest: each is taken from what its committed run recorded (SPEC 14: no read per
    # committed run).
    assert gets_of(log, s3_bucket, "manifest.json") == manifests
    # A replaced object (a new etag) is read again, even with the same size.
    store, prefix = open_store(f"{sample_on_s3}/runs/{NEWEST}/cases.jsonl")
    store.put(prefix, store.get(prefix) + b"\n", overwrite=True)  # a blank line more: other bytes
    manifest_store.put(manifest_key, manifest_bytes + b"\n", overwrite=True)  # the same manifest, other bytes
    third = cli(*args)
    assert third.returncode == 0, third.stderr
    assert gets_of(log, s3_bucket, "cases.jsonl") > after_first
    assert gets_of(log, s3_bucket, "manifest.json") == manifests + 1  # that one manifest (a new etag), read again


def test_a_read_ahead_is_taken_only_for_the_object_the_job_lists(s3_bucket):
    # `run` streams the first run's cases file while it imports its engines, and the job lists
    # the runs again: an object replaced in between (another ETag) is not taken from the read
    # ahead, and a stream bound to the ETag it listed fails rather than give the new bytes.
    uri = f"s3://{s3_bucket}/ahead/run-a/cases.jsonl"
    store, key = open_store(uri)
    store.put(key, b"first bytes\n")
    listed = store.head(key)
    store.put(key, b"other bytes\n", overwrite=True)
    relisted = store.head(key)
    assert relisted.etag != listed.etag
    with Prefetch(StoredFile(uri, listed)) as prefetch:
        assert prefetch.take(StoredFile(uri, relisted)) is None
    stale = StoredFile(uri, listed).stream()
    try:
        with pytest.raises(ObjectChanged, match="^" + re.escape(uri) + ": changed since it was listed"):
            stale.reader(threading.Event()).read()
    finally:
        stale.close()
    fresh = StoredFile(uri, relisted).stream()
    try:
        assert fresh.reader(threading.Event()).read() == b"other bytes\n"
    finally:
        fresh.close()
    with Prefetch(StoredFile(uri, relisted)) as prefetch:
        read = prefetch.take(StoredFile(uri, relisted))
        assert read is not None and read.where == uri
        read.close()
