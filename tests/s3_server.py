"""A real S3 API on loopback for the tests: moto's server, started once per session on a free
port, and a fresh bucket per test with the AWS_* variables pointing at it."""

from __future__ import annotations

import os
import urllib.request
import uuid

import pytest
from benchmarks.object_storage import moto_server
from retrieval_eval.flows.job.prefect_settings import free_port  # noqa: F401 (tests take it from here)
from retrieval_eval.flows.storage import open_store


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory):
    """The URL of a moto S3 server running for the whole session (its request log is
    moto*/server.log under the session's temporary folder)."""
    with moto_server(tmp_path_factory.mktemp("moto") / "server.log") as server:
        yield server.endpoint


@pytest.fixture
def s3_bucket(moto_endpoint, monkeypatch) -> str:
    """A fresh, empty bucket on the session's moto server; the AWS_* variables of this test
    point at it (the same chain a user's environment would give)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    request = urllib.request.Request(f"{moto_endpoint}/{bucket}", method="PUT")
    urllib.request.urlopen(request, timeout=10).close()
    return bucket


@pytest.fixture(params=["local", "s3"])
def store_under_test(request, tmp_path):
    """(store, key prefix) of a local folder and of a bucket on the loopback S3, opened from a
    location as a user gives it; a test using it runs once against each."""
    if request.param == "local":
        return open_store(str(tmp_path / "store"))
    bucket = request.getfixturevalue("s3_bucket")
    return open_store(f"s3://{bucket}/tests")
