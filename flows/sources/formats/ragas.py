"""ragas datasets (SPEC 15 `ragas`): an export of `SingleTurnSample` rows
(ragas/dataset_schema.py) as JSONL (`to_jsonl`), CSV (`to_csv`, whose list cells are
Python reprs) or Parquet. Read: `user_input` the question, `retrieved_contexts` the
ranking, `reference_contexts` the gold, with `retrieved_context_ids` and
`reference_context_ids` beside them (ids win, position by position); the older names
`question`, `contexts`, `ground_truths` and `reference` when the new ones are absent. The
case id is the `case_id` or `id` column, else `row-N`; locale `und` and category `ragas`
unless the row has them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .identity import id_text
from .input_rows import table_rows
from .qrels import read_gold, with_gold
from .record import FormatRecord, IdentityCounts, case_of, item_of, must_cite, row_case_id, text_field
from .side_by_side import side_by_side

FORMAT = "ragas"
QUESTION = ("user_input", "question")
RETRIEVED_TEXTS = ("retrieved_contexts", "contexts")
REFERENCE_TEXTS = ("reference_contexts", "ground_truths", "reference")
RETRIEVED_IDS, REFERENCE_IDS = "retrieved_context_ids", "reference_context_ids"
LIST_COLUMNS = (*RETRIEVED_TEXTS, *REFERENCE_TEXTS[:2], RETRIEVED_IDS, REFERENCE_IDS)


def read_cases(path: Path, *, qrels: Path | None = None) -> Iterator[FormatRecord]:
    """The cases of a ragas export; with `qrels`, their gold comes from it (qrels.py)."""
    records = _cases(path)
    return with_gold(records, read_gold(qrels), FORMAT) if qrels is not None else records


def _first_named(values: dict, names: tuple[str, ...]) -> tuple[object, str]:
    for name in names:
        if values.get(name) is not None:
            return values[name], name
    return None, names[0]


def _cases(path: Path) -> Iterator[FormatRecord]:
    for row in table_rows(path, list_columns=LIST_COLUMNS, kinds="JSONL, CSV or Parquet"):
        if row.problem is not None:
            yield FormatRecord(row.origin, reject=row.problem)
            continue
        values = row.values
        texts, texts_field = _first_named(values, RETRIEVED_TEXTS)
        retrieved = side_by_side(values.get(RETRIEVED_IDS), texts, ids_field=RETRIEVED_IDS, texts_field=texts_field)
        gold_texts, gold_field = _first_named(values, REFERENCE_TEXTS)
        if isinstance(gold_texts, str):  # `reference` is one text
            gold_texts = [gold_texts]
        gold = side_by_side(values.get(REFERENCE_IDS), gold_texts, ids_field=REFERENCE_IDS, texts_field=gold_field)
        problem = retrieved.problem or gold.problem
        if problem is not None:
            yield FormatRecord(row.origin, reject=problem)
            continue
        labelled = values.get(REFERENCE_IDS) is not None or gold_texts is not None
        case_id = id_text(text_field(values, ("case_id", "id"))) or row_case_id(row.position)
        items = [item_of(card, text=text) for card, text in zip(retrieved.cards, retrieved.texts, strict=True)]
        case = case_of(values, case_id=case_id, category=FORMAT, question=text_field(values, QUESTION),
                       retrieved=items, gold=must_cite(gold.cards) if labelled else None)
        yield FormatRecord(row.origin, case, retrieved_by=IdentityCounts.of(retrieved.cards),
                           gold_by=IdentityCounts.of(gold.cards))
