"""The rules of a knowledge base's cards.jsonl (SPEC 3), one line at a time: each card a
JSON object with a unique, non-empty `id` and a `title` (text); any other field is kept out,
whatever it holds. flows/inputs/kb.py reads the file and loads the cards these rules accept."""

from __future__ import annotations

from .records import json_type_name, parse_json_line, written_twice

READ_FIELDS = frozenset(("id", "title"))


def card_problem(line: bytes, first_line_of: dict[str, int], number: int) -> tuple[str | None, dict | None]:
    """(why the card on line `number` is refused, None) or (None, {id, title}); `first_line_of`
    holds the ids of the lines before, and gets this one's."""
    try:
        card = parse_json_line(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        return f"not valid JSON ({error})", None
    if not isinstance(card, dict):
        return f"a card is a JSON object, got {json_type_name(card)}", None
    repeated = written_twice(card, READ_FIELDS)
    if repeated:
        return repeated, None
    card_id, title = card.get("id"), card.get("title")
    if card_id is None:
        return "card has no id", None
    if not isinstance(card_id, str) or card_id == "":
        return f"field id must be a non-empty string, got {json_type_name(card_id)}", None
    if card_id in first_line_of:
        return f"id {card_id!r} repeats line {first_line_of[card_id]}", None
    first_line_of[card_id] = number
    if not isinstance(title, str):
        return (f"card {card_id!r} has no title" if title is None
                else f"field title of card {card_id!r} must be a string, got {json_type_name(title)}"), None
    return None, {"id": card_id, "title": title}
