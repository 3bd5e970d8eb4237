"""BLAKE3 of stored bytes, in one place: the store's object checksums, a file's digest, and a
stream hashed as it is read or written (no second pass over the file to digest it). The
store's objects, the warehouse's parts, the KB and the TREC files are all digested here."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, BinaryIO

from blake3 import blake3

_HASH_BLOCK = 8 * 1024 * 1024


def file_digest(path: Path, before_block: Callable[[], None] = lambda: None) -> str:
    """BLAKE3 of a file's bytes, read as a stream (a device or a FIFO is digested too),
    _HASH_BLOCK bytes at a time into one buffer (a fresh buffer for each block cost as many
    page faults as the file has pages, more than the hash), on this thread alone. The caller's
    `before_block` runs before each block, and may raise to stop."""
    hasher = blake3()
    buffer = bytearray(_HASH_BLOCK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            before_block()
            n = handle.readinto(buffer)
            if not n:
                return hasher.hexdigest()
            hasher.update(view[:n])


class HashingStream(io.RawIOBase):
    """A file's bytes hashed on their way through: as they are read from `raw` (readinto) or
    written to it (write). `digest` is the BLAKE3 so far, `size` the bytes passed."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.digest = blake3()
        self.size = 0

    def readable(self) -> bool:
        return self._raw.readable()

    def writable(self) -> bool:
        return self._raw.writable()

    def readinto(self, buffer) -> int:
        n = self._raw.readinto(buffer)
        if n:
            self.digest.update(memoryview(buffer)[:n])
            self.size += n
        return n

    def write(self, data) -> int:
        written = self._raw.write(data)
        self.digest.update(data)
        self.size += written
        return written


def checksum_of_bytes(data: bytes) -> str:
    """The BLAKE3 hex digest of `data`."""
    return blake3(data, max_threads=blake3.AUTO).hexdigest()


def checksum_of_file(path: Path) -> str:
    """The BLAKE3 hex digest of a local file's bytes (memory-mapped, all cores)."""
    hasher = blake3(max_threads=blake3.AUTO)
    hasher.update_mmap(path)
    return hasher.hexdigest()


def checksum_of_stream(reader: BinaryIO, sink: BinaryIO | None = None) -> str:
    """The BLAKE3 hex digest of everything `reader` yields, copied into `sink` if given."""
    return checksum_of_chunks(iter(lambda: reader.read(_HASH_BLOCK), b""), sink)


def checksum_of_chunks(chunks: Iterable, sink: BinaryIO | None = None) -> str:
    """The BLAKE3 hex digest of the bytes of `chunks` in order, copied into `sink` if given."""
    hasher = blake3(max_threads=blake3.AUTO)
    for chunk in chunks:
        block = bytes(chunk)
        hasher.update(block)
        if sink is not None:
            sink.write(block)
    return hasher.hexdigest()
