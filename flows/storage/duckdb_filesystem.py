"""DuckDB over a store: its wheel carries no httpfs extension and these machines cannot
download one, so DuckDB reads and writes `s3://` paths through an fsspec filesystem
registered with the connection. That filesystem is s3fs (obstore's fsspec adapter returns
short reads to DuckDB), configured from the same chain and endpoint as the ObjectStore."""

from __future__ import annotations

import duckdb
import fsspec
import s3fs

from .errors import StoreError
from .local_store import LocalStore
from .object_store import ObjectStore


def duckdb_filesystem(store: LocalStore | ObjectStore) -> fsspec.AbstractFileSystem | None:
    """The fsspec filesystem through which DuckDB reaches `store`'s URIs (None for a local
    store: DuckDB reads local paths itself)."""
    if isinstance(store, LocalStore):
        return None
    if store.location.scheme != "s3":
        raise StoreError(f"{store}: DuckDB reaches only s3:// object stores here (gcsfs/adlfs are not installed)")
    return s3fs.S3FileSystem(endpoint_url=store.endpoint) if store.endpoint else s3fs.S3FileSystem()


def register_store(connection: duckdb.DuckDBPyConnection, store: LocalStore | ObjectStore) -> None:
    """Let `connection` read and `COPY … TO` the store's URIs (parquet, hive partitions).
    A read-only ATTACH of an `s3://…/x.duckdb` still asks for httpfs in DuckDB 2.0.1."""
    filesystem = duckdb_filesystem(store)
    if filesystem is not None:
        connection.register_filesystem(filesystem)
