"""DuckDB names files by URI from what the log says (`KnownFiles`): a view over a list of parts
is made by opening the first one only, the others are known by their size and never asked
for, and reading the view opens each file once."""

from __future__ import annotations

import io

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from retrieval_eval.flows.storage.duckdb_filesystem import register_known_files


def parquet_bytes(values: list[int]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"i": values}), sink)
    return sink.getvalue()


def test_a_view_over_known_files_opens_the_first_file_only_and_reads_each_once_when_queried():
    parts = {"s3://bucket/wh/t/run_id=a/p1.parquet": parquet_bytes([1, 2]),
             "s3://bucket/wh/t/run_id=b/p2.parquet": parquet_bytes([3, 4, 5])}
    opened: list[str] = []

    def opener(uri: str):
        def open_it():
            opened.append(uri)
            return io.BytesIO(parts[uri])
        return open_it

    connection = duckdb.connect()
    register_known_files(connection, "s3", {uri: (len(data), opener(uri)) for uri, data in parts.items()})
    # As the catalog makes its views (DuckDB takes no parameters in CREATE VIEW): the list as a
    # literal rendered by DuckDB itself.
    connection.execute("create view t as select * from read_parquet(" + str(duckdb.ConstantExpression(list(parts))) + ")")
    assert opened == ["s3://bucket/wh/t/run_id=a/p1.parquet"]  # the schema, from the first file
    opened.clear()
    # 1 + 2 + 3 + 4 + 5 = 15 over 5 rows.
    assert connection.execute("select count(*), sum(i) from t").fetchone() == (5, 15)
    assert set(opened) == set(parts)
    view = connection.execute("select sql from duckdb_views() where view_name = 't'").fetchone()[0]
    assert all(uri in view for uri in parts)  # the view names its files by URI


def test_a_file_the_log_does_not_know_is_not_found():
    connection = duckdb.connect()
    register_known_files(connection, "s3", {})
    with pytest.raises(duckdb.IOException, match="No files found"):
        connection.execute("select * from read_parquet('s3://bucket/elsewhere.parquet')")
