"""Entries a tool stores as a list of ids beside a list of texts (ragas'
`retrieved_context_ids` beside `retrieved_contexts`), or as texts alone (DeepEval), made
cards by identity.py: the id at a position wins over the text at the same position, and
the text stays with the item so the explorer can show it."""

from __future__ import annotations

from dataclasses import dataclass

from .identity import Card, identify


@dataclass(frozen=True)
class Entries:
    """The cards of a list field and each one's stored text (None where there was none), or
    `problem`: why the field cannot be read."""

    cards: tuple[Card, ...] = ()
    texts: tuple[str | None, ...] = ()
    problem: str | None = None


def side_by_side(ids: object, texts: object, *, ids_field: str, texts_field: str) -> Entries:
    """The cards of `ids` and `texts` taken position by position (either may be None: not
    given). Both must be lists, of the same length when both are given."""
    for value, name in ((ids, ids_field), (texts, texts_field)):
        if value is not None and not isinstance(value, list):
            return Entries(problem=f"field {name} must be a list")
    if ids is not None and texts is not None and len(ids) != len(texts):
        return Entries(problem=f"field {ids_field} has {len(ids)} entries and {texts_field} {len(texts)}")
    count = len(ids) if ids is not None else len(texts) if texts is not None else 0
    cards, stored = [], []
    for index in range(count):
        text = texts[index] if texts is not None else None
        card = identify(id=ids[index] if ids is not None else None, content=text)
        if card is None:
            name = texts_field if ids is None else f"{ids_field}/{texts_field}"
            return Entries(problem=f"{name}[{index}] has no id and no text to identify it by")
        cards.append(card)
        stored.append(text if isinstance(text, str) else None)
    return Entries(tuple(cards), tuple(stored))
