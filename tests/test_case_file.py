"""One read of a cases file (flows/sources/case_file.py): the read the CLI starts before the engines
are imported is the one the first ingest takes and gives what a read started on demand gives;
a read nobody takes is stopped; its facts tell what JSON forbids and Arrow would take."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from builders import case, cli, write_run
from hypothesis import given, settings
from hypothesis import strategies as st
from retrieval_eval.flows.sources.case_file import CaseFileRead, scan_facts
from retrieval_eval.flows.sources.strict_read import Prefetch
from retrieval_eval.flows.sources.artifacts import first_cases_file
from retrieval_eval.flows.sources.stored_file import StoredFile
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.transforms.errors import NotClean


def _cases_file(tmp_path, n: int = 30):
    items = [{"id": f"card-{j}::00", "parent_id": f"card-{j}", "score": 1 - j / 10, "text": "x"} for j in range(4)]
    lines = [json.dumps(case(f"c{i}", items, ["card-1"])) for i in range(n)]
    return write_run(tmp_path / "runs", "run-a", lines=lines) / "cases.jsonl"


def _read_all(read: CaseFileRead, batch_items: int) -> pa.Table:
    with read:
        tables = list(read.tables(batch_items))
    assert all(t.num_rows for t in tables)
    return pa.concat_tables(tables)


def _reading_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in ("parse", "scan")]


def test_a_read_started_ahead_is_taken_over_and_reads_the_same_cases(tmp_path):
    path = _cases_file(tmp_path)
    on_demand = _read_all(CaseFileRead(path), batch_items=10)  # 4 items a case: tables of 3 cases
    with Prefetch(StoredFile(str(path))) as prefetch:
        read = prefetch.take(StoredFile(str(path)))
        assert read is not None and prefetch.take(StoredFile(str(path))) is None  # handed over once
        ahead = _read_all(CaseFileRead(path, started=read), batch_items=10)
    assert ahead.equals(on_demand)
    assert ahead.column("case_id").to_pylist() == [f"c{i}" for i in range(30)]


def test_a_read_nobody_takes_is_stopped_with_its_prefetch(tmp_path):
    path = _cases_file(tmp_path)
    with Prefetch(StoredFile(str(path))) as prefetch:
        started = prefetch._read
        assert started is not None and started.path == path
    assert started.handoff.done.is_set() and not any(t.is_alive() for t in started._threads)
    assert not _reading_threads()
    with Prefetch(StoredFile(str(path))) as prefetch:
        started = prefetch._read
        assert prefetch.take(StoredFile(str(tmp_path / "another.jsonl"))) is None  # another file: the read is stopped
        assert started.handoff.done.is_set() and not any(t.is_alive() for t in started._threads)


def test_a_refusal_met_ahead_is_raised_where_the_tables_are_taken(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text('null\n{"case_id": "c1"}\n')  # pyarrow would crash on a first value null
    with CaseFileRead(path) as read, pytest.raises(NotClean):
        list(read.tables(10))


@pytest.mark.parametrize("text, json_only", [
    (b'{"a": 1}\n{"b": "caf\xc3\xa9"}\n', True),
    (b'{"a": NaN}\n', False),
    (b'{"a": -Infinity}\n', False),
    (b'{"a": "\xff"}\n', False),
    (b'{"a": "NaN in text counts too: the exact rules then judge"}\n', False),
    (b'{"a": "caf\xc3', False),  # a character cut off by the end of the file
])
def test_the_facts_tell_what_json_forbids(tmp_path, text, json_only):
    path = tmp_path / "cases.jsonl"
    path.write_bytes(text)
    assert scan_facts(path).json_only is json_only


def test_a_token_split_across_blocks_is_seen(tmp_path, monkeypatch):
    import retrieval_eval.flows.sources.case_file as case_file

    monkeypatch.setattr(case_file, "BLOCK_BYTES", 8)
    path = tmp_path / "cases.jsonl"
    path.write_bytes(b'{"ab": Infinity}\n')  # "Infinity" straddles the 8-byte blocks
    assert scan_facts(path).json_only is False
    path.write_bytes('{"a": "ééééé"}\n'.encode())  # two-byte characters cut by the blocks
    assert scan_facts(path).json_only is True


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"N", b"a", b"NaN", b"Na", b"I", b"Infinit", b"Infinity", b"nfinity", b"x", b"\n"]),
                max_size=12))
def test_the_token_search_finds_what_a_substring_search_finds(pieces):
    from retrieval_eval.flows.sources.case_file import NON_JSON_NUMBERS, _holds_token

    data = b"".join(pieces)
    expected = any(token in data for token in NON_JSON_NUMBERS)
    assert _holds_token(data, NON_JSON_NUMBERS) is expected


def _facts_by_hand(data: bytes) -> tuple[int, int, bool]:
    """Lines, lines opening with '{', and whether the bytes are JSON text as far as the scan
    looks (valid UTF-8, no NaN / Infinity token), worked out on the whole bytes at once."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the text after a final newline is not a line
    try:
        data.decode("utf-8")
        utf8 = True
    except UnicodeDecodeError:
        utf8 = False
    tokens = any(token in data for token in (b"NaN", b"Infinity"))
    return len(lines), sum(line.startswith(b"{") for line in lines), utf8 and not tokens


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.sampled_from([b"{", b"}", b"\n", b"a", b" ", b"NaN", b"Na", b"Infinity", b"Infin", b"ity",
                              "é".encode(), "€".encode(), "😀".encode(), b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80"]),
             max_size=20),
    st.integers(min_value=1, max_value=12),
    st.sampled_from([0, 1, 2, 64]),
)
def test_the_scan_of_a_file_in_blocks_agrees_with_the_whole_bytes(pieces, block_bytes, find_budget):
    # find_budget: how many hits `find` takes before NumPy's pass (0: NumPy at the first hit)
    from retrieval_eval.flows.sources import case_file

    data = b"".join(pieces)
    scan = case_file._Scan()
    saved, case_file.FIND_BUDGET = case_file.FIND_BUDGET, find_budget
    try:
        for start in range(0, len(data), block_bytes):
            scan.update(data[start:start + block_bytes])
        scan.finish()
    finally:
        case_file.FIND_BUDGET = saved
    assert (scan.lines, scan.object_lines, scan.json_only) == _facts_by_hand(data)


def test_tables_asked_of_a_closed_read_end_it_rather_than_wait(tmp_path):
    # a read closed by someone else (found by a review, 2026-12-04: it waited for ever)
    from retrieval_eval.flows.sources.case_file import Stopped

    read = CaseFileRead(_cases_file(tmp_path))
    read.close()
    with pytest.raises(Stopped):
        list(read.tables(10))


def test_the_first_run_is_read_ahead_unless_its_file_is_the_one_its_commit_recorded(tmp_path):
    # `run` starts reading the first run's cases file while it imports its engines; a run whose
    # file is the one the warehouse recorded (same stamp) is likely reused, so it is not read.
    runs, warehouse = tmp_path / "runs", tmp_path / "wh"
    items = [{"id": "k1::0", "parent_id": "k1", "score": 1.0}]
    write_run(runs, "run-a", [case("c1", items, ["k1"])])
    write_run(runs, "run-b", [case("c1", items, ["k2"])], created_at="2026-11-02T02:00:00Z")
    cases_a = runs / "run-a" / "cases.jsonl"
    first = first_cases_file(runs, {})
    assert first is not None and first.location == str(cases_a.absolute())
    done = cli("run", str(runs), "--warehouse", str(warehouse), "--report-dir", str(tmp_path / "rep"), "--quiet")
    assert done.returncode == 0, done.stderr
    assert first_cases_file(runs, Warehouse(warehouse).committed_sources()) is None
    stat = cases_a.stat()
    os.utime(cases_a, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # touched: read again
    touched = first_cases_file(runs, Warehouse(warehouse).committed_sources())
    assert touched is not None and touched.location == str(cases_a.absolute())


# ------------------------------------------------- the strict read: one pass, started before Arrow


def _file_of_lines(tmp_path, shape: str) -> Path:
    """A cases file of 40 records (4 items each, ~200 bytes a line) shaped as `shape` says."""
    items = [{"id": f"card-{j}::00", "parent_id": f"card-{j}", "score": 1 - j / 10} for j in range(4)]
    lines = [json.dumps(case(f"c{i}", items, ["card-1"])) for i in range(40)]
    if shape == "a refused line":
        lines[17] = '{"case_id": "c17", "retrieved_context": "not a list"}'
    if shape == "an overlong line":
        lines[17] = json.dumps(case("c17", items * 20, ["card-1"]))
    path = tmp_path / shape.replace(" ", "-") / "cases.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("" if shape == "empty" else "\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("early", [False, True], ids=["on the way", "by a scan"])
@pytest.mark.parametrize("shape", ["clean", "a refused line", "an overlong line", "empty"])
def test_the_digest_is_of_every_byte_however_the_parse_ends(tmp_path, monkeypatch, shape, early):
    # The strict parser's read digests the bytes it reads, and the rest of them once it stops
    # (a refused line; a line past the record limit ends the read itself); a scan of its own
    # when asked. Blocks of 1 KiB: the file is read in several. Checked against BLAKE3 of the
    # whole bytes at once.
    from blake3 import blake3

    from retrieval_eval.flows.sources import strict_read

    monkeypatch.setattr(strict_read, "STRICT_BLOCK_BYTES", 1024)
    monkeypatch.setattr(strict_read, "MAX_RECORD_BYTES", 2048)
    path = _file_of_lines(tmp_path, shape)
    with CaseFileRead(path) as read:
        assert read.strict
        if early:
            read.digest_early()
        try:
            cases = sum(table.num_rows for table in read.tables(10))
        except NotClean:
            cases = None
        facts = read.facts()
    assert facts.digest == "blake3:" + blake3(path.read_bytes()).hexdigest()
    assert cases == {"clean": 40, "empty": 0}.get(shape)


def test_a_read_started_ahead_is_digested_by_a_scan_once_asked(tmp_path):
    # A prefetched read whose run was committed (a touched file): its digest is asked for early,
    # after the parse began digesting on its own; the scan's digest is the file's.
    from blake3 import blake3

    path = _cases_file(tmp_path, n=3_000)
    with Prefetch(StoredFile(str(path))) as prefetch:
        started = prefetch.take(StoredFile(str(path)))
        with CaseFileRead(path, started=started) as read:
            read.digest_early()
            assert read.facts().digest == "blake3:" + blake3(path.read_bytes()).hexdigest()
            assert sum(table.num_rows for table in read.tables(1_000)) == 3_000
            assert [t.name for t in started._threads] == ["parse", "scan"]


def test_the_first_read_starts_before_arrow_numpy_and_the_engines_are_imported(tmp_path):
    # `run` starts its first run's read as soon as it found the file: what the CLI imports up to
    # then, and the read itself, import none of them (they took the first 0.1 s of a run).
    path = _cases_file(tmp_path)
    code = "\n".join([
        "import sys",
        "from retrieval_eval.flows.commands import cli, run",
        "from retrieval_eval.flows.sources.stored_file import StoredFile",
        "from retrieval_eval.flows.sources.strict_read import Prefetch",
        f"with Prefetch(StoredFile({str(path)!r})) as prefetch:",
        "    parsed = next(prefetch._read.handoff.items())",
        "    print(parsed[0], sorted(m for m in ('numpy', 'pyarrow', 'polars', 'duckdb') if m in sys.modules))",
    ])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["30", "[]"]  # the first block's 30 cases, parsed with none imported
