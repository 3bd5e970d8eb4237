"""A real S3 API on loopback for the tests: moto's server, started once per session on a free
port, and a fresh bucket per test with the AWS_* variables pointing at it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from retrieval_eval.flows.storage import open_store

READY_SECONDS = 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory):
    """The URL of a moto S3 server running for the whole session."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = open(tmp_path_factory.mktemp("moto") / "server.log", "wb")
    server_script = Path(sys.executable).with_name("moto_server")
    command = [str(server_script)] if server_script.exists() else [sys.executable, "-m", "moto.server"]
    server = subprocess.Popen([*command, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not answer on {endpoint}; see {log.name}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


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
