"""No secret reaches a message: the repr and str of stores and locations, and the message of
every error a store raises, are free of the secret access key and of an endpoint's user
information."""

from __future__ import annotations

import pytest
from retrieval_eval.flows.storage import AlreadyExists, CorruptObject, NotFound, StoreError, join_key, open_store
from s3_server import free_port

MARKER = "SECRET-MARKER-7f3a91"


def raised(action) -> StoreError:
    with pytest.raises(StoreError) as caught:
        action()
    return caught.value


def test_no_secret_in_stores_locations_or_errors(s3_bucket, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MARKER)
    store, prefix = open_store(f"s3://{s3_bucket}/wh")
    key = join_key(prefix, "a")
    checksum = store.put(key, b"a")
    errors = [
        raised(lambda: store.get(join_key(prefix, "missing"))),
        raised(lambda: store.put(key, b"b")),
        raised(lambda: store.get(key, expected_checksum=checksum[::-1])),
    ]
    assert [type(error) for error in errors] == [NotFound, AlreadyExists, CorruptObject]

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://user:{MARKER}@127.0.0.1:{free_port()}")
    down, _ = open_store(f"s3://{s3_bucket}/wh")
    errors.append(raised(lambda: down.get(key)))

    messages = [repr(store), str(store), repr(down), str(down), repr(store.location), str(store.location)]
    messages += [str(error) for error in errors] + [repr(error) for error in errors]
    assert all(MARKER not in message for message in messages), [m for m in messages if MARKER in m]
    assert "127.0.0.1" in str(down)
