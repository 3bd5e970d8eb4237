"""The source seam (flows/sources/source.py): run folders and TREC runs are `RunSource`s found
by format name (an unknown name is bad input naming the formats); run folders are discovered,
fingerprinted, copied and cut into line-aligned byte ranges alike on local disk and on a real
S3 API on loopback (tests/s3_server.py)."""

from __future__ import annotations

import gzip
import json
import os

import pytest
from builders import case, chunk, write_run
from retrieval_eval.flows.sources.artifacts import load_run_folders
from retrieval_eval.flows.sources.source import ENTRY_POINT_GROUP, RunSource, source_format
from retrieval_eval.flows.sources.stored_file import StoredFile
from retrieval_eval.flows.storage import open_store
from retrieval_eval.transforms.errors import InputError


def runs_root(tmp_path, n_cases: int = 40):
    """A runs root of two runs whose cases lines differ in length (ids of 1 to 3 digits)."""
    root = tmp_path / "runs"
    for run_id in ("run-a", "run-b"):
        cases = [case(f"c{i}", [chunk(f"card-{i}::00"), chunk("card-x" * (i % 7))], [f"card-{i}"]) for i in range(n_cases)]
        write_run(root, run_id, cases)
    return root


@pytest.fixture(params=["local", "s3"])
def stored_runs(request, tmp_path) -> str:
    """The runs root of `runs_root`, as a local path or as the same files in a bucket."""
    root = runs_root(tmp_path)
    if request.param == "local":
        return str(root)
    bucket = request.getfixturevalue("s3_bucket")
    store, prefix = open_store(f"s3://{bucket}/runs")
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        store.put(f"{prefix}/{path.relative_to(root).as_posix()}", path)
    return f"s3://{bucket}/runs"


def test_an_unregistered_format_is_bad_input_naming_the_formats_there_are():
    with pytest.raises(InputError) as refused:
        source_format("no-such-format")
    message = str(refused.value)
    assert "'no-such-format'" in message and "native" in message and "trec" in message
    assert ENTRY_POINT_GROUP in message


def test_run_folders_and_trec_runs_are_run_sources(tmp_path):
    (tmp_path / "bm25.run").write_text("q1 Q0 d1 1 2.0 t\n")
    (tmp_path / "qrels").write_text("q1 0 d1 1\n")
    folders = source_format("native")(runs_root(tmp_path), top_k=10)
    (trec,) = source_format("trec")(tmp_path / "bm25.run", qrels=tmp_path / "qrels", top_k=10)
    assert [folder.run_id for folder in folders] == ["run-a", "run-b"]
    assert trec.run_id == "bm25" and trec.manifest.retrieval_top_k == 10
    assert all(isinstance(source, RunSource) for source in [*folders, trec])


def test_run_folders_are_found_alike_on_disk_and_in_a_bucket(stored_runs):
    folders = load_run_folders(stored_runs)
    assert [folder.run_id for folder in folders] == ["run-a", "run-b"]
    assert [folder.cases_uri for folder in folders] == [f"{stored_runs}/{r}/cases.jsonl" for r in ("run-a", "run-b")]
    assert [folder.run_id for folder in load_run_folders(f"{stored_runs}/run-b")] == ["run-b"]


def test_a_local_fingerprint_is_size_mtime_inode_and_ctime_and_a_remote_one_size_and_etag(stored_runs):
    folder = load_run_folders(stored_runs)[0]
    manifest, cases = folder.fingerprint()
    if folder.cases.is_local:
        st = os.stat(folder.cases_uri)
        assert cases == [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
    else:
        store, key = open_store(folder.cases_uri)
        info = store.head(key)
        assert cases[:2] == [info.size, info.etag] and info.etag
        store.put(key, store.get(key) + b"\n", overwrite=True)  # other bytes: another etag
        assert load_run_folders(stored_runs)[0].fingerprint()[1] != cases
    assert manifest != cases


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000])
def test_byte_ranges_start_at_line_starts_and_cover_every_byte_once(stored_runs, tmp_path, n):
    folder = load_run_folders(stored_runs)[0]
    data = folder.local_cases_file(tmp_path / "copies").read_bytes()
    ranges = folder.byte_ranges(n)
    assert 1 <= len(ranges) <= n
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(end == next_start for (_, end), (next_start, _) in zip(ranges, ranges[1:]))
    assert all(data[start - 1:start] == b"\n" for start, _ in ranges[1:])
    assert b"".join(data[start:end] for start, end in ranges) == data
    if n == 3:  # 40 lines cut in three: each range holds whole lines, about a third each
        assert len(ranges) == 3
        assert all(len(data[start:end].splitlines()) >= 10 for start, end in ranges)


def test_a_gz_cases_file_is_one_range(tmp_path):
    root = runs_root(tmp_path)
    plain = root / "run-a" / "cases.jsonl"
    (root / "run-a" / "cases.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    folder = load_run_folders(root / "run-a")[0]
    assert folder.byte_ranges(4) == [(0, folder.cases_size())]


def test_a_remote_cases_file_is_copied_with_its_bytes_and_a_local_one_is_read_where_it_is(stored_runs, tmp_path):
    folder = load_run_folders(stored_runs)[0]
    copy = folder.local_cases_file(tmp_path / "copies")
    if folder.cases.is_local:
        assert str(copy) == folder.cases_uri
    else:
        assert copy.is_relative_to(tmp_path / "copies") and copy.name == "cases.jsonl"
        store, key = open_store(folder.cases_uri)
        assert copy.read_bytes() == store.get(key)


def test_a_bucket_folder_without_a_manifest_or_with_both_cases_files_is_refused_naming_it(s3_bucket):
    store, prefix = open_store(f"s3://{s3_bucket}/runs")
    store.put(f"{prefix}/run-a/cases.jsonl", b"{}\n")
    with pytest.raises(InputError, match=f"s3://{s3_bucket}/runs/run-a/manifest.json: missing"):
        load_run_folders(f"s3://{s3_bucket}/runs")
    manifest = {"run_id": "run-a", "created_at": "2026-11-02T00:00:00Z", "retrieval_top_k": 4}
    store.put(f"{prefix}/run-a/manifest.json", json.dumps(manifest).encode())
    store.put(f"{prefix}/run-a/cases.jsonl.gz", gzip.compress(b"{}\n"))
    store.put(f"{prefix}/.hidden/notes.txt", b"not a run")
    with pytest.raises(InputError, match=f"s3://{s3_bucket}/runs/run-a: holds both cases.jsonl and cases.jsonl.gz"):
        load_run_folders(f"s3://{s3_bucket}/runs")
    store.delete(f"{prefix}/run-a/cases.jsonl.gz")
    assert [folder.run_id for folder in load_run_folders(f"s3://{s3_bucket}/runs")] == ["run-a"]


def test_a_location_with_credentials_is_refused_before_any_request():
    with pytest.raises(InputError, match="user information"):
        StoredFile.at("s3://key:secret@bucket/runs/cases.jsonl")
