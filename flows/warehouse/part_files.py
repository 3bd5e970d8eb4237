"""A warehouse part written: a frame as a Parquet file, hashed as it is written and flushed to
disk, returned as the record its commit holds."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from ..storage.hashing import HashingStream
from .warehouse import PartFile, columns_digest


def write_parquet(
    frame: pl.DataFrame,
    path: Path,
    root: Path,
    compression: str = "zstd",
    statistics: bool = True,
    dictionary: bool | list[str] = True,
) -> PartFile:
    """Write `frame` to `path` (under the warehouse `root`) with Arrow's Parquet writer, flushed
    to disk; returns its record for the log. A failed write (a full disk) raises the OSError
    itself. `dictionary` names the columns worth dictionary-encoding (all by default): for the
    `retrieved` table, only its repeated ids (Polars' writer tries a dictionary for every
    string column and reported a full disk as an error that had lost the OSError)."""
    # Polars' own string layout (Arrow string views) goes to the writer as it is (the
    # conversion to large strings copied every string), except under a list or struct,
    # where Arrow's Parquet writer refuses views (pyarrow 26: "Slicing not implemented").
    nested = any(dtype.is_nested() for dtype in frame.dtypes)
    table = frame.to_arrow(compat_level=pl.CompatLevel.oldest() if nested else pl.CompatLevel.newest())
    with open(path, "wb") as handle:
        hashing = HashingStream(handle)
        pq.write_table(
            table,
            hashing,
            compression=compression,
            write_statistics=statistics,
            use_dictionary=dictionary,
        )
        handle.flush()
        os.fsync(handle.fileno())
    return PartFile(str(path.relative_to(root)), hashing.size, frame.height, hashing.digest.hexdigest(),
                    path.stat().st_mtime_ns, columns_digest(table.schema))
