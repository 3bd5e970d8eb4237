"""What a format reader yields (SPEC 15): one FormatRecord per record of the input, a case
in the SPEC 3 shape or the reason the format could not read it, named by its origin
(`file:line N` in a line file, `file:row N` in a table or a JSON list), with how each of its
retrieved items and gold entries was identified (identity.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .identity import METHODS, Card

UNDETERMINED_LOCALE = "und"  # BCP 47's "undetermined": the locale of a format without one


@dataclass(frozen=True)
class IdentityCounts:
    """How many items were identified by each method of SPEC 15: their id, a metadata field
    (`doc_uri`, `id` or `source`), or their content."""

    id: int = 0
    metadata: int = 0
    content: int = 0

    def __add__(self, other: IdentityCounts) -> IdentityCounts:
        return IdentityCounts(self.id + other.id, self.metadata + other.metadata, self.content + other.content)

    @classmethod
    def of(cls, cards: Iterable[Card]) -> IdentityCounts:
        methods = [card.method for card in cards]
        return cls(*(methods.count(method) for method in METHODS))


@dataclass(frozen=True)
class FormatRecord:
    """One record of a format's input: `case` (a dict in the SPEC 3 shape, ready to be
    written as one JSON line of a cases file) or `reject` (one line saying why the format
    cannot read it), never both. `retrieved_by` and `gold_by` count how the case's retrieved
    items and gold entries were identified."""

    origin: str
    case: dict | None = None
    reject: str | None = None
    retrieved_by: IdentityCounts = field(default_factory=IdentityCounts)
    gold_by: IdentityCounts = field(default_factory=IdentityCounts)


def line_origin(path: Path, line: int) -> str:
    return f"{path}:line {line}"


def row_origin(path: Path, row: int) -> str:
    return f"{path}:row {row}"


def row_case_id(row: int) -> str:
    """The case id of a record that names none: `row-N`, its 1-based position in the input."""
    return f"row-{row}"


def first_field(record: dict, names: tuple[str, ...]) -> tuple[str, object]:
    """The first of `names` that `record` holds with a value (not null), and that value; the
    first name and None when it holds none of them."""
    for name in names:
        if record.get(name) is not None:
            return name, record[name]
    return names[0], None


def text_field(record: dict, names: tuple[str, ...]) -> object:
    """The value of the first of `names` that `record` holds with a value (`first_field`)."""
    return first_field(record, names)[1]


def case_of(record: dict, *, case_id: object, category: str, question: object, retrieved: list[dict],
            gold: dict | None) -> dict:
    """A case in the SPEC 3 shape: locale from the record's `locale` or `language`, else
    `und`; category from its `category`, else the format's name (`category`). Values are
    taken as they are: a wrong type is the record rules' to reject."""
    case = {
        "case_id": case_id,
        "locale": text_field(record, ("locale", "language")) or UNDETERMINED_LOCALE,
        "category": record.get("category") or category,
    }
    if question is not None:
        case["question"] = question
    case["retrieved_context"] = retrieved
    if gold:
        case.update(gold)
    return case


def item_of(card: Card, *, score: object = None, text: object = None, metadata: object = None) -> dict:
    """A retrieved item `{id, score?, text?, metadata?}` of an identified card; the text of a
    card identified by its content is kept, so the explorer can show it."""
    item: dict = {"id": card.card_id}
    if score is not None:
        item["score"] = score
    shown = text if text is not None else card.text
    if shown is not None:
        item["text"] = shown
    if metadata is not None:
        item["metadata"] = metadata
    return item


def must_cite(cards: Iterable[Card]) -> dict:
    """Gold given as cards (ids or texts) as `must_cite_one_of`: each card once, in order."""
    return {"must_cite_one_of": list(dict.fromkeys(card.card_id for card in cards))}
