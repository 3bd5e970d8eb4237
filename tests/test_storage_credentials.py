"""Where an S3 client's credentials, region and endpoint come from (SPEC 14: each cloud's
standard chain). Keys and a region in the environment, with no profile named, decide alone, as
they do first in botocore's chain, and are read without importing botocore (0.1 s before the
first request of a run); anything else (a profile, the shared files, refreshed keys) goes
through botocore's whole chain. Each way is shown reaching the loopback S3 (tests/s3_server.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from retrieval_eval.flows.storage import join_key, open_store
from retrieval_eval.flows.storage.object_store import _s3_settings_from_botocore, _s3_settings_from_environment

ROUND_TRIP = textwrap.dedent("""
    import sys
    from retrieval_eval.flows.storage import join_key, open_store
    store, prefix = open_store(sys.argv[1])
    key = join_key(prefix, "probe")
    store.put(key, b"probe", overwrite=True)
    assert store.get(key) == b"probe"
    print("botocore" in sys.modules, store.endpoint)
""")


def round_trip(uri: str, env: dict[str, str]) -> tuple[bool, str]:
    """Put and get one object at `uri` in a fresh process with `env`: (whether botocore was
    imported, the endpoint the client used)."""
    done = subprocess.run([sys.executable, "-c", ROUND_TRIP, uri], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    imported, endpoint = done.stdout.split()
    return imported == "True", endpoint


def without_keys(environ) -> dict[str, str]:
    return {name: value for name, value in environ.items()
            if name not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL")}


def test_keys_and_a_region_in_the_environment_reach_the_bucket_without_botocore(s3_bucket, moto_endpoint):
    imported, endpoint = round_trip(f"s3://{s3_bucket}/env", dict(os.environ))
    assert (imported, endpoint) == (False, moto_endpoint)


def test_keys_in_the_shared_files_reach_the_bucket_through_botocores_chain(s3_bucket, moto_endpoint, tmp_path):
    credentials, config = tmp_path / "credentials", tmp_path / "config"
    credentials.write_text("[default]\naws_access_key_id = from-file\naws_secret_access_key = file-secret\n")
    config.write_text("[default]\nregion = us-east-1\n")
    env = dict(without_keys(os.environ), AWS_SHARED_CREDENTIALS_FILE=str(credentials), AWS_CONFIG_FILE=str(config),
               AWS_ENDPOINT_URL=moto_endpoint)
    env.pop("AWS_DEFAULT_REGION", None)
    imported, endpoint = round_trip(f"s3://{s3_bucket}/files", env)
    assert (imported, endpoint) == (True, moto_endpoint)


def test_a_named_profile_gives_its_endpoint_and_region_even_beside_keys_in_the_environment(
        s3_bucket, moto_endpoint, tmp_path, monkeypatch):
    """A profile may name an endpoint (an S3-compatible store) that the environment's keys do
    not: with AWS_PROFILE set, botocore reads it; without it, the request would go to AWS."""
    config = tmp_path / "config"
    config.write_text(f"[profile eval]\nregion = us-east-1\nendpoint_url = {moto_endpoint}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "eval")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    assert _s3_settings_from_environment() is None
    imported, endpoint = round_trip(f"s3://{s3_bucket}/profile", dict(os.environ))
    assert (imported, endpoint) == (True, moto_endpoint)


@pytest.mark.parametrize("variable, value", [
    ("AWS_PROFILE", "eval"), ("AWS_DEFAULT_PROFILE", "eval"), ("AWS_CREDENTIAL_EXPIRATION", "2030-01-01T00:00:00Z"),
    ("AWS_SECRET_ACCESS_KEY", None), ("AWS_DEFAULT_REGION", None),
])
def test_the_environment_decides_alone_only_with_keys_a_region_no_profile_and_no_expiry(s3_bucket, monkeypatch,
                                                                                        variable, value):
    assert _s3_settings_from_environment() is not None
    if value is None:
        monkeypatch.delenv(variable)
    else:
        monkeypatch.setenv(variable, value)
    assert _s3_settings_from_environment() is None


def test_both_ways_give_obstore_the_same_keys_and_hold_none_in_the_clients_settings(s3_bucket, monkeypatch):
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token")
    from_environment, from_botocore = _s3_settings_from_environment(), _s3_settings_from_botocore()
    for settings in (from_environment, from_botocore):
        keys = settings["credential_provider"]()
        assert (keys["access_key_id"], keys["secret_access_key"], keys["token"]) == ("testing", "testing", "session-token")
        assert keys["expires_at"] is not None  # asked again: keys that rotate keep working
        assert "testing" not in repr(settings) and "session-token" not in repr(settings)
    assert {name: value for name, value in from_environment.items() if name != "credential_provider"} == \
        {name: value for name, value in from_botocore.items() if name != "credential_provider"}
    store, prefix = open_store(f"s3://{s3_bucket}/same")
    store.put(join_key(prefix, "a"), b"a")
    assert store.get(join_key(prefix, "a")) == b"a"


@pytest.mark.parametrize("tokens", [
    {"AWS_SESSION_TOKEN": "session"}, {"AWS_SECURITY_TOKEN": "security"},
    {"AWS_SESSION_TOKEN": "session", "AWS_SECURITY_TOKEN": "security"},
])
def test_a_session_token_and_an_s3_endpoint_are_taken_as_botocore_takes_them(s3_bucket, moto_endpoint, monkeypatch,
                                                                            tokens):
    for name, value in tokens.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing answers there
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_endpoint)  # the S3 one wins
    from_environment, from_botocore = _s3_settings_from_environment(), _s3_settings_from_botocore()
    assert from_environment["credential_provider"]()["token"] == from_botocore["credential_provider"]()["token"]
    assert from_environment["endpoint"] == from_botocore["endpoint"] == moto_endpoint
    imported, endpoint = round_trip(f"s3://{s3_bucket}/s3-endpoint", dict(os.environ))
    assert (imported, endpoint) == (False, moto_endpoint)
