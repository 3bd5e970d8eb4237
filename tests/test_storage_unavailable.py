"""A store whose server is down fails with StoreUnavailable, within a bounded time (the
connect timeout and the retries' deadline), not with the library's error or a hang."""

from __future__ import annotations

import time

import pytest
from retrieval_eval.flows.storage import StoreUnavailable, open_store
from s3_server import free_port

# ObjectStore's retry deadline is 20 s; a refused connection fails far sooner.
BOUND_SECONDS = 25


def test_a_server_that_is_down_is_store_unavailable(s3_bucket, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    store, prefix = open_store(f"s3://{s3_bucket}/wh")
    for operation in (lambda: store.get("wh/a"), lambda: store.put_if_absent("wh/a", b"a"),
                      lambda: list(store.list("wh"))):
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="store unavailable"):
            operation()
        assert time.monotonic() - started < BOUND_SECONDS
