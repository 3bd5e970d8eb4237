"""The strict parser's read of a cases file (flows/sources/_case_columns.c), which starts
before Arrow, NumPy or the engines are imported: `retrieval-eval run` starts its first run's
read (`Prefetch`) as soon as it has found the file, so that the parse fills the core the
imports leave idle (they took the first 0.1 s of every run before it could start), and
flows/sources/case_file.py `CaseFileRead` takes the read over and makes Arrow tables of the
parser's columns. This module imports the parser, the standard library and BLAKE3 only.

The file is read in blocks of whole lines, parsed PARSE_THREADS blocks at a time, and the
columns handed on in file order through a `Handoff`, which holds at most
READ_AHEAD_COLUMN_BYTES of them for whoever takes them. A local file's digest is taken of its
bytes on their way to the parser (one read of the file, not two), or by a pass of its own once
`digest_early()` is asked; an object streamed from its bucket is digested by its stream.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO

from ...transforms.errors import NotClean
from ...transforms.records import MAX_RECORD_BYTES
from ..storage.hashing import HashingStream, file_digest
from .stored_file import Stopped, StoredFile, StreamedObject

try:
    from . import _case_columns  # the strict parser (flows/sources/_case_columns.c), built at install
except ImportError:  # not compiled here (no C compiler at install): Arrow's reader reads every file
    _case_columns = None

# JSON parsed ahead of the evaluation, in blocks: never more than READ_AHEAD_BYTES of it, nor
# READ_AHEAD_COLUMN_BYTES of columns (short lines, as `{}`, make many times their bytes).
READ_AHEAD_BYTES = 512 << 20
READ_AHEAD_COLUMN_BYTES = 64 << 20
# The strict parser's blocks of whole lines (4 MiB: fewer calls than 1, as fast per byte).
STRICT_BLOCK_BYTES = 4 << 20
# Room in a block's buffer for the start of a line cut off by the block before (a line of a
# MiB or more makes its buffer longer).
CARRY_ROOM = 1 << 20
# What the rest of a file is read in, once the parse stopped, for its digest.
DIGEST_BLOCK_BYTES = 1 << 20


def _env_count(name: str) -> int | None:
    """A positive count set in the environment variable `name` (its first value), else None."""
    value = os.environ.get(name, "").split(",")[0].strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def _cores() -> int:
    """The cores the parse counts on, as Arrow counts them (pyarrow's `cpu_count`, not
    imported here): OMP_NUM_THREADS when set, capped by OMP_THREAD_LIMIT, else the cores this
    process may run on."""
    cores = _env_count("OMP_NUM_THREADS") or (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    return min(cores, _env_count("OMP_THREAD_LIMIT") or cores)


PARSE_THREADS = max(1, _cores() - 1)  # every core but the one that evaluates the batches


def parser_compiled() -> bool:
    """Whether the strict parser was compiled at install."""
    return _case_columns is not None


def streamable(name: str) -> bool:
    """Whether the strict parser reads a cases file of this name (compiled here, a plain
    file); in a bucket, such a file is read from memory as it arrives rather than from a
    local copy."""
    return parser_compiled() and not name.endswith(".gz")


class Handoff:
    """Items handed on in order from the thread that reads them to the one that takes them:
    at most `slots` at once, and no more than `budget` bytes of them once one is held (an
    item's size is the caller's to say). `done` set stops both sides; `abandoned` set, the
    taker takes no more: offers are refused (and what was held is dropped)."""

    def __init__(self, slots: int, budget: int) -> None:
        self.done = threading.Event()
        self.abandoned = threading.Event()
        self._queue: queue.Queue = queue.Queue(max(1, slots))
        self._room = threading.Condition()
        self._held = 0
        self._budget = budget

    def offer(self, item: object, size: int = 0) -> bool:
        """Hand on `item` (None: the end; an exception: raised where it is taken), waiting for
        room; False once `done` or `abandoned` is set."""
        while not (self.done.is_set() or self.abandoned.is_set()):
            with self._room:
                if self._held and self._held + size > self._budget:
                    self._room.wait(0.1)
                    continue
                self._held += size
            try:
                self._queue.put((item, size), timeout=0.1)
                return True
            except queue.Full:
                with self._room:
                    self._held -= size
        return False

    def abandon(self) -> None:
        """The taker takes no more: refuse what is offered from now on, and drop what is held."""
        self.abandoned.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def items(self) -> Iterator[object]:
        """The items in order up to the end; raises an exception handed on, and Stopped once
        `done` or `abandoned` is set."""
        while True:
            try:
                item, size = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self.done.is_set() or self.abandoned.is_set():  # nothing more will come
                    raise Stopped from None
                continue
            with self._room:
                self._held -= size
                self._room.notify()
            if item is None:
                return
            if isinstance(item, Exception):
                raise item
            if self.done.is_set():
                raise Stopped
            yield item


def _line_blocks(handle: IO[bytes], stop: threading.Event, buffers: int) -> Iterator[memoryview]:
    """The file in blocks of whole lines of about STRICT_BLOCK_BYTES. A line longer than a
    block makes its block longer; one past MAX_RECORD_BYTES is handed on as it is (the parser
    refuses it, as the rules do) and the read ends there. The blocks are read into `buffers`
    buffers taken in turn: a block stays as it is until `buffers` - 1 more were taken (a fresh
    4 MiB buffer for each block cost as many page faults, zeroed, as the file has pages). Each
    buffer has CARRY_ROOM beyond a block for the line the one before cut off: sized to the
    carry alone, a buffer was made again whenever a carry was longer than any before it (a
    dozen fresh buffers a run, 9% of its page faults)."""
    carry = b""
    ring = [bytearray() for _ in range(buffers)]
    given = 0  # blocks handed on: the next one goes in ring[given % buffers]
    while True:
        if stop.is_set():
            raise Stopped
        block = ring[given % buffers]
        if len(block) < len(carry) + STRICT_BLOCK_BYTES:
            room = -(-len(carry) // CARRY_ROOM) * CARRY_ROOM or CARRY_ROOM  # whole CARRY_ROOMs
            block = ring[given % buffers] = bytearray(room + STRICT_BLOCK_BYTES)
        block[:len(carry)] = carry
        size = len(carry) + handle.readinto(memoryview(block)[len(carry):len(carry) + STRICT_BLOCK_BYTES])
        if size == len(carry):  # the end of the file
            if carry:
                yield memoryview(block)[:size]
            return
        cut = block.rfind(b"\n", 0, size) + 1
        if cut == 0 and size <= MAX_RECORD_BYTES:
            carry = bytes(block[:size])  # one line, not ended yet
            continue
        if cut == 0:
            yield memoryview(block)[:size]
            return
        carry = bytes(block[cut:size])
        given += 1
        yield memoryview(block)[:cut]


def columns_bytes(parsed: object) -> int:
    """The bytes of the column buffers in what `_case_columns.parse` returned (its counts and
    absent bitmaps are not buffers)."""
    if isinstance(parsed, tuple):
        return sum(columns_bytes(part) for part in parsed)
    return 0 if parsed is None or isinstance(parsed, int) else len(parsed)


class StrictParse:
    """The strict parser's read of one cases file, started when made: a local file at `path`,
    or an object streamed from its bucket (`stream`, with `path` None). Its columns, as the
    parser returns them, are taken in file order from `handoff`; NotClean is raised there
    when a line is not one clean record. `digest` is the BLAKE3 hex digest of the file's bytes
    (of a local file: taken of the bytes the parse read, and of the rest once the parse
    stopped; of an object: its stream's). `close()` stops the read, and the stream."""

    def __init__(self, path: Path | None, stream: StreamedObject | None = None) -> None:
        if not parser_compiled() or (path is None) == (stream is None):
            raise ValueError("a strict read needs the compiled parser, and one local file or one stream")
        self.path = path
        self.where = str(path) if path is not None else stream.location
        self.handoff = Handoff(READ_AHEAD_BYTES // STRICT_BLOCK_BYTES, READ_AHEAD_COLUMN_BYTES)
        self.digest: Future[str] = Future()
        self._stream = stream
        self._lock = threading.Lock()
        self._digester = "stream" if stream is not None else "parse"  # which thread sets `digest`
        self._threads = [threading.Thread(target=self._parse, name="parse", daemon=True)]
        if stream is not None:
            self._threads.append(threading.Thread(target=self._streamed, name="scan", daemon=True))
        for thread in self._threads:
            thread.start()

    def digest_early(self) -> None:
        """Have a local file's digest as soon as a pass of its own gives it, ahead of the
        parse (a run whose committed bytes the file may hold: the read stops once they are
        known to be the same), rather than once the parse has read the file."""
        with self._lock:
            if self._digester != "parse" or self.handoff.done.is_set() or self.digest.done():
                return
            self._digester = "scan"
            scan = threading.Thread(target=self._scan, name="scan", daemon=True)
            self._threads.append(scan)
        scan.start()

    def _set_digest(self, by: str, digest: str | None, error: BaseException | None = None) -> None:
        with self._lock:
            if self._digester != by or self.digest.done():
                return
            if error is None:
                self.digest.set_result(digest)
            else:
                self.digest.set_exception(error)

    def _scan(self) -> None:
        def check() -> None:
            if self.handoff.done.is_set():
                raise Stopped
        try:
            self._set_digest("scan", file_digest(self.path, check))
        except Exception as error:  # noqa: BLE001 — raised again by whoever asks for the digest
            self._set_digest("scan", None, error)

    def _streamed(self) -> None:
        """The stream's digest once it has ended; Stopped when the read is closed first."""
        try:
            self._set_digest("stream", self._stream.checksum_once_ended(self.handoff.done))
        except Exception as error:  # noqa: BLE001 — raised again by whoever asks for the digest
            self._set_digest("stream", None, error)

    def _open(self) -> IO[bytes]:
        return open(self.path, "rb") if self._stream is None else self._stream.reader(self.handoff.done)

    def _parse(self) -> None:
        """Blocks of whole lines parsed PARSE_THREADS at a time (the parser lets go of the GIL),
        handed on in file order; a local file's bytes digested as they are read, and the rest
        of them once the parse stops."""
        handoff = self.handoff
        try:
            with self._open() as raw, ThreadPoolExecutor(PARSE_THREADS, "parse-block") as pool:
                handle = HashingStream(raw) if self._stream is None else raw
                pending: deque[Future] = deque()
                # A block is parsed before PARSE_THREADS + 1 more are read: its buffer is then free.
                blocks = _line_blocks(handle, handoff.done, buffers=PARSE_THREADS + 2)
                end: object = None  # what is handed on last: None once every block was
                while True:
                    for block in blocks:
                        pending.append(pool.submit(_case_columns.parse, block, MAX_RECORD_BYTES))
                        if len(pending) > PARSE_THREADS:
                            break
                    if not pending:
                        break
                    parsed = pending.popleft().result()
                    if parsed is None:
                        end = NotClean("a line is not one clean record")
                        break
                    if not handoff.offer(parsed, columns_bytes(parsed)):
                        if handoff.done.is_set():
                            raise Stopped
                        break  # abandoned: what is left of the file is only digested
                handoff.offer(end)
                if isinstance(handle, HashingStream):
                    self._set_digest("parse", self._rest_digested(handle))
        except Exception as error:  # noqa: BLE001 — raised again where the columns are taken
            handoff.offer(error)
            self._set_digest("parse", None, error)

    def _rest_digested(self, handle: HashingStream) -> str:
        """The digest of the whole file once the rest of it is read through `handle` (when a
        scan took the digest over, the rest is not read: what is returned then is not used)."""
        buffer = memoryview(bytearray(DIGEST_BLOCK_BYTES))
        while self._digester == "parse" and handle.readinto(buffer):
            if self.handoff.done.is_set():
                raise Stopped
        return handle.digest.hexdigest()

    def abandon(self) -> None:
        """The columns are taken no more (a batch was refused, and the file goes to the
        line-by-line rules): unless a scan gives the digest (`digest_early`), the parse stops
        handing them on and the rest of the file is only digested — by the parse for a local
        file, by its stream for an object — so that the digest comes without the columns
        being taken."""
        with self._lock:
            if self._digester == "scan" or self.digest.done():
                return
        self.handoff.abandon()

    def close(self) -> None:
        """Stop reading (a block being parsed is finished first) and drop what was read."""
        with self._lock:
            self.handoff.done.set()
            threads = list(self._threads)
        for thread in threads:
            thread.join()
        if self._stream is not None:
            self._stream.close()


class Prefetch:
    """A read started before it is asked for (the CLI starts its first run's read before it
    imports Arrow and the engines: a local file, or an object streamed from its bucket, that
    the strict parser reads), handed to the first ingest of that file (`take`); a read nobody
    took is closed with the prefetch."""

    def __init__(self, first: StoredFile | None) -> None:
        self._first = first
        self._read: StrictParse | None = None
        if first is not None and streamable(first.name):
            self._read = StrictParse(first.path) if first.is_local else StrictParse(None, first.stream())

    def take(self, cases: StoredFile) -> StrictParse | None:
        """The read of `cases` when it is the one started: the same location and, for an object,
        the ETag of the same listing (an object listed again since, as another, is read again)."""
        read, self._read = self._read, None
        if read is not None and (read.where != cases.location or self._first.etag != cases.etag):
            read.close()
            return None
        return read

    def close(self) -> None:
        if self._read is not None:
            self._read.close()
            self._read = None

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
