"""A store in a bucket: S3 (or an S3-compatible endpoint), Google Cloud Storage or Azure Blob
Storage, through obstore. Chosen on measurement (benchmarks/results/object-store-libraries.md):
obstore reads a 438 MB object 4× faster than s3fs or pyarrow.fs (0.78 s against 3.3–3.7 s),
is 2–4× faster on small objects, and has the conditional create (put mode "create") that
pyarrow.fs lacks. Each object carries its BLAKE3 checksum as metadata ("blake3").

Credentials come from each cloud's standard chain. S3: botocore's (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE and the config files, SSO, instance
roles), with AWS_REGION / AWS_DEFAULT_REGION and AWS_ENDPOINT_URL (plain http allowed, for
an S3-compatible store on loopback). Where the chain's first link decides alone (keys and a
region in the environment, no profile named), they are read from there without importing
botocore (0.1 s, before the first request). GCS and Azure: obstore's own readers of GOOGLE_*
and AZURE_* variables and application default credentials.
"""

from __future__ import annotations

import datetime
import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import obstore
from obstore import exceptions as obstore_errors
from obstore.store import AzureStore, GCSStore, S3Store

from .errors import (AccessDenied, AlreadyExists, CorruptObject, NotFound, ObjectChanged, StoreError, StoreUnavailable,
                     without_secrets)
from .locations import Location, strip_userinfo
from .hashing import checksum_of_bytes, checksum_of_chunks, checksum_of_file
from .store import CHECKSUM_METADATA, ObjectInfo

READ_BUFFER = 32 * 1024 * 1024
STREAM_CHUNK = 8 * 1024 * 1024
_CREDENTIALS_LIFETIME = datetime.timedelta(minutes=5)
_RANGE_NOT_SATISFIABLE = "416 Range Not Satisfiable"


class ObjectStore:
    """Objects in one bucket (`location.bucket`; keys are full keys inside it). A request
    that cannot connect or keeps failing transiently gives up after `retry_seconds` with
    StoreUnavailable."""

    def __init__(self, location: Location, *, connect_seconds: float = 5.0, request_seconds: float = 300.0,
                 retry_seconds: float = 20.0, max_retries: int = 3) -> None:
        if location.is_local:
            raise StoreError(f"{location}: a local path is a LocalStore, not an object store")
        self.location = location
        self.endpoint: str | None = None
        client_options = {"connect_timeout": f"{connect_seconds}s", "timeout": f"{request_seconds}s"}
        retry_config = {
            "max_retries": max_retries,
            "retry_timeout": datetime.timedelta(seconds=retry_seconds),
            "backoff": {"init_backoff": datetime.timedelta(milliseconds=100),
                        "max_backoff": datetime.timedelta(seconds=2), "base": 2},
        }
        if location.scheme == "s3":
            self._client = self._s3_client(client_options, retry_config)
        elif location.scheme == "gs":
            self._client = GCSStore(location.bucket, client_options=client_options, retry_config=retry_config)
        else:
            account = {"account_name": location.account} if location.account else {}
            self._client = AzureStore(location.bucket, client_options=client_options, retry_config=retry_config, **account)

    def _s3_client(self, client_options: dict, retry_config: dict) -> S3Store:
        settings = _s3_settings_from_environment() or _s3_settings_from_botocore()
        self.endpoint = settings.get("endpoint")
        options = dict(client_options, allow_http=bool(self.endpoint and self.endpoint.startswith("http://")))
        return S3Store(self.location.bucket, client_options=options, retry_config=retry_config, **settings)

    def __str__(self) -> str:
        bucket = f"{self.location.scheme}://{self.location.bucket}"
        return f"{bucket} (endpoint {strip_userinfo(self.endpoint)})" if self.endpoint else bucket

    def __repr__(self) -> str:
        return f"ObjectStore({str(self)!r})"

    def _where(self, key: str) -> str:
        return f"{self.location.scheme}://{self.location.bucket}/{key}"

    def get(self, key: str, expected_checksum: str | None = None) -> bytes:
        with _failures(self._where(key)):
            data = bytes(obstore.get(self._client, key).bytes())
        if expected_checksum is not None and checksum_of_bytes(data) != expected_checksum:
            raise CorruptObject(f"{self._where(key)}: the bytes do not match their checksum {expected_checksum}")
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        with _failures(self._where(key)):
            try:
                return bytes(obstore.get_range(self._client, key, start=start, length=length))
            except obstore_errors.GenericError as error:
                # A start at or past the end: 416 from S3; an empty read, as from a file.
                if _RANGE_NOT_SATISFIABLE in str(error):
                    return b""
                raise

    def open_read(self, key: str) -> BinaryIO:
        with _failures(self._where(key)):
            handle = obstore.open_reader(self._client, key, buffer_size=READ_BUFFER)
        return io.BufferedReader(_ObjectReader(handle, self._where(key)), buffer_size=READ_BUFFER)

    def copy_to(self, key: str, sink: BinaryIO, *, etag: str | None = None) -> str:
        options = {"if_match": etag} if etag else None
        try:
            with _failures(self._where(key)):
                result = obstore.get(self._client, key, options=options)
                return checksum_of_chunks(result.stream(min_chunk_size=STREAM_CHUNK), sink)
        except AlreadyExists:  # a GET fails its precondition only: the ETag is another one
            raise ObjectChanged(f"{self._where(key)}: changed since it was listed (its ETag is no longer "
                                f"{etag}); run again") from None

    def put(self, key: str, data: bytes | Path, *, overwrite: bool = False, checksum: str | None = None) -> str:
        if checksum is None:
            checksum = checksum_of_file(data) if isinstance(data, Path) else checksum_of_bytes(data)
        try:
            self._put(key, data, checksum, mode="overwrite" if overwrite else "create")
        except AlreadyExists:
            if self.head(key).checksum != checksum:
                raise
        return checksum

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self._put(key, data, checksum_of_bytes(data), mode="create")
        except AlreadyExists:
            return False
        return True

    def _put(self, key: str, data: bytes | Path, checksum: str, *, mode: str) -> None:
        with _failures(self._where(key)):
            obstore.put(self._client, key, data, attributes={CHECKSUM_METADATA: checksum}, mode=mode,
                        use_multipart=None if mode == "overwrite" else False)

    def exists(self, key: str) -> bool:
        try:
            self.head(key)
        except NotFound:
            return False
        return True

    def head(self, key: str) -> ObjectInfo:
        with _failures(self._where(key)):
            result = obstore.get(self._client, key, options={"head": True})
        return _info(result.meta, result.attributes.get(CHECKSUM_METADATA))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        with _failures(self._where(prefix)):
            found = [_info(meta, None) for batch in obstore.list(self._client, prefix or None) for meta in batch]
        return iter(sorted(found, key=lambda info: info.key))

    def delete(self, key: str) -> None:
        with _failures(self._where(key)):
            obstore.delete(self._client, key)


_PROFILE_OR_EXPIRY = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CREDENTIAL_EXPIRATION")


def _s3_settings_from_environment() -> dict | None:
    """The S3 client's settings when the environment alone decides them, as botocore's chain
    would: its first link, the AWS_* keys, is set, and a region; no profile is named (one may
    give an endpoint) and no expiry (keys botocore would refresh). None otherwise."""
    region = _environment_region()
    if _environment_keys() is None or not region or any(os.environ.get(name) for name in _PROFILE_OR_EXPIRY):
        return None
    settings = {"region": region, "credential_provider": _Credentials(_environment_keys)}
    endpoint = _environment_endpoint()
    if endpoint:
        settings["endpoint"] = endpoint
    return settings


def _s3_settings_from_botocore() -> dict:
    """The S3 client's settings from botocore's whole chain: the config files, a profile's
    region and endpoint, SSO, instance and container roles; unsigned requests when it finds
    no credentials (a public bucket)."""
    import botocore.session  # deferred: 0.1 s of imports that keys in the environment do without

    session = botocore.session.Session()
    profile = session.get_scoped_config() if os.environ.get("AWS_PROFILE") or session.profile else {}
    region = _environment_region() or session.get_config_variable("region") or "us-east-1"
    settings: dict = {"region": region}
    endpoint = _environment_endpoint() or profile.get("endpoint_url")
    if endpoint:
        settings["endpoint"] = endpoint
    if session.get_credentials() is None:
        settings["skip_signature"] = True
    else:
        def botocore_keys() -> tuple[str, str, str | None] | None:
            credentials = session.get_credentials()
            frozen = credentials.get_frozen_credentials() if credentials is not None else None
            return (frozen.access_key, frozen.secret_key, frozen.token) if frozen is not None else None

        settings["credential_provider"] = _Credentials(botocore_keys)
    return settings


def _environment_region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


def _environment_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def _environment_keys() -> tuple[str, str, str | None] | None:
    """(access key, secret key, session token) of the AWS_* variables, or None."""
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not (key and secret):
        return None
    # botocore's order of the two names of a session token (EnvProvider.TOKENS)
    return key, secret, os.environ.get("AWS_SECURITY_TOKEN") or os.environ.get("AWS_SESSION_TOKEN") or None


class _Credentials:
    """obstore's credential provider over a chain's keys, asked again every few minutes (so
    that rotating credentials such as SSO or instance roles keep working; keys in the
    environment are read there again). Neither the client's settings nor its repr show a key."""

    def __init__(self, keys: Callable[[], tuple[str, str, str | None] | None]) -> None:
        self._keys = keys

    def __repr__(self) -> str:
        return "_Credentials()"

    def __call__(self) -> dict:
        keys = self._keys()
        if keys is None:
            raise AccessDenied("no AWS credentials found in the environment, AWS_PROFILE or the config files")
        access_key, secret_key, token = keys
        return {
            "access_key_id": access_key,
            "secret_access_key": secret_key,
            "token": token,
            "expires_at": datetime.datetime.now(datetime.UTC) + _CREDENTIALS_LIFETIME,
        }


class _ObjectReader(io.RawIOBase):
    """A seekable raw reader over obstore's ReadableFile, failing with the store's errors."""

    def __init__(self, handle, where: str) -> None:
        self._handle = handle
        self._where = where

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        with _failures(self._where):
            block = self._handle.read(len(buffer))
        view = memoryview(block)
        buffer[: len(view)] = view
        return len(view)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()

    def close(self) -> None:
        if not self.closed:
            self._handle.close()
        super().close()


def _info(meta: dict, checksum: str | None) -> ObjectInfo:
    return ObjectInfo(key=meta["path"], size=meta["size"], modified=meta["last_modified"],
                      etag=meta.get("e_tag"), checksum=checksum)


@contextmanager
def _failures(where: str) -> Iterator[None]:
    """Turns obstore's errors into the store's, with the library's reason (secrets masked)."""
    try:
        yield
    except (obstore_errors.NotFoundError, FileNotFoundError):
        raise NotFound(f"{where}: not found") from None
    except (obstore_errors.AlreadyExistsError, obstore_errors.PreconditionError):
        raise AlreadyExists(f"{where}: already exists") from None
    except (obstore_errors.PermissionDeniedError, obstore_errors.UnauthenticatedError) as error:
        raise AccessDenied(f"{where}: access denied ({_reason(error)})") from None
    except obstore_errors.GenericError as error:
        raise StoreUnavailable(f"{where}: store unavailable ({_reason(error)})") from None
    except obstore_errors.BaseError as error:
        raise StoreError(f"{where}: {_reason(error)}") from None


def _reason(error: Exception) -> str:
    """The first line of a library's message, secrets masked."""
    return without_secrets(str(error).split("\n", 1)[0])[:300]
