"""A local cache of immutable objects (warehouse parts never change once written), addressed
by their BLAKE3 checksum: a second read of the same part comes from local disk, not the
store. Each file is written aside and renamed into place once its bytes match the checksum;
the cache is kept under a size bound by evicting the least recently used files."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from .errors import CorruptObject
from .store import Store

DEFAULT_MAX_BYTES = 10 * 1024**3


def cache_folder() -> Path:
    """$XDG_CACHE_HOME/retrieval-eval/objects, or ~/.cache/retrieval-eval/objects."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "retrieval-eval", "objects")


def cached(store: Store, key: str, checksum: str, *, folder: Path | None = None,
           max_bytes: int = DEFAULT_MAX_BYTES) -> Path:
    """A local file holding the object `key` of `store`, whose BLAKE3 is `checksum`: from the
    cache when present (the store is not asked), else read once from the store, checked
    (CorruptObject if its bytes differ) and kept, evicting the least recently used files
    beyond `max_bytes`."""
    folder = folder or cache_folder()
    path = folder / checksum[:2] / checksum
    try:
        os.utime(path)
        return path
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{checksum}.{uuid.uuid4().hex[:12]}.aside")
    try:
        with open(aside, "wb") as sink:
            found = store.copy_to(key, sink)
        if found != checksum:
            raise CorruptObject(f"{store}: {key}: the bytes read do not match their checksum {checksum}")
        os.replace(aside, path)
    finally:
        aside.unlink(missing_ok=True)
    _evict(folder, max_bytes, keep=path)
    return path


def keep(path: Path, checksum: str, *, folder: Path | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> Path:
    """Move a local file whose BLAKE3 is `checksum` (one just put to a store) into the cache,
    so that a read of that object on this machine needs no request."""
    folder = folder or cache_folder()
    target = folder / checksum[:2] / checksum
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, target)
    _evict(folder, max_bytes, keep=target)
    return target


def _evict(folder: Path, max_bytes: int, keep: Path) -> None:
    """Remove the least recently used cached files until the total fits `max_bytes`."""
    entries = []
    for shard in folder.iterdir():
        for path in shard.iterdir() if shard.is_dir() else ():
            if path.name.startswith("."):
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            entries.append((stat.st_mtime_ns, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        if path != keep:
            path.unlink(missing_ok=True)
            total -= size
