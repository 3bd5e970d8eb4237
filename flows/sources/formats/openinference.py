"""OpenInference spans (SPEC 15 `openinference`): spans exported from Arize Phoenix or any
OpenInference tracer, as JSONL or Parquet. Attributes may be nested
(`{"attributes": {"retrieval": {"documents": [{"document": {...}}]}}}`), flattened into
columns as Phoenix's spans dataframe has them (`attributes.retrieval.documents`, a list of
`{"document.id", "document.score", "document.content", "document.metadata"}`), or flattened
to the last level (`retrieval.documents.N.document.id`): a dotted name is looked up through
all three (`attribute`). Names are the OpenInference semantic conventions'.

Each span whose `openinference.span.kind` is `RETRIEVER` is a case (other spans are
records, counted in row N, that yield nothing): its case id is `metadata.case_id`, else its
trace id (`context.trace_id`); its question `input.value`; its ranking the documents in the
order of N, each identified by SPEC 15's rule (`document.metadata`, a JSON object or its
text, may name it by `doc_uri`, `id` or `source`). Spans hold no gold: `--qrels` gives it,
by case id, and is required."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from pathlib import Path

from .identity import Card, id_text, identify
from .input_rows import json_text, table_rows
from .qrels import judged_by
from .record import FormatRecord, IdentityCounts, case_of, item_of

FORMAT = "openinference"
RETRIEVER = "RETRIEVER"
DOCUMENTS = "attributes.retrieval.documents"
DOCUMENT_FIELDS = ("id", "score", "content", "metadata")
MISSING = object()


def read_cases(path: Path, *, qrels: Path | None = None) -> Iterator[FormatRecord]:
    """The cases of a spans export, their gold from `qrels` (without it, unlabelled)."""
    return judged_by(_cases(path), qrels, FORMAT)


def attribute(node: object, name: str) -> object:
    """The value at dotted `name` in a span, however its levels were flattened (a key may
    hold several levels joined by dots; a list is indexed by a number; an object stored as
    JSON text is read through); MISSING when absent."""
    return _resolve(node, name.split("."))


def _resolve(node: object, parts: list[str]) -> object:
    if not parts:
        return node
    if isinstance(node, str) and node.lstrip().startswith("{"):
        node = _json_object(node)
    if isinstance(node, dict):
        for end in range(len(parts), 0, -1):
            key = ".".join(parts[:end])
            if key in node:
                found = _resolve(node[key], parts[end:])
                if found is not MISSING:
                    return found
        return MISSING
    if isinstance(node, list) and parts[0].isdigit() and int(parts[0]) < len(node):
        return _resolve(node[int(parts[0])], parts[1:])
    return MISSING


def _json_object(text: str) -> object:
    try:
        return json_text(text)
    except ValueError:
        return MISSING


def _present(value: object) -> object:
    return None if value is MISSING else value


def span_documents(span: dict) -> list[dict]:
    """The span's retrieved documents in the order of N, each as {id, score, content, metadata}."""
    listed = attribute(span, DOCUMENTS)
    if isinstance(listed, list):
        return [{field: _present(attribute(entry, f"document.{field}")) for field in DOCUMENT_FIELDS} for entry in listed]
    found = []
    for index in count():
        fields = {field: attribute(span, f"{DOCUMENTS}.{index}.document.{field}") for field in DOCUMENT_FIELDS}
        if all(value is MISSING for value in fields.values()):
            return found
        found.append({field: _present(value) for field, value in fields.items()})
    return found


def _metadata(value: object) -> object:
    """A metadata attribute: an object, or the JSON text of one (as the conventions store it)."""
    if isinstance(value, str):
        return _json_object(value)
    return value


def retriever_case(span: dict, origin: str) -> FormatRecord:
    """The case of one RETRIEVER span, or why it cannot be read."""
    metadata = _metadata(_present(attribute(span, "attributes.metadata")))
    case_id = id_text(metadata.get("case_id")) if isinstance(metadata, dict) else None
    if case_id is None:
        case_id = id_text(_present(attribute(span, "context.trace_id")))
    if case_id is None:
        return FormatRecord(origin, reject="a RETRIEVER span with no metadata.case_id and no context.trace_id")
    cards: list[Card] = []
    items = []
    for index, document in enumerate(span_documents(span)):
        document_metadata = _metadata(document["metadata"])
        if document["metadata"] is not None and not isinstance(document_metadata, dict):
            return FormatRecord(origin, reject=f"retrieval.documents.{index}.document.metadata is not a JSON object")
        card = identify(id=document["id"], metadata=document_metadata, content=document["content"])
        if card is None:
            return FormatRecord(origin, reject=f"retrieval.documents.{index}.document has no id, metadata name or content")
        cards.append(card)
        content = document["content"] if isinstance(document["content"], str) else None
        items.append(item_of(card, score=document["score"], text=content, metadata=document_metadata))
    values = metadata if isinstance(metadata, dict) else {}
    case = case_of(values, case_id=case_id, category=FORMAT, question=_present(attribute(span, "attributes.input.value")),
                   retrieved=items, gold=None)
    return FormatRecord(origin, case, retrieved_by=IdentityCounts.of(cards))


def _span_kind(span: dict) -> object:
    kind = attribute(span, "attributes.openinference.span.kind")
    return _present(kind) if kind is not MISSING else _present(attribute(span, "span_kind"))


def _cases(path: Path) -> Iterator[FormatRecord]:
    for row in table_rows(path, list_columns=(), kinds="JSONL or Parquet"):
        if row.problem is not None:
            yield FormatRecord(row.origin, reject=row.problem)
        elif _span_kind(row.values) == RETRIEVER:
            yield retriever_case(row.values, row.origin)
