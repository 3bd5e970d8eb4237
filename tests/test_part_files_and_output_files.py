"""part_files.write_parquet: every column type the warehouse writes comes back as it went in, and
the record it returns (size, rows, BLAKE3) is the file's. reports.ordered_map: map's results,
in order, made on threads a bounded number ahead."""

import random
import threading
import time

import polars as pl
from blake3 import blake3
from retrieval_eval.flows.outputs import reports
from retrieval_eval.flows.storage import output_files
from retrieval_eval.flows.warehouse import part_files


def test_parquet_round_trip_of_flat_and_nested_strings(tmp_path):
    # Flat strings go to Arrow's writer as string views; under a list or a struct they
    # cannot (pyarrow refuses nested views), which a staged partition and `cases` hold.
    frame = pl.DataFrame(
        {
            "case_id": ["c1", "c2", "a longer id than twelve bytes"],
            "gold": [["card-1"], [], None],
            "retrieved_context": [[{"id": "x::01", "parent_id": None, "score": 0.5}], [], []],
            "rank": pl.Series([1, 2, 3], dtype=pl.Int32),
        }
    )
    for name, dictionary in (("all.parquet", True), ("ids.parquet", ["case_id"])):
        path = tmp_path / name
        part = part_files.write_parquet(frame, path, tmp_path, compression="lz4", dictionary=dictionary)
        assert pl.read_parquet(path).equals(frame)
        assert part.path == name and part.rows == 3
        assert part.bytes == path.stat().st_size and part.blake3 == blake3(path.read_bytes()).hexdigest()


def test_ordered_map_gives_maps_results_in_order_a_bounded_number_ahead():
    started, lock = [], threading.Lock()

    def slow_square(n):
        with lock:
            started.append(n)
        time.sleep(random.uniform(0, 0.005))  # later items often finish first
        return n * n

    taken = []
    for result in reports.ordered_map(slow_square, range(40), workers=2):
        taken.append(result)
        with lock:
            assert len(started) <= len(taken) + 2  # made ahead: at most workers + 1, this one included
    assert taken == [n * n for n in range(40)]
    assert list(reports.ordered_map(slow_square, [], workers=2)) == []


def test_ordered_map_stopped_early_runs_nothing_more():
    calls = []
    results = reports.ordered_map(calls.append, range(100), workers=2)
    next(results)
    results.close()  # the reader stopped (an error while writing the file)
    made = len(calls)
    time.sleep(0.05)
    assert made == len(calls) <= 4


def test_a_file_written_aside_names_a_missing_folder_or_a_folder_given_and_leaves_nothing(tmp_path):
    import pytest

    with pytest.raises(FileNotFoundError) as missing, output_files.written_aside(tmp_path / "no" / "dir" / "x.csv"):
        raise AssertionError("the block must not run")
    assert missing.value.filename == str(tmp_path / "no" / "dir")  # not the hidden partial file
    with pytest.raises(IsADirectoryError) as folder, output_files.written_aside(tmp_path):
        raise AssertionError("the block must not run")
    assert folder.value.filename == str(tmp_path)
    with output_files.written_aside(tmp_path / "x.csv") as handle:
        handle.write("a\n")
    assert [p.name for p in tmp_path.iterdir()] == ["x.csv"] and (tmp_path / "x.csv").read_text() == "a\n"
