"""MLflow evaluation tables (SPEC 15 `mlflow`): the JSON `mlflow.log_table` writes
(`{"columns": [...], "data": [[...], ...]}`, pandas' split layout without the index), or
Parquet, or CSV. `retrieved_context` is the ranking and `expected_retrieved_context` the
gold, each a list of `{doc_uri, content}` objects (the evaluation schema of MLflow's
retrieval metrics and Databricks' agent evaluation) or of ids; an object is identified by
its `doc_uri` (counted as `metadata`), else its content. The case id is `request_id`, else
`id`, else `row-N`; the question is `request`, else `inputs`, when it is text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ....transforms.errors import InputError
from .identity import Card, id_text, identify
from .input_rows import InputRow, json_document, table_rows
from .qrels import judged_by
from .record import FormatRecord, IdentityCounts, case_of, item_of, must_cite, row_case_id, row_origin, text_field

FORMAT = "mlflow"
RETRIEVED, EXPECTED = "retrieved_context", "expected_retrieved_context"


def read_cases(path: Path, *, qrels: Path | None = None) -> Iterator[FormatRecord]:
    """The cases of an MLflow evaluation table; with `qrels`, their gold comes from it."""
    records = _cases(path)
    return judged_by(records, qrels, FORMAT)


def logged_table_rows(path: Path) -> Iterator[InputRow]:
    """The rows of `log_table`'s JSON, each as {column: value}."""
    document = json_document(path)
    if not isinstance(document, dict) or not isinstance(document.get("columns"), list) \
            or not isinstance(document.get("data"), list):
        raise InputError(f"{path}: not the JSON of mlflow.log_table ({{\"columns\": [...], \"data\": [[...]]}})")
    columns = document["columns"]
    for position, row in enumerate(document["data"], start=1):
        origin = row_origin(path, position)
        if not isinstance(row, list) or len(row) != len(columns):
            yield InputRow(position, origin, problem=f"not a list of {len(columns)} cells, one per column")
            continue
        yield InputRow(position, origin, dict(zip(columns, row, strict=True)))


def _rows(path: Path) -> Iterator[InputRow]:
    if path.suffix.lower() == ".json":
        return logged_table_rows(path)
    return table_rows(path, list_columns=(RETRIEVED, EXPECTED), kinds="log_table JSON, Parquet or CSV")


def documents(value: object, field: str) -> tuple[list[Card], list[str | None]] | str:
    """The cards of a list of `{doc_uri, content}` objects or ids, and each one's content;
    or why the field cannot be read. A missing field is an empty list."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        return f"field {field} must be a list"
    cards, texts = [], []
    for index, entry in enumerate(value):
        if isinstance(entry, dict):
            content = entry.get("content")
            card = identify(id=entry.get("id"), metadata={"doc_uri": entry.get("doc_uri")}, content=content)
        else:
            content, card = None, identify(id=entry)
        if card is None:
            return f"{field}[{index}] has no doc_uri and no content to identify it by"
        cards.append(card)
        texts.append(content if isinstance(content, str) else None)
    return cards, texts


def _cases(path: Path) -> Iterator[FormatRecord]:
    for row in _rows(path):
        if row.problem is not None:
            yield FormatRecord(row.origin, reject=row.problem)
            continue
        values = row.values
        retrieved = documents(values.get(RETRIEVED), RETRIEVED)
        expected = documents(values.get(EXPECTED), EXPECTED)
        problem = next((found for found in (retrieved, expected) if isinstance(found, str)), None)
        if problem is not None:
            yield FormatRecord(row.origin, reject=problem)
            continue
        (cards, texts), (gold, _) = retrieved, expected
        question = text_field(values, ("request", "inputs"))
        case_id = id_text(text_field(values, ("request_id", "id"))) or row_case_id(row.position)
        items = [item_of(card, text=text) for card, text in zip(cards, texts, strict=True)]
        case = case_of(values, case_id=case_id, category=FORMAT, question=question if isinstance(question, str) else None,
                       retrieved=items, gold=must_cite(gold) if values.get(EXPECTED) is not None else None)
        yield FormatRecord(row.origin, case, retrieved_by=IdentityCounts.of(cards), gold_by=IdentityCounts.of(gold))
