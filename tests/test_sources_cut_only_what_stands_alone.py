"""The job cuts a run into byte ranges through the source seam alone (flows/sources/source.py
`RunSource`, flows/job/byte_range_steps.py), never by asking what kind of source it holds: a
run folder's cases file is cut into ranges of whole lines, each copied from the store with
`copy_range`; a TREC run and another tool's export, whose parts are no runs of their own, are
one range (the job then reads them whole). What the job compares with the committed digest
(`RunSource.digest`, one pass over the stored bytes) is the digest the source's own ingest
records. Each on local disk and on a real S3 API on loopback (tests/s3_server.py)."""

from __future__ import annotations

import shutil

import pytest
from builders import case, chunk, write_run
from retrieval_eval.flows.job.byte_range_steps import byte_ranges
from retrieval_eval.flows.job.plan import RunPlan
from retrieval_eval.flows.sources.source import RunSource, source_format
from retrieval_eval.flows.storage import open_store
from test_source_formats_reference import FIXTURES

# A TREC run of 40 topics, 2 lines each, and qrels judging every topic.
TREC_RUN = "".join(f"q{i} Q0 d{i} 1 2.0 bm25\nq{i} Q0 x{i} 2 1.0 bm25\n" for i in range(40))
QRELS = "".join(f"q{i} 0 d{i} 1\n" for i in range(40))


@pytest.fixture(params=["local", "s3"])
def inputs(request, tmp_path) -> str:
    """A folder holding a runs root (`runs/run-a`: 40 cases, one per line), a TREC run with its
    qrels, and ranx's fixture run (another tool's format) with its qrels: locally, or the same
    files in a bucket."""
    folder = tmp_path / "inputs"
    write_run(folder / "runs", "run-a", [case(f"c{i}", [chunk(f"card-{i}::00"), chunk("card-x")], [f"card-{i}"])
                                         for i in range(40)])
    (folder / "trec").mkdir()
    (folder / "trec" / "bm25.run").write_text(TREC_RUN)
    (folder / "trec" / "qrels.txt").write_text(QRELS)
    shutil.copytree(FIXTURES / "ranx", folder / "ranx")
    if request.param == "local":
        return str(folder)
    store, prefix = open_store(f"s3://{request.getfixturevalue('s3_bucket')}/inputs")
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        store.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path)
    return f"s3://{request.getfixturevalue('s3_bucket')}/inputs"


def sources(location: str) -> dict[str, RunSource]:
    (folder,) = source_format("native")(f"{location}/runs", top_k=4)
    (trec,) = source_format("trec")(f"{location}/trec/bm25.run", qrels=f"{location}/trec/qrels.txt", top_k=4)
    (ranx,) = source_format("ranx")(f"{location}/ranx/run.trec", qrels=f"{location}/ranx/qrels.trec", top_k=4)
    return {"run folder": folder, "trec": trec, "ranx": ranx}


def plan_of(source: RunSource) -> RunPlan:
    """A plan that evaluates `source` (nothing committed): all the job's cutting reads of it."""
    return RunPlan(source, 4, [4], 1, True, source.fingerprint(), "", None, None, None)


def test_only_a_cases_file_is_cut_and_its_ranges_copied_from_the_store_join_into_its_bytes(inputs, tmp_path):
    found = sources(inputs)
    # One item a batch: the job asks each source for as many ranges as it has lines or more.
    ranges = {name: byte_ranges(plan_of(source), batch_items=1) for name, source in found.items()}
    folder = found["run folder"]
    whole = folder.local_cases_file(tmp_path / "whole").read_bytes()
    assert len(ranges["run folder"]) > 1
    copied = [folder.copy_range(r.start, r.end, tmp_path / "ranges").read_bytes() for r in ranges["run folder"]]
    assert b"".join(copied) == whole and all(part.endswith(b"\n") for part in copied)
    for name in ("trec", "ranx"):
        size = found[name].cases_size()
        assert [(r.start, r.end) for r in ranges[name]] == [(0, size)], name
        assert found[name].byte_ranges(8) == [(0, size)], name
    assert len(TREC_RUN.encode()) == found["trec"].cases_size()


def test_each_sources_digest_is_the_one_its_ingest_records(inputs, tmp_path):
    for name, source in sources(inputs).items():
        ingest = source.ingest(tmp_path / "scratch" / name, allow_rejects=True, relevance_level=1, batch_items=1000,
                               committed_digest=None)
        for _ in ingest.batches():
            pass
        assert source.digest() == ingest.account.facts.digest, name
    # The TREC run's digest is of both files (trec_files.py `artifacts_digest`): other qrels, another digest.
    trec = sources(inputs)["trec"]
    before = trec.digest()
    store, key = open_store(f"{inputs}/trec/qrels.txt")
    store.put(key, (QRELS + "q0 0 x0 1\n").encode(), overwrite=True)
    assert sources(inputs)["trec"].digest() != before
