"""The store: the one interface through which data is read and written, whether it lives in a
local folder (`LocalStore`) or a bucket (`ObjectStore`). Keys are "/"-separated; an object is
written whole or not at all; every object has a BLAKE3 checksum of its bytes.

Commits on a store (the log's protocol, for its callers): an entry is claimed with
`put_if_absent(key, bytes_with_a_unique_commit_id)`. True means this writer's bytes are the
entry. False means the key was taken when the (last) request arrived, which includes this
writer's own earlier request whose response was lost and that the client retried; a
`StoreUnavailable` means the outcome is unknown. In both of those cases the caller reads the
key back (`get`) and compares the commit id inside with its own: equal means it committed,
different means another writer won and it must read the log again and retry on top.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

CHECKSUM_METADATA = "blake3"
"""The name under which an object's checksum is stored as object metadata (x-amz-meta-blake3)."""


@dataclass(frozen=True)
class ObjectInfo:
    """What a store knows about one object without reading it whole. `etag` changes when the
    object is replaced; `checksum` is the BLAKE3 hex digest of its bytes (the stored one on
    object storage, None when the object was written without one or when listing)."""

    key: str
    size: int
    modified: datetime.datetime
    etag: str | None = None
    checksum: str | None = None


@runtime_checkable
class Store(Protocol):
    """Objects under keys. Implementations: `LocalStore` (a folder), `ObjectStore` (a bucket).
    Every failure is one of `storage.errors`."""

    def get(self, key: str, expected_checksum: str | None = None) -> bytes:
        """The object's bytes; with `expected_checksum`, CorruptObject unless they match it."""

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes from `start` (fewer at the end of the object)."""

    def open_read(self, key: str) -> BinaryIO:
        """A seekable binary reader for a large object (`read`, `seek`, `tell`, `close`)."""

    def copy_to(self, key: str, sink: BinaryIO, *, etag: str | None = None) -> str:
        """Stream the whole object into `sink` (one request on object storage, not ranged
        reads: 438 MB in 0.8 s against 7.3 s through `open_read` on loopback); returns the
        BLAKE3 of the bytes copied. With `etag` (an object's, from a listing), ObjectChanged
        when the object is no longer that one."""

    def put(self, key: str, data: bytes | Path, *, overwrite: bool = False, checksum: str | None = None) -> str:
        """Write `data` (bytes, or a local file's contents) under `key`, returning its checksum.
        Create-only unless `overwrite`: AlreadyExists if the key holds other bytes (the same
        bytes again are not an error, so a retried write of a part under a fresh key is safe).
        `checksum`: the BLAKE3 of `data` when the caller has it (a part hashed as it was
        written), so that the file is not read once more to hash it."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create `key` with `data` only if absent: True if this call created it, False if the
        key was taken (see the module's docstring for a lost response)."""

    def exists(self, key: str) -> bool:
        """Whether the object is there (one request; nothing is read or digested)."""

    def head(self, key: str) -> ObjectInfo:
        """Size, modification time, etag and checksum of one object (NotFound if absent)."""

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object below the folder `prefix` ("log" lists "log/1", not "logs/1"), by key."""

    def delete(self, key: str) -> None:
        """Remove the object; an absent key is not an error (as on S3)."""
