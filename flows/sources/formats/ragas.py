"""ragas datasets (SPEC 15 `ragas`): an export of `SingleTurnSample` rows
(ragas/dataset_schema.py) as JSONL (`to_jsonl`), CSV (`to_csv`, whose list cells are
Python reprs) or Parquet. Read: `user_input` the question, `retrieved_contexts` the
ranking, `reference_contexts` the gold, with `retrieved_context_ids` and
`reference_context_ids` beside them (ids win, position by position). The older names
`question`, `contexts`, `ground_truths` and `reference` are read only from a row that holds
none of those five: in a row that has one, `reference` is the reference answer
(`SingleTurnSample.reference`), not gold, and a row without `reference_contexts` or
`reference_context_ids` is unlabelled. The case id is the `case_id` or `id` column, else
`row-N`; locale `und` and category `ragas` unless the row has them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .identity import id_text
from .input_rows import table_rows
from .qrels import judged_by
from .record import FormatRecord, IdentityCounts, case_of, first_field, item_of, must_cite, row_case_id, text_field
from .side_by_side import side_by_side

FORMAT = "ragas"
RETRIEVED_IDS, REFERENCE_IDS = "retrieved_context_ids", "reference_context_ids"


@dataclass(frozen=True)
class FieldNames:
    """The names a generation of ragas gave the question, the retrieved texts and the gold
    texts (the first of `reference` present is read; `reference` in the older names is one
    text)."""

    question: str
    retrieved: str
    reference: tuple[str, ...]


CURRENT = FieldNames("user_input", "retrieved_contexts", ("reference_contexts",))
OLDER = FieldNames("question", "contexts", ("ground_truths", "reference"))
CURRENT_FIELDS = (CURRENT.question, CURRENT.retrieved, *CURRENT.reference, RETRIEVED_IDS, REFERENCE_IDS)
LIST_COLUMNS = (CURRENT.retrieved, *CURRENT.reference, OLDER.retrieved, "ground_truths", RETRIEVED_IDS, REFERENCE_IDS)


def read_cases(path: Path, *, qrels: Path | None = None) -> Iterator[FormatRecord]:
    """The cases of a ragas export; with `qrels`, their gold comes from it (qrels.py)."""
    return judged_by(_cases(path), qrels, FORMAT)


def field_names(values: dict) -> FieldNames:
    """CURRENT for a row holding any of CURRENT_FIELDS, else OLDER."""
    return CURRENT if any(values.get(name) is not None for name in CURRENT_FIELDS) else OLDER


def _cases(path: Path) -> Iterator[FormatRecord]:
    for row in table_rows(path, list_columns=LIST_COLUMNS, kinds="JSONL, CSV or Parquet"):
        if row.problem is not None:
            yield FormatRecord(row.origin, reject=row.problem)
            continue
        values = row.values
        names = field_names(values)
        retrieved = side_by_side(values.get(RETRIEVED_IDS), values.get(names.retrieved), ids_field=RETRIEVED_IDS,
                                 texts_field=names.retrieved)
        gold_field, gold_texts = first_field(values, names.reference)
        if gold_field == "reference" and isinstance(gold_texts, str):  # the older `reference` is one text
            gold_texts = [gold_texts]
        gold = side_by_side(values.get(REFERENCE_IDS), gold_texts, ids_field=REFERENCE_IDS, texts_field=gold_field)
        problem = retrieved.problem or gold.problem
        if problem is not None:
            yield FormatRecord(row.origin, reject=problem)
            continue
        labelled = values.get(REFERENCE_IDS) is not None or gold_texts is not None
        case_id = id_text(text_field(values, ("case_id", "id"))) or row_case_id(row.position)
        items = [item_of(card, text=text) for card, text in zip(retrieved.cards, retrieved.texts, strict=True)]
        case = case_of(values, case_id=case_id, category=FORMAT, question=values.get(names.question),
                       retrieved=items, gold=must_cite(gold.cards) if labelled else None)
        yield FormatRecord(row.origin, case, retrieved_by=IdentityCounts.of(retrieved.cards),
                           gold_by=IdentityCounts.of(gold.cards))
