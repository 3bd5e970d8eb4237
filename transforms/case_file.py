"""Reading a run's cases file with Arrow's JSON reader, in tables of whole cases.

The reader gets the schema of the fields the metrics need (`CASES_SCHEMA`) and is strict
about their types: a number where a string belongs, a string for a score, a repeated key,
malformed JSON — each stops it, and the caller (transforms/ingest.py) sends the file to
the line-by-line pass. Arrow parses 1 MiB blocks on its own threads; a thread of ours
(`ReadAhead`) keeps asking for them, so parsing goes on while a batch is evaluated.

This module imports only pyarrow and NumPy, not Polars or DuckDB: `retrieval-eval run`
starts reading its first run's file (`reading_ahead`) before it imports the engines, and
the parse fills the core that the imports leave idle (100k cases: 2.19 → 2.09 s median
over 12 runs).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from transforms.records import open_text_lines

# SPEC 3: the fields the metrics read, with their types. Any other field, at any depth, is
# parsed as JSON and dropped.
RETRIEVED_ITEM = pa.struct([("id", pa.string()), ("parent_id", pa.string()), ("score", pa.float64())])
CASES_SCHEMA = pa.schema(
    [
        ("case_id", pa.string()),
        ("locale", pa.string()),
        ("category", pa.string()),
        ("must_cite_one_of", pa.list_(pa.string())),
        ("relevant_ids", pa.list_(pa.string())),
        ("retrieved_context", pa.list_(RETRIEVED_ITEM)),
    ]
)
# The reader parses blocks of this many bytes in parallel (1 MiB measured fastest: 256 KiB
# to 4 MiB are within 10%). A record longer than a block stops the fast path; the
# line-by-line pass then reads the valid lines again with blocks as long as the longest.
BLOCK_BYTES = 1 << 20
# Arrow batches (a block, 1 MiB of JSON, each) parsed ahead of the evaluation: about
# 100 MB of Arrow arrays at most.
READ_AHEAD_BATCHES = 512
JSON_WHITESPACE = b" \t\r\n"


class NotClean(Exception):
    """The fast pass cannot take these records (a record breaks a rule, or Arrow's reader
    refuses the file): the line-by-line pass decides."""


class Stopped(Exception):
    """The pass was stopped from outside, by its `stop` event (its output is dropped)."""


def first_value_opening(path: Path) -> bytes:
    """The first byte of the file's first JSON value (b"" when its first block is blank).
    Arrow's reader is only given files that open with '{': a first value of `null`
    crashes it (pyarrow 26), anything else it refuses anyway."""
    with open_text_lines(path) as stream:
        return stream.read(BLOCK_BYTES).lstrip(JSON_WHITESPACE)[:1]


def read_cases(path: Path, block_bytes: int) -> pa.RecordBatchReader:
    """Arrow's streaming JSON reader over `path` (gzip by its suffix). It parses blocks on
    Arrow's threads, but only a block or two ahead of its caller (see `ReadAhead`)."""
    source = pa.input_stream(str(path), compression="gzip" if path.suffix == ".gz" else None)
    return pa_json.open_json(
        source,
        read_options=pa_json.ReadOptions(block_size=block_bytes),
        parse_options=pa_json.ParseOptions(explicit_schema=CASES_SCHEMA, unexpected_field_behavior="ignore"),
    )


class ReadAhead:
    """A cases file's Arrow batches, parsed from the moment this is made, on a thread of
    its own, up to READ_AHEAD_BATCHES ahead of whoever iterates. Arrow's reader parses only
    a block or two ahead, so without it the parse waits while a batch is evaluated (100k
    cases: 2.8 → 2.55 s for the whole run). Whatever stops the read is raised where the
    batches are taken: as NotClean when the fast pass cannot take the file (its first value
    is not an object, Arrow refuses it), as it is otherwise (an unreadable or truncated
    file)."""

    def __init__(self, path: Path, block_bytes: int) -> None:
        self._handed: queue.Queue = queue.Queue(READ_AHEAD_BATCHES)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(path, block_bytes), name="read-ahead", daemon=True)
        self._thread.start()

    def _offer(self, item: object) -> bool:
        while not self._done.is_set():
            try:
                self._handed.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, path: Path, block_bytes: int) -> None:
        try:
            opening = first_value_opening(path)
            if opening not in (b"", b"{"):
                raise NotClean("the first value is not an object")  # never given to Arrow's reader
            if opening == b"{":
                reader = read_cases(path, block_bytes)
                while (batch := _next_batch(reader)) is not None:
                    if not self._offer(batch):
                        return
            self._offer(None)
        except (pa.ArrowInvalid, UnicodeDecodeError) as error:
            # Arrow's refusals (malformed JSON, a wrong type, a repeated key, a record longer
            # than a block) mean records the fast pass cannot take. pyarrow raises
            # UnicodeDecodeError when its message quotes invalid UTF-8.
            self._offer(NotClean(str(error)))
        except Exception as error:  # noqa: BLE001 — any other error is raised again where the batches are taken
            self._offer(error)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            while (item := self._handed.get()) is not None:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Stop reading (a batch being parsed is finished first) and drop what was read."""
        self._done.set()
        self._thread.join()


def _next_batch(reader: pa.RecordBatchReader) -> pa.RecordBatch | None:
    """The next batch, or None at the end."""
    try:
        return reader.read_next_batch()
    except StopIteration:
        return None


# Reads started by `reading_ahead`, by (resolved path, block bytes), until `batches` takes
# them over.
_started: dict[tuple[Path, int], ReadAhead] = {}


@contextmanager
def reading_ahead(path: Path | None) -> Iterator[None]:
    """Start reading `path` now, before anything asks for it: the first `batches` of that
    file inside the block takes the read over, and a read not taken by the end of the
    block is stopped (also by `discard`, as soon as the caller knows it is not needed)."""
    if path is None:
        yield
        return
    discard(path)  # one read per file: an earlier one not taken over is stopped
    _started[(path.resolve(), BLOCK_BYTES)] = ReadAhead(path, BLOCK_BYTES)
    try:
        yield
    finally:
        discard(path)


def discard(path: Path) -> None:
    """Stop a read of `path` started by `reading_ahead` and not taken over (if any)."""
    started = _started.pop((path.resolve(), BLOCK_BYTES), None)
    if started is not None:
        started.close()


def _read(path: Path, block_bytes: int) -> ReadAhead:
    return _started.pop((path.resolve(), block_bytes), None) or ReadAhead(path, block_bytes)


def _int32_values(array: pa.Int32Array) -> np.ndarray:
    """The values of an Int32Array without nulls, as a NumPy view of its buffer. pyarrow's
    own `to_numpy()` imports pandas when pandas is installed: 0.17-0.26 s on the first call,
    which stalled the first batch of every run."""
    return np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array), offset=array.offset * 4)


def batches(path: Path, block_bytes: int, batch_items: int, stop: threading.Event) -> Iterator[pa.Table]:
    """Tables of whole cases holding `batch_items` retrieved items (the last one fewer); a
    file without records (the clean copy of a run whose every record was rejected) gives
    one empty table, so that every table of the run gets its (empty) part. Raises NotClean
    when Arrow's reader cannot take the file, Stopped when `stop` is set."""
    pending: list[pa.RecordBatch] = []
    n_items = 0
    n_tables = 0
    for batch in _read(path, block_bytes):
        if stop.is_set():
            raise Stopped
        while batch.num_rows:
            offsets = batch.column("retrieved_context").offsets  # items before each case, and the end
            batch_size = offsets[-1].as_py() - offsets[0].as_py()
            if n_items + batch_size < batch_items:  # all of it fits
                pending.append(batch)
                n_items += batch_size
                break
            # Cut where the running total reaches batch_items.
            before = _int32_values(offsets) - offsets[0].as_py()
            cut = max(1, int(np.searchsorted(before, batch_items - n_items, side="left")))
            pending.append(batch.slice(0, cut))
            yield pa.Table.from_batches(pending)
            n_tables += 1
            pending, n_items = [], 0
            batch = batch.slice(cut)
    if pending:
        yield pa.Table.from_batches(pending)
    elif not n_tables:
        yield CASES_SCHEMA.empty_table()
