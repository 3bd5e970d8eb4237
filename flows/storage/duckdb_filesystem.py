"""DuckDB naming files by URI without asking the bucket: its wheel carries no httpfs extension
(these machines cannot download one), and a real fsspec filesystem (s3fs) would ask the store
for every file of a `read_parquet` list as a view is made (one HEAD per part: 1,800 for a
warehouse of 300 runs). `KnownFiles` answers DuckDB from what the transaction log already
says (each file's size) and opens a file only when DuckDB reads it (the first file of a list,
for its schema), from a local copy.

The views it makes name their files by URI: a reader with httpfs (or its own fsspec
filesystem) reads them from the bucket."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import BinaryIO

import duckdb
import fsspec

# The modification time DuckDB is told (it asks, and caches nothing by it here).
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class KnownFiles(fsspec.AbstractFileSystem):
    """A read-only fsspec filesystem over a fixed set of files: URI → (size, opener), where
    `opener()` returns a seekable binary reader of the file's bytes. Nothing else exists."""

    def __init__(self, scheme: str, files: Mapping[str, tuple[int, Callable[[], BinaryIO]]]) -> None:
        super().__init__()
        self.protocol = scheme
        self._files = {self._strip_protocol(uri): entry for uri, entry in files.items()}

    def _known(self, path: str) -> tuple[str, tuple[int, Callable[[], BinaryIO]]]:
        key = self._strip_protocol(path)
        if key not in self._files:
            raise FileNotFoundError(path)
        return key, self._files[key]

    def glob(self, path: str, **kwargs) -> list[str]:
        key = self._strip_protocol(path)
        return [key] if key in self._files else []

    def info(self, path: str, **kwargs) -> dict:
        key, (size, _) = self._known(path)
        return {"name": key, "size": size, "type": "file"}

    def modified(self, path: str) -> datetime.datetime:
        self._known(path)
        return _EPOCH

    def _open(self, path: str, mode: str = "rb", **kwargs) -> BinaryIO:
        if mode != "rb":
            raise PermissionError(f"{path}: read only")
        _, (_, opener) = self._known(path)
        return opener()


def register_known_files(connection: duckdb.DuckDBPyConnection, scheme: str,
                         files: Mapping[str, tuple[int, Callable[[], BinaryIO]]]) -> None:
    """Let `connection` name `files` (URI → size, opener) in `read_parquet` (see KnownFiles)."""
    connection.register_filesystem(KnownFiles(scheme, files))
