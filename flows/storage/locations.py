"""Where data lives, as the user wrote it: a local path, `file://…`, `s3://bucket/prefix`,
`gs://bucket/prefix`, `az://container/prefix` or `abfs[s]://container@account.dfs.core.windows.net/prefix`,
parsed into a `Location` (scheme, bucket, key prefix). A location never carries a secret:
credentials come from each cloud's own chain, and user information in a URI is refused."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from urllib.parse import unquote, urlsplit

SCHEMES = {"file": "file", "s3": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az", "abfss": "az"}

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


class LocationError(ValueError):
    """A location that cannot be parsed; the message never repeats user information."""


@dataclass(frozen=True)
class Location:
    """A parsed location. `scheme` is "file", "s3", "gs" or "az"; `bucket` is the bucket
    (the container on Azure, "" for a local path); `path` is the key prefix inside it, with
    no leading or trailing "/" (for a local path: the absolute path without its leading "/").
    `account` is the Azure storage account when the URI names it."""

    scheme: str
    bucket: str
    path: str
    account: str | None = None

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    def join(self, *parts: str) -> Location:
        """This location with `parts` appended to its key prefix."""
        return replace(self, path=join_key(self.path, *parts))

    def __str__(self) -> str:
        if self.is_local:
            return "/" + self.path
        return f"{self.scheme}://{self.bucket}/{self.path}".rstrip("/")


def is_uri(location: str | os.PathLike) -> bool:
    """Whether a location names an object in a bucket (`s3://…`), not a local path (a
    `file://` URI names a local path)."""
    text = os.fspath(location)
    return "://" in text and not text.lower().startswith("file://")


def join_key(*parts: str) -> str:
    """Keys joined with "/", ignoring empty parts and the slashes at their ends."""
    return "/".join(part.strip("/") for part in parts if part.strip("/"))


def strip_userinfo(text: str) -> str:
    """`text` with the user information (`user:password@`) removed from every URL in it."""
    return _USERINFO.sub(r"\g<scheme>", text)


def parse_location(text: str) -> Location:
    """Parse a location given by a user (see the module's docstring). A relative local path is
    taken from the current directory; `~` is expanded."""
    if not text or not text.strip():
        raise LocationError("empty location: give a local path or an s3://, gs://, az:// or file:// URI")
    if "://" not in text:
        return _local(os.path.abspath(os.path.expanduser(text)))
    given_scheme = text.split("://", 1)[0].lower()
    scheme = SCHEMES.get(given_scheme)
    if scheme is None:
        raise LocationError(
            f"unknown scheme {given_scheme!r} in location {strip_userinfo(text)!r}: "
            "use a local path or s3://, gs://, az://, abfs:// or file://")
    parts = urlsplit(text)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise LocationError(f"file:// location names a host: {strip_userinfo(text)!r}; use file:///absolute/path")
        return _local(os.path.abspath(unquote(parts.path)))
    netloc, account = parts.netloc, None
    if given_scheme in ("abfs", "abfss") and "@" in netloc:
        netloc, host = netloc.split("@", 1)
        account = host.split(".", 1)[0]
    if "@" in netloc or parts.password is not None:
        raise LocationError(
            f"a {given_scheme}:// location carries user information; credentials come from the "
            "environment (for S3: AWS_* variables, AWS_PROFILE), never from the location")
    if not netloc:
        raise LocationError(f"no bucket in location {text!r}: use {given_scheme}://bucket/prefix")
    return Location(scheme=scheme, bucket=netloc, path=join_key(unquote(parts.path)), account=account)


def _local(absolute: str) -> Location:
    return Location(scheme="file", bucket="", path=absolute.lstrip("/"))
