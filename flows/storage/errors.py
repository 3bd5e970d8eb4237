"""The failures of a store, modelled: every store (local folder or object storage) raises
these and nothing of its library, with messages that name the location and key but never a
credential."""

from __future__ import annotations

import os

from .locations import strip_userinfo

# Variables of the clouds' credential chains whose values are secrets.
SECRET_VARIABLES = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
)


class StoreError(Exception):
    """A store operation failed; the message names the location and key."""


class NotFound(StoreError):
    """The key (or its bucket) does not exist."""


class AlreadyExists(StoreError):
    """A create-only write found the key taken."""


class StoreUnavailable(StoreError):
    """A transient failure (network, timeout, 5xx, throttling) that outlasted the retries.
    For a write it is unknown whether the object landed: read the key back to tell."""


class AccessDenied(StoreError):
    """The credentials were refused or are missing for this operation."""


class ObjectChanged(StoreError):
    """An object read after it was listed is no longer the one listed (another ETag)."""


class CorruptObject(StoreError):
    """The bytes read do not match the checksum they were written with."""


def without_secrets(text: str) -> str:
    """`text` (a library's message) with user information stripped from its URLs and the value
    of every secret variable set in the environment masked."""
    text = strip_userinfo(text)
    for name in SECRET_VARIABLES:
        value = os.environ.get(name, "")
        if len(value) >= 4:
            text = text.replace(value, "***")
    return text
