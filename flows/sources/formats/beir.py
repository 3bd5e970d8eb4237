"""BEIR results (SPEC 15 `beir`): INPUT is the JSON BEIR's `EvaluateRetrieval.retrieve`
returns, `{query_id: {doc_id: score}}`; the gold is a BEIR qrels TSV given with `--qrels`
(qrels.py). Each query is a case, ranked by score descending, ties by doc id descending
(trec_eval's rule); a query with no documents is a case that scores 0, and a query only the
qrels know is one too. Locale `und`, category `beir`."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from ....transforms.errors import InputError
from .identity import Card
from .input_rows import json_document
from .qrels import judged_by
from .record import FormatRecord, IdentityCounts, case_of, item_of, row_origin

FORMAT = "beir"


def read_cases(path: Path, *, qrels: Path | None = None) -> Iterator[FormatRecord]:
    """The cases of BEIR results, their gold from `qrels` (without it, unlabelled)."""
    return judged_by(scored_queries(path, FORMAT), qrels, FORMAT)


def is_score(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def ranked(documents: dict) -> list[tuple[str, float]]:
    """`{doc_id: score}` as trec_eval ranks it: score descending, ties by doc id descending
    (Python compares text by code point, which is UTF-8's byte order)."""
    return sorted(documents.items(), key=lambda pair: (pair[1], pair[0]), reverse=True)


def scored_queries(path: Path, format_name: str) -> Iterator[FormatRecord]:
    """The cases of a `{query_id: {doc_id: score}}` JSON file, one per query (row N = the
    query's position in the file); a query whose documents are not an object of doc id to a
    finite number is a reject."""
    document = json_document(path)
    if not isinstance(document, dict):
        raise InputError(f"{path}: not a JSON object of query id to {{doc id: score}}")
    for position, (query_id, documents) in enumerate(document.items(), start=1):
        origin = row_origin(path, position)
        if not isinstance(documents, dict):
            yield FormatRecord(origin, reject=f"query {query_id!r}: not an object of doc id to score")
            continue
        bad = next((doc for doc, score in documents.items() if not is_score(score)), None)
        if bad is not None:
            yield FormatRecord(origin, reject=f"query {query_id!r}: the score of doc {bad!r} is not a finite number")
            continue
        items = [item_of(Card(doc, "id"), score=score) for doc, score in ranked(documents)]
        case = case_of({}, case_id=query_id, category=format_name, question=None, retrieved=items, gold=None)
        yield FormatRecord(origin, case, retrieved_by=IdentityCounts(id=len(items)))
