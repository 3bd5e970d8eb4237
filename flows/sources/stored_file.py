"""One input file where the user keeps it: a local path or an object in a bucket (SPEC 14),
read through the store (flows/storage). Small files (a manifest, the KB, a baseline, qrels)
are read whole; a cases file or a TREC run is copied to a local file only when it must be
evaluated, and the parsers read that copy as they read a local file."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from ...transforms.errors import InputError
from ..storage import LocationError, NotFound, ObjectInfo, open_store, parse_location
from ..storage.hashing import file_digest
from ..storage.store import Store

# Bytes read past a range's planned start to find the line start it moves to.
LINE_PROBE_BYTES = 64 * 1024
# A byte range is copied in reads of at most this many bytes (one request each in a bucket).
RANGE_READ_BYTES = 32 * 1024 * 1024


def is_uri(location: str | os.PathLike) -> bool:
    """Whether a location names an object in a bucket (`s3://…`), not a local path."""
    text = os.fspath(location)
    return "://" in text and not text.lower().startswith("file://")


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
        streamed into a fresh folder below `folder` under its own name (the parsers tell a
        `.gz` by its name)."""
        if self.is_local:
            return self.path
        store, key = self.opened()
        target = folder / f"download-{uuid.uuid4().hex[:12]}" / self.name
        target.parent.mkdir(parents=True)
        aside = target.with_name(f".{self.name}.partial")
        with open(aside, "wb") as sink:
            store.copy_to(key, sink)
        os.replace(aside, target)
        return target

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
