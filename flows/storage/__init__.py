"""The storage layer, the lowest of flows/ (it imports nothing else of the project): where
data lives (`locations`), the `Store` interface and its two implementations (`LocalStore`,
a folder; `ObjectStore`, a bucket), their errors, a local cache of immutable objects, and
DuckDB's view of the files a log names (`duckdb_filesystem`). `open_store` turns a location given by a
user into a store and the key prefix inside it."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from .errors import AccessDenied, AlreadyExists, CorruptObject, NotFound, StoreError, StoreUnavailable
from .local_store import LocalStore
from .locations import Location, LocationError, is_uri, join_key, parse_location
from .store import ObjectInfo, Store

__all__ = [
    "AccessDenied", "AlreadyExists", "CorruptObject", "Location", "LocationError", "LocalStore",
    "NotFound", "ObjectInfo", "Store", "StoreError", "StoreUnavailable", "is_uri", "join_key", "open_store",
    "parse_location",
]


def open_store(location: str | Location) -> tuple[Store, str]:
    """The store that holds `location` and the key prefix of the location inside it. A local
    path is a LocalStore at the filesystem's root with the absolute path as prefix (so keys
    read the same as on a bucket); a bucket URI is an ObjectStore of that bucket."""
    if isinstance(location, str):
        location = parse_location(location)
    if location.is_local:
        return LocalStore(Path("/")), location.path
    return _bucket_store(location.scheme, location.bucket, location.account, _environment()), location.path


# A client per bucket and process, not per file: making one (a botocore session and an obstore
# client) costs about 8 ms, which 300 manifests read one by one paid 300 times.
_CLIENT_VARIABLES = ("AWS_", "GOOGLE_", "AZURE_")


def _environment() -> str:
    """A digest of the variables a client is configured from: another endpoint, profile or
    key (a test's, a rotated one) gets a client of its own."""
    settings = sorted((name, value) for name, value in os.environ.items() if name.startswith(_CLIENT_VARIABLES))
    return hashlib.sha256(repr(settings).encode()).hexdigest()


@functools.lru_cache(maxsize=32)
def _bucket_store(scheme: str, bucket: str, account: str | None, environment: str) -> Store:
    try:
        from .object_store import ObjectStore  # deferred: the s3 extra is optional; a local install never imports it
    except ImportError:
        raise StoreError(f"{scheme}://{bucket}: object storage needs the s3 extra: pip install 'retrieval-eval[s3]'") from None
    return ObjectStore(Location(scheme=scheme, bucket=bucket, path="", account=account))
