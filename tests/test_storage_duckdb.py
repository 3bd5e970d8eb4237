"""DuckDB reaches a bucket with no extension download: Parquet written (`write_parquet`, a `COPY … TO`)
(whole and hive-partitioned) and read back through the fsspec filesystem registered for the
store."""

from __future__ import annotations

import duckdb
from retrieval_eval.flows.storage import LocalStore, open_store
from retrieval_eval.flows.storage.duckdb_filesystem import duckdb_filesystem, register_store


def test_duckdb_copies_to_and_reads_parquet_on_s3(s3_bucket):
    store, prefix = open_store(f"s3://{s3_bucket}/wh")
    connection = duckdb.connect()
    register_store(connection, store)
    target = f"s3://{s3_bucket}/{prefix}/parts"
    rows = connection.sql("select range as i, range % 3 as p from range(1000)")
    rows.write_parquet(f"{target}/all.parquet")
    rows.write_parquet(f"{target}/hive", partition_by=["p"], overwrite=True)
    # 0 + 1 + … + 999 = 499,500; p = 0 holds i = 0, 3, …, 999: 334 rows.
    assert connection.execute("select count(*), sum(i) from read_parquet(?)", [f"{target}/all.parquet"]).fetchone() == (1000, 499500)
    assert connection.execute("select p, count(*) from read_parquet(?, hive_partitioning = true) group by p order by p",
                              [f"{target}/hive/*/*.parquet"]).fetchall() == [(0, 334), (1, 333), (2, 333)]
    assert {info.key.rsplit("/", 1)[0] for info in store.list(f"{prefix}/parts/hive")} == {
        f"{prefix}/parts/hive/p=0", f"{prefix}/parts/hive/p=1", f"{prefix}/parts/hive/p=2"}
    installed = connection.execute("select extension_name from duckdb_extensions() where installed").fetchall()
    assert ("httpfs",) not in installed


def test_a_local_store_needs_no_filesystem(tmp_path):
    assert duckdb_filesystem(LocalStore(tmp_path)) is None
