"""A store in a local folder: a key is a path below the root. Writes go to a file aside,
flushed, then linked into place (a link fails if the key exists: the local put-if-absent) or
renamed over it (an overwrite), and the folder entry is flushed too. No checksum is stored
beside a local file: it is computed from the bytes when asked."""

from __future__ import annotations

import datetime
import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .errors import AccessDenied, AlreadyExists, CorruptObject, NotFound, StoreError
from .hashing import checksum_of_bytes, checksum_of_file, checksum_of_stream
from .store import ObjectInfo

_ASIDE_SUFFIX = ".aside"


class LocalStore:
    """Objects as files under `root` (a folder; keys are relative "/"-separated paths)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def __str__(self) -> str:
        return str(self.root)

    def path_of(self, key: str) -> Path:
        """The file that holds `key` (StoreError for a key that leaves the root)."""
        segments = key.split("/")
        if not key or key.startswith("/") or any(s in ("", ".", "..") for s in segments):
            raise StoreError(f"{self.root}: not a key of a store: {key!r}")
        return self.root.joinpath(*segments)

    def get(self, key: str, expected_checksum: str | None = None) -> bytes:
        path = self.path_of(key)
        with _failures(path):
            data = path.read_bytes()
        if expected_checksum is not None and checksum_of_bytes(data) != expected_checksum:
            raise CorruptObject(f"{path}: the bytes do not match their checksum {expected_checksum}")
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        path = self.path_of(key)
        with _failures(path), open(path, "rb") as handle:
            handle.seek(start)
            return handle.read(length)

    def open_read(self, key: str) -> BinaryIO:
        path = self.path_of(key)
        with _failures(path):
            return open(path, "rb")

    def copy_to(self, key: str, sink: BinaryIO, *, etag: str | None = None) -> str:
        path = self.path_of(key)  # (a file has no ETag: `etag` is the object stores')
        with _failures(path), open(path, "rb") as handle:
            return checksum_of_stream(handle, sink)

    def put(self, key: str, data: bytes | Path, *, overwrite: bool = False, checksum: str | None = None) -> str:
        path = self.path_of(key)
        if checksum is None:
            checksum = checksum_of_file(data) if isinstance(data, Path) else checksum_of_bytes(data)
        if not self._place(path, data, overwrite=overwrite) and checksum_of_file(path) != checksum:
            raise AlreadyExists(f"{path}: already exists with other bytes")
        return checksum

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._place(self.path_of(key), data, overwrite=False)

    def exists(self, key: str) -> bool:
        return self.path_of(key).is_file()

    def head(self, key: str) -> ObjectInfo:
        path = self.path_of(key)
        with _failures(path):
            stat = path.stat()
            checksum = checksum_of_file(path)
        return _info(key, stat, checksum)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        top = self.path_of(prefix) if prefix.strip("/") else self.root
        found = []
        for folder, _subfolders, files in os.walk(top):
            for name in files:
                if name.startswith(".") and name.endswith(_ASIDE_SUFFIX):
                    continue
                path = Path(folder, name)
                try:
                    stat = path.stat()
                except FileNotFoundError:  # removed since the folder was read (another writer's marker)
                    continue
                found.append(_info(path.relative_to(self.root).as_posix(), stat, None))
        return iter(sorted(found, key=lambda info: info.key))

    def delete(self, key: str) -> None:
        path = self.path_of(key)
        with _failures(path):
            path.unlink(missing_ok=True)

    def _place(self, path: Path, data: bytes | Path, *, overwrite: bool) -> bool:
        """Write `data` aside and move it to `path`; False if `path` existed (not overwriting)."""
        with _failures(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            aside = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}{_ASIDE_SUFFIX}")
            try:
                with open(aside, "wb") as handle:
                    if isinstance(data, Path):
                        with open(data, "rb") as source:
                            shutil.copyfileobj(source, handle, 8 * 1024 * 1024)
                    else:
                        handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                if overwrite:
                    os.replace(aside, path)
                else:
                    try:
                        os.link(aside, path)
                    except FileExistsError:
                        return False
            finally:
                aside.unlink(missing_ok=True)
            fsync_path(path.parent)
        return True


def _info(key: str, stat: os.stat_result, checksum: str | None) -> ObjectInfo:
    return ObjectInfo(
        key=key,
        size=stat.st_size,
        modified=datetime.datetime.fromtimestamp(stat.st_mtime, datetime.UTC),
        etag=f"{stat.st_ino:x}-{stat.st_mtime_ns:x}-{stat.st_size:x}",
        checksum=checksum,
    )


def fsync_path(path: Path) -> None:
    """Flush a file, or a folder's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def _failures(path: Path) -> Iterator[None]:
    """Turns the OS errors of one file operation into the store's errors."""
    try:
        yield
    except FileExistsError:
        raise
    except (FileNotFoundError, NotADirectoryError):
        raise NotFound(f"{path}: not found") from None
    except PermissionError as error:
        raise AccessDenied(f"{path}: {error.strerror}") from None
    except OSError as error:
        kind = AccessDenied if error.errno == errno.EROFS else StoreError
        raise kind(f"{path}: {error.strerror}") from None
