"""SPEC 16 "Every malformed input is exit 2 with one line": a TREC run file or qrels, however
broken, ends as a loaded run (exit 0) or as bad input naming the file (exit 2), never as an
engine's exception (exit 1 is a failed gate's)."""

from __future__ import annotations

from pathlib import Path

from builders import cli, reader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from retrieval_eval.flows.sources.trec_files import TrecIngest, trec_source
from retrieval_eval.transforms.errors import InputError


def run_trec(tmp_path: Path, run: Path, qrels: Path, *extra: str):
    return cli("run", "--trec-run", str(run), "--qrels", str(qrels), "--warehouse", str(tmp_path / "wh"),
               "--report-dir", str(tmp_path / "rep"), *extra, cwd=tmp_path)


def test_every_line_of_both_files_rejected_and_allowed_loads_an_empty_run(tmp_path):
    run = tmp_path / "all-bad.run"
    run.write_bytes(b"q1 Q0 d1\nnot a run line\n")  # 3 and 3 fields where 6 are needed
    qrels = tmp_path / "qrels"
    qrels.write_bytes(b"q1 0 d1\n")  # 3 fields where 4 are needed
    loaded = run_trec(tmp_path, run, qrels, "--allow-rejects")
    assert loaded.returncode == 0, loaded.stderr
    with reader(tmp_path / "wh") as con:
        assert con.execute("select n_cases, n_rejected from runs").fetchall() == [(0, 3)]
        assert con.execute("select source_file, line from rejects order by source_file, line").fetchall() == [
            (str(run), 1), (str(run), 2), (str(qrels), 1)]


def test_a_last_line_not_utf8_without_a_line_end_is_a_reject_by_its_line(tmp_path):
    run = tmp_path / "r.run"
    run.write_bytes(b"q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 0.5 t\xff")
    qrels = tmp_path / "qrels"
    qrels.write_bytes(b"q1 0 d1 1\n")
    refused = run_trec(tmp_path, run, qrels)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"{run}:2: not valid UTF-8" in refused.stderr
    loaded = run_trec(tmp_path, run, qrels, "--allow-rejects")
    assert loaded.returncode == 0, loaded.stderr
    with reader(tmp_path / "wh") as con:
        assert con.execute("select n_cases, n_rejected from runs").fetchall() == [(1, 1)]


LINE_PIECES = st.sampled_from([b"q1", b"q2", b"Q0", b"0", b"d1", b"d2", b"1", b"2.5", b"-1", b"nan", b"inf", b"#",
                               b" ", b"\t", b"\r", b"\xff", b"\xc3", b"\x00", b"\xe2\x82", b"\v", b""])
LINE = st.one_of(st.lists(LINE_PIECES, max_size=8).map(b" ".join), st.binary(max_size=24))
FILE = st.lists(LINE, max_size=8).map(b"\n".join)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run_bytes=FILE, qrels_bytes=FILE, cut=st.integers(min_value=0, max_value=200), allow=st.booleans())
def test_a_spoiled_trec_file_is_read_or_refused_as_bad_input(tmp_path, run_bytes, qrels_bytes, cut, allow):
    """Random bytes lines and random truncations: the ingest ends, or says the input is bad."""
    run, qrels = tmp_path / "fuzz.run", tmp_path / "fuzz.qrels"
    run.write_bytes(run_bytes[:cut] if cut < len(run_bytes) else run_bytes)
    qrels.write_bytes(qrels_bytes)
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    ingest = TrecIngest(trec_source(run, qrels, "fuzz", top_k=10), scratch, allow_rejects=allow, block_bytes=16)
    try:
        for _ in ingest.batches():
            pass
    except InputError as error:
        assert "\n" not in str(error) or "record(s) rejected" in str(error)
        return
    account = ingest.account
    assert account.refused == (account.rejects.count > 0 and not allow)


def test_one_spoiled_trec_file_through_the_command_is_exit_0_or_2(tmp_path):
    run = tmp_path / "r.run"
    run.write_bytes(b"q1 Q0 d1 1 1.0 t\n\xff\xfe\t\x00 Q0\nq1 Q0 d2 2 x t\nq2")
    qrels = tmp_path / "qrels"
    qrels.write_bytes(b"\xc3\nq1 0 d1 1\nq1 0 d2")
    for extra in ((), ("--allow-rejects",)):
        result = run_trec(tmp_path, run, qrels, *extra)
        assert result.returncode in (0, 2) and "Traceback" not in result.stderr, result.stderr
