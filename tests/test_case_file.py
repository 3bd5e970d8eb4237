"""Reading a cases file ahead of its consumer (transforms/case_file.py): the read started
before the engines are imported is the one the pipeline takes, gives the same batches as a
read started on demand, and is stopped when nothing takes it."""

import json
import threading

import pyarrow as pa
import pytest

from tests.conftest import case, write_run
from transforms import case_file

STOP = threading.Event()


def _cases_file(tmp_path, n: int = 30):
    items = [{"id": f"card-{j}::00", "parent_id": f"card-{j}", "score": 1 - j / 10, "text": "x"} for j in range(4)]
    lines = [json.dumps(case(f"c{i}", items, ["card-1"])) for i in range(n)]
    return write_run(tmp_path / "runs", "run-a", lines=lines) / "cases.jsonl"


def _read_all(path, batch_items: int) -> pa.Table:
    tables = list(case_file.batches(path, case_file.BLOCK_BYTES, batch_items, STOP))
    assert all(t.num_rows for t in tables)
    return pa.concat_tables(tables)


def _read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "read-ahead"]


def test_a_read_started_ahead_is_taken_over_and_reads_the_same_cases(tmp_path):
    path = _cases_file(tmp_path)
    on_demand = _read_all(path, batch_items=10)  # 4 items a case: tables of 3 cases
    with case_file.reading_ahead(path):
        assert len(case_file._started) == 1
        ahead = _read_all(path, batch_items=10)
        assert case_file._started == {}  # taken over, not read a second time
    assert ahead.equals(on_demand)
    assert ahead.column("case_id").to_pylist() == [f"c{i}" for i in range(30)]


def test_a_read_nobody_takes_is_stopped_at_the_end_of_the_block(tmp_path):
    path = _cases_file(tmp_path)
    with case_file.reading_ahead(path):
        assert _read_ahead_threads()
    assert case_file._started == {} and not _read_ahead_threads()
    with case_file.reading_ahead(path):
        case_file.discard(path)  # a reused run says so before the block ends
        assert case_file._started == {} and not _read_ahead_threads()
    with case_file.reading_ahead(path), case_file.reading_ahead(path):  # started twice: one read
        assert len(_read_ahead_threads()) == 1
    assert case_file._started == {} and not _read_ahead_threads()


def test_a_refusal_met_ahead_is_raised_where_the_batches_are_taken(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text('null\n{"case_id": "c1"}\n')  # pyarrow would crash on a first value null
    with case_file.reading_ahead(path), pytest.raises(case_file.NotClean):
        list(case_file.batches(path, case_file.BLOCK_BYTES, 10, STOP))
