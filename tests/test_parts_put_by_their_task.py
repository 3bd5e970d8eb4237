"""A part of a warehouse in a bucket is put under its fresh key by the step that wrote it
(flows/job/run_steps.py `TxnRef.write_part`), from that process's own work folder, and only
its description travels: the commit puts none again, and a transaction that ends without
committing removes it from the bucket."""

from __future__ import annotations

from collections import Counter

import polars as pl
from retrieval_eval.flows.job.run_steps import TxnRef, bucket_warehouse
from retrieval_eval.flows.storage.cache import cache_folder
from retrieval_eval.flows.warehouse.warehouse import RunCommit, Warehouse


class CountingPuts:
    """A store that counts its `put` requests by key."""

    def __init__(self, store):
        self.inner, self.puts = store, Counter()

    def put(self, key: str, data, *, overwrite: bool = False, checksum: str | None = None) -> str:
        self.puts[key] += 1
        return self.inner.put(key, data, overwrite=overwrite, checksum=checksum)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_part_is_in_the_bucket_once_written_and_committed_without_a_second_put(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    uri = f"s3://{s3_bucket}/wh"
    warehouse = Warehouse(uri)
    # Every put of this process counted: the committer's and the task's (its client, run_steps.py).
    counting = CountingPuts(warehouse.store)
    monkeypatch.setattr(warehouse, "store", counting)
    monkeypatch.setattr(bucket_warehouse(uri), "store", counting)
    with warehouse.transaction() as txn:
        txn.plan(["run-a"])
        ref = TxnRef(warehouse.root, txn.id, frozenset(["run-a"]), uri)
        parts = [ref.write_part(pl.DataFrame({"run_id": ["run-a"], "n": [3]}), "runs", "run-a"),
                 ref.write_part(pl.DataFrame({"run_id": ["run-a"], "case_id": ["c1"]}), "cases", "run-a")]
        keys = [warehouse.key(part.path) for part in parts]
        assert {key: counting.puts[key] for key in keys} == dict.fromkeys(keys, 1)  # put before any commit
        part = parts[0]
        assert not (warehouse.root / part.path).exists()  # nothing left staged for the commit to put
        assert (cache_folder() / part.blake3[:2] / part.blake3).is_file()  # kept for this machine's readers
        state = txn.commit({"run-a": RunCommit({"runs": [parts[0]], "cases": [parts[1]]}, None, None)})
    assert {key: counting.puts[key] for key in keys} == dict.fromkeys(keys, 1)  # the commit put none again
    assert not [key for key in counting.puts if key.endswith(".parquet") and key not in keys]
    assert state.runs["run-a"].tables["runs"] == [part]
    assert pl.read_parquet(Warehouse(uri).part_file(part)).rows() == [("run-a", 3)]


def test_a_part_of_a_transaction_that_does_not_commit_leaves_the_bucket(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    uri = f"s3://{s3_bucket}/wh"
    warehouse = Warehouse(uri)
    with warehouse.transaction() as txn:
        txn.plan(["run-a"])
        part = TxnRef(warehouse.root, txn.id, frozenset(["run-a"]), uri).write_part(
            pl.DataFrame({"n": [1]}), "cases", "run-a")
        assert warehouse.store.exists(warehouse.key(part.path))
    assert not warehouse.store.exists(warehouse.key(part.path))
    assert list(Warehouse(uri).part_paths()) == []
