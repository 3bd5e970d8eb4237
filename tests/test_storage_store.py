"""The store's contract, one test body run against a local folder and against a bucket on a
real S3 API on loopback (moto's server): whole, ranged and streamed reads, create-only
writes, put-if-absent, listing by folder prefix, idempotent delete, stored checksums."""

from __future__ import annotations

import io

import obstore
import pytest
from blake3 import blake3
from retrieval_eval.flows.storage import AlreadyExists, CorruptObject, NotFound, join_key
from retrieval_eval.flows.storage.hashing import checksum_of_bytes

# BLAKE3 of b"hello" (reference: `b3sum` of a file holding those five bytes).
HELLO_BLAKE3 = "ea8f163db38682925e4491c5e58d4bb3506ef8c14eb78a86e908c5624a67200f"


def test_put_then_get_range_list_and_delete(store_under_test):
    store, prefix = store_under_test
    data = bytes(range(256)) * 4  # 1,024 bytes: byte i is i % 256
    assert store.put(join_key(prefix, "parts/a.bin"), data) == checksum_of_bytes(data)
    store.put(join_key(prefix, "parts/b.bin"), b"b")
    store.put(join_key(prefix, "partsX/c.bin"), b"c")

    assert store.get(join_key(prefix, "parts/a.bin")) == data
    assert store.get_range(join_key(prefix, "parts/a.bin"), 250, 10) == bytes([250, 251, 252, 253, 254, 255, 0, 1, 2, 3])
    assert store.get_range(join_key(prefix, "parts/a.bin"), 1020, 100) == bytes([252, 253, 254, 255])
    assert store.get_range(join_key(prefix, "parts/a.bin"), 1024, 10) == b""
    with store.open_read(join_key(prefix, "parts/a.bin")) as reader:
        reader.seek(512)
        assert reader.read(3) == bytes([0, 1, 2])
        assert reader.tell() == 515

    copied = io.BytesIO()
    assert store.copy_to(join_key(prefix, "parts/a.bin"), copied) == blake3(bytes(range(256)) * 4).hexdigest()
    assert copied.getvalue() == bytes(range(256)) * 4
    assert store.exists(join_key(prefix, "parts/a.bin")) and not store.exists(join_key(prefix, "parts/c.bin"))
    with pytest.raises(NotFound):
        store.copy_to(join_key(prefix, "parts/c.bin"), io.BytesIO())

    listed = list(store.list(join_key(prefix, "parts")))
    assert [info.key for info in listed] == [join_key(prefix, "parts/a.bin"), join_key(prefix, "parts/b.bin")]
    assert [info.size for info in listed] == [1024, 1]

    store.delete(join_key(prefix, "parts/a.bin"))
    store.delete(join_key(prefix, "parts/a.bin"))  # absent: not an error, as on S3
    with pytest.raises(NotFound):
        store.get(join_key(prefix, "parts/a.bin"))
    with pytest.raises(NotFound):
        store.head(join_key(prefix, "parts/a.bin"))
    assert [info.key for info in store.list(join_key(prefix, "parts"))] == [join_key(prefix, "parts/b.bin")]


def test_put_if_absent_creates_once(store_under_test):
    store, prefix = store_under_test
    key = join_key(prefix, "entries/00000000000000000001.json")
    assert store.put_if_absent(key, b'{"commit": "first"}') is True
    assert store.put_if_absent(key, b'{"commit": "second"}') is False
    assert store.put_if_absent(key, b'{"commit": "first"}') is False
    assert store.get(key) == b'{"commit": "first"}'


def test_put_is_create_only_unless_overwriting(store_under_test):
    store, prefix = store_under_test
    key = join_key(prefix, "parts/one.parquet")
    store.put(key, b"hello")
    store.put(key, b"hello")  # the same bytes again: a retried write of a part, not an error
    with pytest.raises(AlreadyExists):
        store.put(key, b"other bytes")
    store.put(key, b"replaced", overwrite=True)
    assert store.get(key) == b"replaced"


def test_put_of_a_local_file(store_under_test, tmp_path):
    store, prefix = store_under_test
    source = tmp_path / "hello.txt"
    source.write_bytes(b"hello")
    assert store.put(join_key(prefix, "from-file"), source) == HELLO_BLAKE3
    assert store.get(join_key(prefix, "from-file")) == b"hello"


def test_checksum_is_stored_and_a_corrupted_object_is_detected(store_under_test, request):
    store, prefix = store_under_test
    key = join_key(prefix, "parts/hello.bin")
    assert store.put(key, b"hello") == HELLO_BLAKE3
    info = store.head(key)
    assert (info.size, info.checksum) == (5, HELLO_BLAKE3)
    assert store.get(key, expected_checksum=HELLO_BLAKE3) == b"hello"

    corrupt_behind_the_stores_back(store, key, b"jello")
    with pytest.raises(CorruptObject, match="do not match"):
        store.get(key, expected_checksum=HELLO_BLAKE3)


def corrupt_behind_the_stores_back(store, key: str, data: bytes) -> None:
    """Replace an object's bytes without going through put (so a stored checksum, if any,
    still claims the old bytes): a file rewritten in place, or a raw S3 PUT that copies
    the old metadata."""
    if hasattr(store, "path_of"):
        store.path_of(key).write_bytes(data)
        return
    stored = store.head(key).checksum
    obstore.put(store._client,  # the raw client under the ObjectStore: the way around it
                key, data, attributes={"blake3": stored})
    assert store.head(key).checksum == stored
