"""The engines' set-up and output: DuckDB connections with threads and memory capped per
worker, and Parquet files written so that a failed write says why."""

from __future__ import annotations

import errno
import io
import os
import re
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

import duckdb
import polars as pl
import pyarrow.parquet as pq
from blake3 import blake3

from .warehouse import PartFile, columns_digest

# Caps for one worker; a Dask worker sets these to its own share of the machine.
THREADS_ENV = "RETRIEVAL_EVAL_THREADS"
MEMORY_ENV = "RETRIEVAL_EVAL_MEMORY_LIMIT"
DEFAULT_MEMORY_LIMIT = "1500MB"

In = TypeVar("In")
Out = TypeVar("Out")


def connect(spill_dir: Path | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that spills to `spill_dir` rather than exceed the memory cap."""
    con = duckdb.connect(
        config={
            "memory_limit": os.environ.get(MEMORY_ENV, DEFAULT_MEMORY_LIMIT),
            # Arrow string views are Polars' own string layout: results reach Polars
            # without a copy of every string (measured 0.08 s less per 100k cases).
            "produce_arrow_string_view": True,
        }
    )
    threads = os.environ.get(THREADS_ENV)
    if threads:
        con.execute("set threads = $n", {"n": int(threads)})
    if spill_dir is not None:
        con.execute("set temp_directory = $dir", {"dir": str(spill_dir)})
    return con


class _HashingFile(io.RawIOBase):
    """A file being written whose bytes are hashed on the way (no second read to digest it)."""

    def __init__(self, handle: io.BufferedWriter) -> None:
        self._handle = handle
        self.digest = blake3()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        written = self._handle.write(data)
        self.digest.update(data)
        self.size += written
        return written


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
        hashing = _HashingFile(handle)
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


class _OutputFile(io.RawIOBase):
    """The bytes of an output file, whose failed write or close (a full disk, /dev/full, an
    I/O error) is named by the path the user gave, not by a file beside it or by none."""

    def __init__(self, path: Path, shown: Path) -> None:
        self._shown = shown
        self._file = None
        try:
            # A descriptor of this process (/dev/stdout, /dev/fd/N) is written where it stands:
            # opening its path again would truncate a file it appends to (`>> log`).
            descriptor = own_descriptor(path)
            self._file = io.FileIO(path, "w") if descriptor is None else io.FileIO(os.dup(descriptor), "w")
        except OSError as error:  # a folder that refuses a new file, a device that refuses writes
            raise self._named(error) from error

    def writable(self) -> bool:
        return True

    # No fileno(): a writer handed one (Polars' CSV writer) writes to it past `write`, and says
    # a failure without the path.

    def write(self, data) -> int:
        try:
            return self._file.write(data)
        except OSError as error:
            raise self._named(error) from error

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._file is not None:
                self._file.close()
        except OSError as error:
            raise self._named(error) from error
        finally:
            super().close()

    def _named(self, error: OSError) -> OSError:
        return OSError(error.errno, error.strerror, str(self._shown))


MAX_LINKS = 40  # Linux's own limit on the links one path may pass through
OWN_DESCRIPTOR = re.compile(r"/proc/(?:self|thread-self|(\d+))/fd/(\d+)")


def _link_end(path: Path) -> Path:
    """Where the symbolic links of `path` lead, followed one at a time, stopping at the first
    hop into /proc (whose links name open files, not paths to write through)."""
    hop = Path(os.path.abspath(path))
    for _ in range(MAX_LINKS):
        hop = Path(os.path.realpath(hop.parent)) / hop.name
        if hop.is_relative_to("/proc") or not hop.is_symlink():
            return hop
        hop = Path(os.path.abspath(hop.parent / os.readlink(hop)))
    raise OSError(errno.ELOOP, "too many levels of symbolic links", str(path))


def replaced_file(path: Path) -> Path | None:
    """The regular file that writing `path` replaces: `path` itself, or the file its symbolic
    links lead to (written there, so the links stay links). None when `path` is written
    directly: a device (/dev/null, /dev/full), a FIFO, or a path that leads through /proc
    (/dev/stdout, /dev/fd/N), whose bytes belong to an open file of this process."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
    except FileNotFoundError:
        pass  # a new file, or a link to one
    end = _link_end(path)
    return None if end.is_relative_to("/proc") else end


def own_descriptor(path: Path) -> int | None:
    """The open descriptor of this process that `path` names (/dev/stdout, /dev/fd/1,
    /proc/self/fd/1), or None."""
    named = OWN_DESCRIPTOR.fullmatch(str(_link_end(path)))
    if named is None or (named.group(1) is not None and int(named.group(1)) != os.getpid()):
        return None
    return int(named.group(2))


@contextmanager
def written_aside(path: Path, *, binary: bool = False) -> Iterator[IO]:
    """A handle on the file `path` names (every `--out` and the report's files). A regular
    file (or the one a symbolic link leads to) is written beside itself and moved into place
    once the block ends well, so nothing half-written (an interrupt, a full disk) is ever seen
    there; a device, a FIFO or /dev/stdout is written directly, never replaced. A folder at
    `path`, a missing folder to put it in, and a failed write are named as the path given."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder; give a file's path", str(path))
    if not path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(path.parent))
    target = replaced_file(path)
    if target is None:
        with _opened(path, path, binary) as handle:
            yield handle
        return
    if not target.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(target.parent))
    aside = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with _opened(aside, path, binary) as handle:
            yield handle
        if target.exists():
            os.chmod(aside, stat.S_IMODE(target.stat().st_mode))  # the file it replaces keeps its mode
        os.replace(aside, target)
    finally:
        aside.unlink(missing_ok=True)


def _opened(path: Path, shown: Path, binary: bool) -> IO:
    buffered = io.BufferedWriter(_OutputFile(path, shown))
    if binary:
        return buffered
    return io.TextIOWrapper(buffered, encoding="utf-8", newline="\n")


def ordered_map(fn: Callable[[In], Out], items: Iterable[In], *, workers: int = 2) -> Iterator[Out]:
    """`map(fn, items)` on `workers` threads, in order, at most `workers` + 1 results made
    ahead of the one taken (the report's explorer JSON: Polars writes each chunk without the
    GIL while the one before is written to the file). Stopping early cancels what is queued."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ordered-map") as pool:
        pending: deque = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) > workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
