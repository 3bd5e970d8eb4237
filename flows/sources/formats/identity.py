"""The identity of a retrieved item or a gold entry when a tool stores text (SPEC 15): the
card is named by its id when it has one; else by `metadata.doc_uri`, `metadata.id` or
`metadata.source`, the first present; else by its content.

Content identity: two contents are the same card when they are equal after Unicode NFC,
every run of Unicode whitespace (`str.split()`'s notion) made one space, and trimming. The
card id is then `text:` followed by the first 16 hex digits of the BLAKE3 of that normalised
text in UTF-8 (flows/storage/hashing.py), e.g. `text:` + blake3(b"Paris is in France")[:16].
Matching is exact: a paraphrase is another card.

Ids are text: an integer id (ragas and OpenInference allow them) is its decimal string. An
empty id or metadata value counts as absent. A content that is empty after normalisation
names nothing: such an item has no identity, and its reader rejects the record.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from ...storage.hashing import checksum_of_bytes

METHODS = ("id", "metadata", "content")
METADATA_KEYS = ("doc_uri", "id", "source")
CONTENT_ID_PREFIX = "text:"
CONTENT_DIGEST_HEX = 16


@dataclass(frozen=True)
class Card:
    """An identified card: `card_id`, the `method` that named it (one of METHODS), and for a
    content-identified card its text as stored."""

    card_id: object  # text, unless the input gave an id of another type (the record rules reject it)
    method: str
    text: str | None = None


def normalised_text(text: str) -> str:
    """`text` in NFC, each run of Unicode whitespace made one space, trimmed."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def content_id(text: str) -> str | None:
    """The card id of a content (see the module's docstring), None when it is empty."""
    normal = normalised_text(text)
    if not normal:
        return None
    return CONTENT_ID_PREFIX + checksum_of_bytes(normal.encode("utf-8"))[:CONTENT_DIGEST_HEX]


def id_text(value: object) -> object:
    """An id as text: a string as it is, an integer as its decimal string, None for no id
    (absent or empty). Any other type is returned as it is, for the record rules to reject."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def identify(*, id: object = None, metadata: object = None, content: object = None) -> Card | None:  # noqa: A002
    """The card an item names, by the first method that applies; None when none does (no id,
    no metadata key, and no content that is non-empty text)."""
    given = id_text(id)
    if given is not None:
        return Card(given, "id")
    if isinstance(metadata, Mapping):
        for key in METADATA_KEYS:
            named = id_text(metadata.get(key))
            if named is not None:
                return Card(named, "metadata")
    if isinstance(content, str):
        digest = content_id(content)
        if digest is not None:
            return Card(digest, "content", content)
    return None
