"""One input file where the user keeps it: a local path or an object in a bucket (SPEC 14),
read through the store (flows/storage). Small files (a manifest, the KB, a baseline, qrels)
are read whole. A cases file that must be evaluated is streamed from its bucket on a thread
of its own: into memory, for the strict parser to read as it arrives (`StreamedObject`: no
local copy written and read back), or whole into a local file (`Download`: a `.gz`, Arrow's
reader where the parser was not compiled, the line-by-line rules, a TREC run)."""

from __future__ import annotations

import io
import os
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from ...transforms.errors import InputError
from ..storage import LocationError, NotFound, ObjectInfo, is_uri, open_store, parse_location
from ..storage.hashing import file_digest
from ..storage.store import Store

# Bytes read past a range's planned start to find the line start it moves to.
LINE_PROBE_BYTES = 64 * 1024
# A byte range is copied in reads of at most this many bytes (one request each in a bucket).
RANGE_READ_BYTES = 32 * 1024 * 1024
# How long a wait for a download's bytes lasts before the read looks whether it was closed.
DOWNLOAD_POLL_SECONDS = 0.1
# A streamed object's bytes held in memory ahead of its reader, at most: past this, the
# stream waits (and the connection with it) until the reader has taken some.
STREAM_AHEAD_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class StoredFile:
    """A file of the inputs. `location` is an absolute local path or a URI, as the log and the
    `runs` row record it (a URI never carries credentials: parse_location refuses them);
    `info` is what the listing that found a remote object said of it (saves a HEAD)."""

    location: str
    info: ObjectInfo | None = None

    @classmethod
    def at(cls, given: str | os.PathLike, info: ObjectInfo | None = None) -> StoredFile:
        """The file a user named (a relative local path is taken from the current folder)."""
        try:
            return cls(str(parse_location(os.fspath(given))), info)
        except LocationError as error:
            raise InputError(str(error)) from None

    @property
    def is_local(self) -> bool:
        return not is_uri(self.location)

    @property
    def path(self) -> Path:
        """The local file (for a local location only)."""
        if not self.is_local:
            raise ValueError(f"{self.location} is not a local file")
        return Path(self.location)

    @property
    def name(self) -> str:
        return self.location.rstrip("/").rsplit("/", 1)[-1]

    def opened(self) -> tuple[Store, str]:
        return open_store(self.location)

    def head(self) -> ObjectInfo:
        """Size, etag and stored checksum of a remote object (from its listing when it came from one)."""
        if self.info is not None:
            return self.info
        store, key = self.opened()
        return store.head(key)

    def exists(self) -> bool:
        if self.is_local:
            return self.path.is_file()
        try:
            self.head()
        except NotFound:
            return False
        return True

    def fingerprint(self) -> list:
        """What tells the stored bytes apart without reading them. A local file: size, mtime,
        inode and ctime (a copy that keeps the size and restores the mtime, as `cp -p`, rsync
        or tar do, still gets a new inode or ctime). An object: size, etag and the stored
        checksum (None when it was written without one)."""
        if self.is_local:
            st = os.stat(self.location)
            return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
        info = self.head()
        return [info.size, info.etag, info.checksum]

    def size(self) -> int:
        return os.stat(self.location).st_size if self.is_local else self.head().size

    def read_bytes(self) -> bytes:
        """The whole file (for small files). A missing local file raises FileNotFoundError; a
        missing object NotFound, naming its URI."""
        if self.is_local:
            return self.path.read_bytes()
        store, key = self.opened()
        return store.get(key)

    def local_copy(self, folder: Path) -> Path:
        """A local file holding these bytes: the file itself when it is local, else the object
        copied whole (`download`)."""
        if self.is_local:
            return self.path
        return self.download(folder).finish()

    @property
    def etag(self) -> str | None:
        """The ETag its listing gave (None when it was not listed): a read of the object then
        fails rather than read another object stored under its key since (ObjectChanged)."""
        return self.info.etag if self.info is not None else None

    def download(self, folder: Path) -> Download:
        """The object being streamed, on a thread of its own, into a fresh folder below
        `folder` under its own name (the parsers tell a `.gz` by its name)."""
        store, key = self.opened()
        target = folder / f"download-{uuid.uuid4().hex[:12]}" / self.name
        target.parent.mkdir(parents=True)
        return Download(store, key, target, self.etag)

    def stream(self) -> StreamedObject:
        """The object being streamed into memory, on a thread of its own, for one reader."""
        store, key = self.opened()
        return StreamedObject(store, key, self.location, self.etag)

    def line_ranges(self, n: int) -> list[tuple[int, int]]:
        """The file cut into at most `n` byte ranges (start, end), each starting at the start of
        a line and ending where the next starts, so that workers can each parse one. A `.gz`
        cannot be cut: it is one range."""
        size = self.size()
        if n <= 1 or size == 0 or self.name.endswith(".gz"):
            return [(0, size)]
        store, key = (None, None) if self.is_local else self.opened()
        starts = [0]
        for planned in (size * i // n for i in range(1, n)):
            start = self._next_line_start(planned, size, store, key)
            if start is not None and start > starts[-1]:
                starts.append(start)
        ends = [*starts[1:], size]
        return list(zip(starts, ends))

    def _next_line_start(self, at: int, size: int, store: Store | None, key: str | None) -> int | None:
        """The start of the first line that begins after byte `at - 1` (None: none does)."""
        position = at - 1  # a line starts at `at` when the byte before it is a newline
        while position < size:
            block = self._read_at(position, LINE_PROBE_BYTES, store, key)
            if not block:
                return None
            newline = block.find(b"\n")
            if newline >= 0:
                start = position + newline + 1
                return start if start < size else None
            position += len(block)
        return None

    def _read_at(self, position: int, length: int, store: Store | None, key: str | None) -> bytes:
        """`length` bytes from `position` (fewer at the end): a ranged read of an object, or a
        seek in a local file (`store` None)."""
        if store is not None:
            return store.get_range(key, position, length)
        with open(self.location, "rb") as handle:
            handle.seek(position)
            return handle.read(length)

    def copy_range(self, start: int, end: int, folder: Path) -> Path:
        """A local file holding bytes [start, end) of this file (one of its `line_ranges`),
        under the file's own name in a fresh folder below `folder`: a Dask worker's share of
        a cases file, read from the store in ranged reads."""
        store, key = (None, None) if self.is_local else self.opened()
        target = folder / f"range-{start}-{uuid.uuid4().hex[:12]}" / self.name
        target.parent.mkdir(parents=True)
        with open(target, "wb") as sink:
            position = start
            while position < end:
                block = self._read_at(position, min(RANGE_READ_BYTES, end - position), store, key)
                if not block:
                    raise InputError(f"{self.location}: ends at byte {position}, before {end}: it changed while it "
                                     "was read; run again")
                sink.write(block)
                position += len(block)
        return target

    def digest(self) -> str:
        """BLAKE3 of the bytes as stored, as a read of the file records it (`blake3:<hex>`,
        flows/sources/case_file.py `FileFacts.digest`): one streaming pass, nothing kept."""
        if self.is_local:
            return "blake3:" + file_digest(self.path)
        store, key = self.opened()
        with open(os.devnull, "wb") as sink:
            return "blake3:" + store.copy_to(key, sink)


class Stopped(Exception):
    """A read was closed while its bytes (or the tables parsed of them) were being taken."""


class DownloadStopped(Exception):
    """A copy was closed before it ended."""


class _ObjectCopy:
    """One object copied by one streamed GET (`Store.copy_to`), on a thread of its own, into
    `write` (a subclass's: a local file, or memory). `ended` says whether every byte was
    written, `checksum` is the BLAKE3 the copy computed on the way (the bytes' digest without a
    second read), and a copy that failed raises its error (a StoreError naming the URI) from
    each of them. `etag`, when given, is the one the object must still have (ObjectChanged
    otherwise). `close()` stops a copy still running and waits for its thread."""

    def __init__(self, store: Store, key: str, etag: str | None, thread_name: str) -> None:
        self._progress = threading.Condition()  # notified as the copy moves on, and at its end
        self._checksum: str | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._copy, args=(store, key, etag), name=thread_name, daemon=True)

    def _copy(self, store: Store, key: str, etag: str | None) -> None:
        checksum, error = None, None
        try:
            checksum = store.copy_to(key, self, etag=etag)
        except BaseException as failure:  # noqa: BLE001 — raised again to every reader
            error = failure
        finally:
            self._written_all()
        with self._progress:
            self._checksum, self._error = checksum, error
            self._progress.notify_all()

    def write(self, block: bytes) -> int:
        raise NotImplementedError

    def _written_all(self) -> None:
        """The copy is over (whether it succeeded or not)."""

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise DownloadStopped("the copy was stopped")

    def _over(self) -> bool:
        return self._checksum is not None or self._error is not None

    def ended(self) -> bool:
        """Whether every byte of the object was copied; raises the copy's error if it failed."""
        with self._progress:
            if self._error is not None:
                raise self._error
            return self._checksum is not None

    def checksum(self, timeout: float) -> str | None:
        """The BLAKE3 hex digest of the object once the copy has ended (None while it has not
        within `timeout` seconds); raises the copy's error if it failed."""
        with self._progress:
            if not self._over():
                self._progress.wait(timeout)
        return self._checksum if self.ended() else None

    def checksum_once_ended(self, stop: threading.Event) -> str:
        """`checksum`, waiting for the copy to end; raises the copy's error if it failed, and
        Stopped once `stop` is set first (the reader was closed)."""
        while (checksum := self.checksum(DOWNLOAD_POLL_SECONDS)) is None:
            if stop.is_set():
                raise Stopped
        return checksum

    def close(self) -> None:
        self._stop.set()
        with self._progress:
            self._progress.notify_all()
        self._thread.join()


class Download(_ObjectCopy):
    """An object copied whole into the local file `path` (`_ObjectCopy`): what a `.gz` is read
    from once it has arrived, and Arrow's reader where the strict parser was not compiled, and
    the line-by-line rules (`finish` waits for the copy)."""

    def __init__(self, store: Store, key: str, path: Path, etag: str | None = None) -> None:
        super().__init__(store, key, etag, "download")
        self.path = path
        self._file = open(path, "wb")
        self._thread.start()

    def write(self, block: bytes) -> int:
        self._check_stop()
        return self._file.write(block)

    def _written_all(self) -> None:
        self._file.close()

    def finish(self) -> Path:
        """Wait for the copy to end: the local file (or the copy's error)."""
        self._thread.join()
        self.ended()
        return self.path


class StreamedObject(_ObjectCopy):
    """An object streamed into memory (`_ObjectCopy`) for one reader that takes its bytes in
    order (`reader`): the strict parser of a cases file, which so reads an object with no local
    copy written and read back. At most STREAM_AHEAD_BYTES wait in memory for the reader. Once
    the reader is closed before the end (the parser refused a line), the rest of the object is
    only hashed, for its digest. `location` names it."""

    def __init__(self, store: Store, key: str, location: str, etag: str | None = None) -> None:
        super().__init__(store, key, etag, "stream")
        self.location = location
        self._chunks: deque[memoryview] = deque()
        self._held = 0
        self._unread = False  # the reader is gone: nothing is held any more
        self._thread.start()

    def write(self, chunk: bytes) -> int:
        """Hold one chunk for the reader (`Store.copy_to` calls this), waiting while
        STREAM_AHEAD_BYTES are held already."""
        with self._progress:
            while self._held >= STREAM_AHEAD_BYTES and not self._unread and not self._stop.is_set():
                self._progress.wait(DOWNLOAD_POLL_SECONDS)
            self._check_stop()
            if not self._unread:
                self._chunks.append(memoryview(chunk))  # (a view: what a read leaves of it is not copied)
                self._held += len(chunk)
                self._progress.notify_all()
        return len(chunk)

    def take_into(self, view: memoryview, stop: threading.Event) -> int:
        """Fill `view` with the next bytes (fewer only at the end of the object), waiting for
        them; raises the stream's error, or Stopped once `stop` is set."""
        filled = 0
        with self._progress:
            while filled < len(view):
                if self._chunks:
                    chunk = self._chunks[0]
                    n = min(len(chunk), len(view) - filled)
                    view[filled:filled + n] = chunk[:n]
                    filled += n
                    if n == len(chunk):
                        self._chunks.popleft()
                    else:
                        self._chunks[0] = chunk[n:]
                    self._held -= n
                    self._progress.notify_all()
                    continue
                if self._error is not None:
                    raise self._error
                if self._checksum is not None:
                    break
                if stop.is_set():
                    raise Stopped
                self._progress.wait(DOWNLOAD_POLL_SECONDS)
        return filled

    def reader(self, stop: threading.Event) -> io.RawIOBase:
        return _StreamReader(self, stop)

    def let_go(self) -> None:
        """The reader is done, maybe before the end: drop what is held, and hold no more."""
        with self._progress:
            self._unread = True
            self._chunks.clear()
            self._held = 0
            self._progress.notify_all()

    def close(self) -> None:
        self.let_go()
        super().close()


class _StreamReader(io.RawIOBase):
    """A streamed object as its one reader takes it (`StreamedObject.take_into`); closing it
    lets the stream go on without holding anything (`StreamedObject.let_go`)."""

    def __init__(self, stream: StreamedObject, stop: threading.Event) -> None:
        self._stream = stream
        self._stop = stop

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._stream.take_into(memoryview(buffer).cast("B"), self._stop)

    def close(self) -> None:
        if not self.closed:
            self._stream.let_go()
        super().close()
