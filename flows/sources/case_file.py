"""One read of a run's cases file, in tables of whole cases, and beside it the file's facts
(its content digest and, for Arrow's reader, its line shape and what JSON forbids but Arrow
takes).

Two parsers, both strict about the types of the fields the metrics need
(transforms/case_schema.py `CASES_SCHEMA`): a number where a string belongs, a string for a
score, a repeated key, malformed JSON — each stops the read, and ingest (flows/sources/ingest.py)
sends the file to the line-by-line rules.
- The strict parser (flows/sources/_case_columns.c) reads a plain file in blocks of whole lines on a
  thread per core but one (flows/sources/strict_read.py, which imports no Arrow: `retrieval-eval
  run` starts its first run's read before it imports Arrow and the engines), and holds every
  line to one clean JSON record itself, so the facts are only the digest, taken of the bytes
  on their way to the parser. It costs half of Arrow's CPU (benchmarks/README.md). Its columns
  are made Arrow tables here.
- Arrow's JSON reader reads a .gz, the line-by-line pass's clean copy, and every file where
  the parser was not compiled. It takes JSON values wherever they stand and some of what JSON
  forbids, so its facts count lines and look for that, on a pass of their own.
A thread of ours keeps each parser asking for blocks, so parsing goes on while a batch is
evaluated. An object in a bucket (flows/sources/stored_file.py) is taken by the strict parser
from memory as it arrives (`StreamedObject`); Arrow's reader reads a local copy once it is
whole (`Download`). Either way its digest is the one the copy computed on the way.

This module imports pyarrow, NumPy and BLAKE3, not Polars or DuckDB.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
from blake3 import blake3

from ...transforms.case_schema import CASES_SCHEMA, RETRIEVED_ITEM
from ...transforms.errors import NotClean
from ...transforms.records import MAX_RECORD_BYTES
from .stored_file import Download, Stopped, StreamedObject
from .strict_read import READ_AHEAD_BYTES, READ_AHEAD_COLUMN_BYTES, Handoff, StrictParse, parser_compiled

# The reader parses blocks of this many bytes in parallel (1 MiB measured fastest). A record
# longer than a block stops the fast path; the line-by-line pass then reads the valid lines
# again with blocks as long as the longest.
BLOCK_BYTES = 1 << 20
# A table holds at most this many cases, however few items they retrieved: records without
# items (or a file of `{}` lines on its way to the line-by-line rules) stay within a batch's memory.
MAX_TABLE_CASES = 100_000
JSON_WHITESPACE = b" \t\r\n"
NEWLINE, OPEN_BRACE = ord("\n"), ord("{")
# Tokens Arrow's reader takes as numbers and JSON does not (SPEC 6: the line is not JSON).
NON_JSON_NUMBERS = (b"NaN", b"Infinity")
TOKEN_OVERLAP = max(map(len, NON_JSON_NUMBERS)) - 1
# Hits of one byte in a block that `find` takes one by one before one NumPy pass takes them all
# (each find costs about a thousandth of a pass over a MiB block).
FIND_BUDGET = 1024


def open_text_lines(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed when it is a .gz."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


@dataclass(frozen=True)
class FileFacts:
    """What one pass over a cases file tells. Arrow's reader takes JSON values wherever they
    stand, so its reading holds only when every line is one record (as many records as
    lines, every line opening with '{'), and when the file holds nothing JSON forbids that
    Arrow takes (NaN, Infinity, invalid UTF-8). Otherwise the line-by-line rules judge. The
    strict parser refuses all of that itself: its facts count nothing (lines None)."""

    digest: str  # BLAKE3 of the file's bytes as stored
    lines: int | None
    object_lines: int | None
    json_only: bool  # no NaN / Infinity token and valid UTF-8 throughout

    def fast_read_holds(self, n_records: int) -> bool:
        if self.lines is None:  # read by the strict parser, which stops at any line it cannot take
            return True
        return self.json_only and n_records == self.lines == self.object_lines


def _character_bytes(first: int) -> int:
    """How many bytes the UTF-8 character opening with byte `first` takes (4 for a byte that
    opens none: the validation then refuses it)."""
    return 1 if first < 0x80 else 2 if first >> 5 == 0b110 else 3 if first >> 4 == 0b1110 else 4


def _complete_prefix(data: bytes | memoryview) -> int:
    """Where a character cut off by the end of `data` starts (len(data) when none is)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte & 0xC0 != 0x80:  # ASCII or the first byte of a character
            return n - back if _character_bytes(byte) > back else n
    return n


def _valid_utf8(data: bytes | memoryview) -> bool:
    """Arrow's UTF-8 validation (vectorised, without the GIL) of whole characters, on the
    bytes in place (a full validation of a one-string array: no copy, and no import of
    pyarrow.compute, which a cast would cost every command that reads a file: 0.1 s)."""
    offsets = pa.py_buffer(b"\x00\x00\x00\x00" + len(data).to_bytes(4, "little"))
    try:
        pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(data)]).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _positions(block: bytes, byte: int, end: int) -> np.ndarray:
    """Where `byte` occurs in block[:end], ascending. `bytes.find` (memchr) skips to each while
    they are few, as a cases file's newlines and capitals are (a few hundred a MiB); past
    FIND_BUDGET in a block, one NumPy pass over it is cheaper than more calls."""
    end = max(end, 0)  # (a negative end would count from the back, as a slice's does)
    found: list[int] = []
    at = block.find(byte, 0, end)
    while at >= 0:
        if len(found) == FIND_BUDGET:
            return np.flatnonzero(np.frombuffer(block, dtype=np.uint8, count=end) == byte)
        found.append(at)
        at = block.find(byte, at + 1, end)
    return np.array(found, dtype=np.intp)


def _holds_token(block: bytes, tokens: tuple[bytes, ...]) -> bool:
    """Whether any of `tokens` occurs in `block`: the positions of each token's first byte,
    narrowed byte by byte (a substring search of each token costs several times more)."""
    data = np.frombuffer(block, dtype=np.uint8)
    for token in tokens:
        at = _positions(block, token[0], len(block) - len(token) + 1)
        for offset in range(1, len(token)):
            if not len(at):
                break
            at = at[data[at + offset] == token[offset]]
        if len(at):
            return True
    return False


class _Scan:
    """Line starts, those at a '{', non-JSON number tokens and UTF-8 validity over a file's
    blocks in order. Each block is looked at in place (a copy of every block costs more than
    the counting); only the few bytes around a block's edges are joined to the next."""

    def __init__(self) -> None:
        self.lines = self.object_lines = 0
        self.json_only = True
        self._at_line_start = True
        self._tail = b""  # the last TOKEN_OVERLAP bytes before this block
        self._cut_character = b""  # the start of a character the last block cut off

    def update(self, block: bytes) -> None:
        if not block:
            return
        data = np.frombuffer(block, dtype=np.uint8)
        starts = _positions(block, NEWLINE, len(block) - 1) + 1  # lines that start inside this block
        self.lines += int(self._at_line_start) + len(starts)
        self.object_lines += int(self._at_line_start and data[0] == OPEN_BRACE)
        self.object_lines += int(np.count_nonzero(data[starts] == OPEN_BRACE))
        self._at_line_start = data[-1] == NEWLINE
        if self.json_only:
            junction = self._tail + block[:TOKEN_OVERLAP]
            self.json_only = not (_holds_token(junction, NON_JSON_NUMBERS) or _holds_token(block, NON_JSON_NUMBERS))
            self._tail = (self._tail + block[-TOKEN_OVERLAP:])[-TOKEN_OVERLAP:]
        if self.json_only and (self._cut_character or not block.isascii()):
            self._check_utf8(memoryview(block))

    def _check_utf8(self, block: memoryview) -> None:
        start = 0
        if self._cut_character:  # complete the character the last block cut off, and check it
            size = _character_bytes(self._cut_character[0])
            start = min(size - len(self._cut_character), len(block))
            self._cut_character += block[:start]
            if len(self._cut_character) < size:
                return  # a block shorter than the rest of the character
            self.json_only = _valid_utf8(self._cut_character)
            self._cut_character = b""
        rest = block[start:]
        cut = _complete_prefix(rest)
        self.json_only = self.json_only and _valid_utf8(rest[:cut])
        self._cut_character = bytes(rest[cut:])

    def finish(self) -> None:
        if self._cut_character:  # a character cut off by the end of the file
            self.json_only = False


def _blocks(stream: IO[bytes], stop: threading.Event | None) -> Iterator[bytes]:
    while block := stream.read(BLOCK_BYTES):
        if stop is not None and stop.is_set():
            raise Stopped
        yield block


def scan_facts(path: Path, stop: threading.Event | None = None) -> FileFacts:
    """One pass over `path`: BLAKE3 of its bytes as stored (a cryptographic hash about 2.5×
    faster than SHA-256 here) and the scan of its text (decompressed for a .gz) for what
    Arrow's reader would take. Raises Stopped when `stop` is set."""
    digest = blake3()
    scan = _Scan()
    with open(path, "rb") as handle:
        for block in _blocks(handle, stop):
            digest.update(block)
            if path.suffix != ".gz":
                scan.update(block)
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as text:
            for block in _blocks(text, stop):
                scan.update(block)
    scan.finish()
    return FileFacts("blake3:" + digest.hexdigest(), scan.lines, scan.object_lines, scan.json_only)


def bounded_lines(stream: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """A stream's lines as bytes, each with whether it overflowed MAX_RECORD_BYTES (then cut
    short, the rest skipped without being held): the line-by-line reader of record files."""
    while line := stream.readline(MAX_RECORD_BYTES + 1):
        if len(line) > MAX_RECORD_BYTES and not line.endswith(b"\n"):
            while (rest := stream.readline(MAX_RECORD_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield line, True
        else:
            yield line, False


def first_value_opening(path: Path) -> bytes:
    """The first byte of the file's first JSON value (b"" when its first block is blank).
    Arrow's reader is only given files that open with '{': a first value of `null`
    crashes it (pyarrow 26), anything else it refuses anyway."""
    with open_text_lines(path) as stream:
        return stream.read(BLOCK_BYTES).lstrip(JSON_WHITESPACE)[:1]


def open_reader(path: Path, block_bytes: int, schema: pa.Schema) -> pa.RecordBatchReader:
    """Arrow's streaming JSON reader over `path` (gzip by its suffix)."""
    source = pa.input_stream(str(path), compression="gzip" if path.suffix == ".gz" else None)
    return pa_json.open_json(
        source,
        read_options=pa_json.ReadOptions(block_size=block_bytes),
        parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )


def _next_batch(reader: pa.RecordBatchReader) -> pa.RecordBatch | None:
    try:
        return reader.read_next_batch()
    except StopIteration:
        return None


def _int32_values(array: pa.Int32Array) -> np.ndarray:
    """The values of an Int32Array without nulls, as a NumPy view of its buffer (pyarrow's
    `to_numpy()` imports pandas when it is installed: a 0.2 s stall on the first call)."""
    return np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array), offset=array.offset * 4)


def _array(arrow_type: pa.DataType, length: int, validity: tuple, *buffers, children=None) -> pa.Array:
    """An Arrow array over the parser's buffers (objects that own their memory and lend it
    through the buffer protocol): its validity is (bitmap or None, null count)."""
    bits, nulls = validity
    wrapped = [None if bits is None else pa.py_buffer(bits), *map(pa.py_buffer, buffers)]
    return pa.Array.from_buffers(arrow_type, length, wrapped, null_count=nulls, children=children)


def _strings(length: int, column: tuple) -> pa.Array:
    validity, offsets, data = column
    return _array(pa.string(), length, validity, offsets, data)


def parsed_batch(parsed: tuple) -> pa.RecordBatch:
    """The strict parser's columns (`_case_columns.parse`) as a record batch of CASES_SCHEMA,
    its buffers wrapped, not copied."""
    n, text, gold, (validity, offsets, n_items, ids, parents, (score_validity, scores)) = parsed
    columns = dict(zip(("case_id", "locale", "category", "question", "query"), (_strings(n, c) for c in text)))
    for name, (list_validity, list_offsets, strings) in zip(("must_cite_one_of", "relevant_ids"), gold):
        ids_of_lists = _strings(len(strings[1]) // 4 - 1, strings)
        columns[name] = _array(pa.list_(pa.string()), n, list_validity, list_offsets, children=[ids_of_lists])
    score = _array(pa.float64(), n_items, score_validity, scores)
    items = pa.StructArray.from_arrays([_strings(n_items, ids), _strings(n_items, parents), score], fields=list(RETRIEVED_ITEM))
    columns["retrieved_context"] = _array(pa.list_(RETRIEVED_ITEM), n, validity, offsets, children=[items])
    columns["relevance"] = pa.nulls(n, CASES_SCHEMA.field("relevance").type)
    return pa.RecordBatch.from_arrays([columns[name] for name in CASES_SCHEMA.names], schema=CASES_SCHEMA)


class CaseFileRead:
    """One read of a cases file, started when made, in tables of whole cases, and beside them
    the file's facts. A plain file is parsed by the strict parser, when it was compiled, with
    `strict` (the default): flows/sources/strict_read.py `StrictParse`, whose facts are only the
    digest; `started` is such a read begun ahead (the CLI's `Prefetch`), taken over here.
    Otherwise Arrow's reader parses the file on a thread of ours (up to READ_AHEAD_BYTES ahead
    of whoever takes the tables; alone it parses only a block or two ahead) and the facts are
    found on another (`scan_facts`). `scan=False` reads a file whose lines were already judged
    (the clean copy of ingest's line-by-line pass), with Arrow's reader and the schema given.
    With `download`, the file is a copy of an object: a `Download` whose file is `path` (Arrow's
    reader waits for it to end), or a StreamedObject, with `path` None, that only the strict
    parser reads (`streamable`). `where` names the file either way.

    Whatever stops the parse is raised where the tables are taken: NotClean when the fast
    pass cannot take the file (a line the strict parser refuses; for Arrow's reader, a first
    value that is not an object, or a refusal), as it is otherwise (an unreadable or truncated
    file). `close()` stops the read and its threads, and the download."""

    def __init__(self, path: Path | None, *, schema: pa.Schema = CASES_SCHEMA, block_bytes: int = BLOCK_BYTES,
                 scan: bool = True, strict: bool = True, download: Download | StreamedObject | None = None,
                 started: StrictParse | None = None) -> None:
        self.path = path
        streamed = isinstance(download, StreamedObject)
        self.strict = started is not None or (strict and scan and parser_compiled() and
                                              (streamed or path.suffix != ".gz" and download is None))
        if started is None and (streamed != (path is None) or streamed and not self.strict):
            raise ValueError(f"{path or download.location}: a stream is read by the strict parser alone, and has no path")
        self._schema = schema
        self._ended = False  # the tables were taken to their end (or the read's refusal)
        self._threads: list[threading.Thread] = []
        self._download = None if self.strict else download  # a strict read's stream is its StrictParse's
        if self.strict:
            self._strict = started or StrictParse(path, download)
            self._handoff = self._strict.handoff
            self.where = self._strict.where
            return
        self._strict = None
        self.where = str(path)
        self._handoff = Handoff(READ_AHEAD_BYTES // block_bytes, READ_AHEAD_COLUMN_BYTES)
        self._facts: Future[FileFacts] = Future()
        self._threads.append(threading.Thread(target=self._parse, args=(schema, block_bytes), name="parse", daemon=True))
        if scan:
            self._threads.append(threading.Thread(target=self._scan, name="scan", daemon=True))
        for thread in self._threads:
            thread.start()

    def digest_early(self) -> None:
        """Have the file's digest as soon as a pass of its own gives it, ahead of the parse
        (`StrictParse.digest_early`; the facts of Arrow's reader are found on a thread of
        their own anyway)."""
        if self._strict is not None:
            self._strict.digest_early()

    def _scan(self) -> None:
        try:
            self._downloaded()
            self._facts.set_result(scan_facts(self.path, self._handoff.done))
        except BaseException as error:  # noqa: BLE001 — raised again by facts()
            self._facts.set_exception(error)

    def _downloaded(self) -> None:
        """Wait for the download, if any, to end; Stopped when the read is closed first."""
        if self._download is not None:
            self._download.checksum_once_ended(self._handoff.done)

    def _parse(self, schema: pa.Schema, block_bytes: int) -> None:
        handoff = self._handoff
        try:
            self._downloaded()
            opening = first_value_opening(self.path)
            if opening not in (b"", b"{"):
                raise NotClean("the first value is not an object")  # never given to Arrow's reader
            if opening == b"{":
                reader = open_reader(self.path, block_bytes, schema)
                while (batch := _next_batch(reader)) is not None:
                    if not handoff.offer(batch, batch.nbytes):
                        return
            handoff.offer(None)
        except (pa.ArrowInvalid, UnicodeDecodeError) as error:
            # Arrow's refusals (malformed JSON, a wrong type, a repeated key, a record longer
            # than a block); pyarrow raises UnicodeDecodeError when its message quotes
            # invalid UTF-8.
            handoff.offer(NotClean(str(error)))
        except Exception as error:  # noqa: BLE001 — raised again where the tables are taken
            handoff.offer(error)

    def facts(self) -> FileFacts:
        """The file's facts (waits for them). Asked before the tables were taken to their end
        and before the digest is known (a batch was refused), the strict read hands on no more
        (`StrictParse.abandon`): it would wait for room for ever, and the digest with it."""
        if self._strict is not None:
            if not self._ended:
                self._strict.abandon()
            return FileFacts("blake3:" + self._strict.digest.result(), None, None, True)
        return self._facts.result()

    def facts_ready(self) -> bool:
        return (self._strict.digest if self._strict is not None else self._facts).done()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        try:
            if self._strict is None:
                yield from self._handoff.items()
            else:
                for parsed in self._handoff.items():
                    yield parsed_batch(parsed)
        except NotClean:  # the read's own refusal: it was handed on last
            self._ended = True
            raise
        self._ended = True

    def tables(self, batch_items: int) -> Iterator[pa.Table]:
        """Tables of whole cases holding about `batch_items` retrieved items (the last one
        fewer); a file without records gives one empty table, so that every table of the run
        gets its (empty) part."""
        pending: list[pa.RecordBatch] = []
        n_items = n_cases = 0
        n_tables = 0
        for batch in self._batches():
            while batch.num_rows:
                offsets = batch.column("retrieved_context").offsets  # items before each case, and the end
                batch_size = offsets[-1].as_py() - offsets[0].as_py()
                if n_items + batch_size < batch_items and n_cases + batch.num_rows < MAX_TABLE_CASES:  # all of it fits
                    pending.append(batch)
                    n_items += batch_size
                    n_cases += batch.num_rows
                    break
                # Cut where the running total reaches batch_items, or the cases MAX_TABLE_CASES.
                before = _int32_values(offsets) - offsets[0].as_py()
                cut = int(np.searchsorted(before, batch_items - n_items, side="left"))
                cut = max(1, min(cut, MAX_TABLE_CASES - n_cases))
                pending.append(batch.slice(0, cut))
                yield pa.Table.from_batches(pending)
                n_tables += 1
                pending, n_items, n_cases = [], 0, 0
                batch = batch.slice(cut)
        if pending:
            yield pa.Table.from_batches(pending)
        elif not n_tables:
            yield self._schema.empty_table()

    def close(self) -> None:
        """Stop reading (a block being parsed is finished first) and drop what was read."""
        self._handoff.done.set()
        if self._strict is not None:
            self._strict.close()
        for thread in self._threads:
            thread.join()
        if self._download is not None:
            self._download.close()

    def __enter__(self) -> CaseFileRead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
