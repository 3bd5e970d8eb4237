"""Locations as a user gives them: local paths, file://, s3://, gs://, az:// and abfs://,
parsed into scheme, bucket and key prefix; user information in a URI is refused without
being repeated."""

from __future__ import annotations

import os

import pytest
from retrieval_eval.flows.storage import Location, LocationError, join_key, open_store, parse_location
from retrieval_eval.flows.storage.locations import strip_userinfo


@pytest.mark.parametrize(("text", "expected"), [
    ("s3://bucket/runs/nightly/", Location("s3", "bucket", "runs/nightly")),
    ("s3://bucket", Location("s3", "bucket", "")),
    ("gs://bucket/wh", Location("gs", "bucket", "wh")),
    ("gcs://bucket/wh", Location("gs", "bucket", "wh")),
    ("az://container/wh", Location("az", "container", "wh")),
    ("abfss://container@acct.dfs.core.windows.net/wh", Location("az", "container", "wh", account="acct")),
    ("file:///data/runs", Location("file", "", "data/runs")),
    ("file://localhost/data/a%20b", Location("file", "", "data/a b")),
    ("/data/runs/", Location("file", "", "data/runs")),
])
def test_locations_parse_into_scheme_bucket_and_prefix(text, expected):
    assert parse_location(text) == expected


def test_a_relative_path_is_taken_from_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_location("runs/x") == Location("file", "", join_key(str(tmp_path), "runs/x"))
    assert str(parse_location("runs/x")) == os.path.join(str(tmp_path), "runs/x")


@pytest.mark.parametrize("text", ["", "ftp://host/x", "s3:///no-bucket", "file://otherhost/x"])
def test_unusable_locations_are_refused(text):
    with pytest.raises(LocationError):
        parse_location(text)


def test_user_information_in_a_uri_is_refused_without_repeating_it():
    with pytest.raises(LocationError) as refused:
        parse_location("s3://AKIAEXAMPLE:hunter2secret@bucket/x")
    assert "hunter2secret" not in str(refused.value) and "AKIAEXAMPLE" not in str(refused.value)
    assert "environment" in str(refused.value)


def test_join_and_render():
    location = parse_location("s3://bucket/wh")
    assert location.join("_log", "00001.json") == Location("s3", "bucket", "wh/_log/00001.json")
    assert str(location.join("/parts/", "a.parquet")) == "s3://bucket/wh/parts/a.parquet"
    assert join_key("", "a/", "/b", "") == "a/b"
    assert strip_userinfo("GET http://user:pw@127.0.0.1:9000/b/k failed") == "GET http://127.0.0.1:9000/b/k failed"


def test_open_store_gives_the_store_and_the_prefix_inside_it():
    store, prefix = open_store("s3://bucket/wh/x")
    assert (str(store), prefix) == ("s3://bucket", "wh/x")
    store, prefix = open_store("/data/wh")
    assert (str(store), prefix) == ("/", "data/wh")
