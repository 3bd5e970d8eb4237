"""BLAKE3 of stored bytes, in one place: a file's digest, and a stream hashed as it is read or
written (no second pass over the file to digest it). The warehouse's parts, the KB and the
TREC files are all digested here; the store's object checksums are flows/storage/store.py's."""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO

from blake3 import blake3


def file_digest(path: Path) -> str:
    """BLAKE3 of a file's bytes."""
    digest = blake3()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
