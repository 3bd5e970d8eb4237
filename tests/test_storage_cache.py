"""The local cache of immutable objects: the second read of an object comes from the cache
without asking the store, a corrupted object never enters it, and it stays under its size
bound by evicting the least recently used files."""

from __future__ import annotations

import os

import pytest
from retrieval_eval.flows.storage import CorruptObject, LocalStore, join_key
from retrieval_eval.flows.storage.cache import cache_folder, cached


class CountingStore:
    """A store that counts the calls that reach it."""

    def __init__(self, store) -> None:
        self.store = store
        self.calls = 0

    def __str__(self) -> str:
        return str(self.store)

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return method(*args, **kwargs)

        return counted


def test_second_read_does_not_touch_the_store(store_under_test, tmp_path):
    store, prefix = store_under_test
    key = join_key(prefix, "parts/p1.parquet")
    data = os.urandom(100_000)
    checksum = store.put(key, data)
    counting = CountingStore(store)

    first = cached(counting, key, checksum, folder=tmp_path / "cache")
    assert first.read_bytes() == data and counting.calls == 1
    second = cached(counting, key, checksum, folder=tmp_path / "cache")
    assert second == first and counting.calls == 1


def test_a_corrupted_object_is_not_cached(store_under_test, tmp_path):
    store, prefix = store_under_test
    key = join_key(prefix, "parts/p2.parquet")
    checksum = store.put(key, b"original bytes")
    store.put(key, b"other bytes", overwrite=True)
    with pytest.raises(CorruptObject):
        cached(store, key, checksum, folder=tmp_path / "cache")
    assert not any(path.is_file() for path in (tmp_path / "cache").rglob("*"))


def test_least_recently_used_files_are_evicted_beyond_the_bound(tmp_path):
    store = LocalStore(tmp_path / "store")
    checksums = [store.put(f"part-{n}", bytes([n]) * 1000) for n in range(4)]
    folder = tmp_path / "cache"
    for checksum, n in zip(checksums[:3], range(3)):
        cached(store, f"part-{n}", checksum, folder=folder, max_bytes=3000)
        os.utime(folder / checksum[:2] / checksum, ns=(n * 10**9, n * 10**9))  # part-0 oldest
    cached(store, "part-0", checksums[0], folder=folder, max_bytes=3000)  # a hit: now the newest
    cached(store, "part-3", checksums[3], folder=folder, max_bytes=3000)  # 4,000 bytes: one goes
    kept = sorted(path.name for path in folder.rglob("*") if path.is_file())
    assert kept == sorted([checksums[0], checksums[2], checksums[3]])  # part-1 was least recent


def test_cache_folder_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_folder() == tmp_path / "retrieval-eval" / "objects"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_folder() == tmp_path / "home" / ".cache" / "retrieval-eval" / "objects"
