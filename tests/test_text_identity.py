"""SPEC 15's identity of a stored chunk (flows/sources/formats/identity.py): id, then
metadata.doc_uri / id / source, then the content normalised (NFC, Unicode whitespace runs
made one space, trimmed) as `text:` + the first 16 hex digits of its BLAKE3."""

from __future__ import annotations

import unicodedata

from blake3 import blake3
from retrieval_eval.flows.sources.formats.identity import content_id, identify, normalised_text


def test_content_id_is_text_and_the_first_16_hex_of_the_blake3_of_the_normalised_text():
    expected = "text:" + blake3("Paris is in France.".encode()).hexdigest()[:16]
    assert content_id("  Paris is\tin France.\n") == expected


def test_nfc_and_nfd_forms_are_the_same_card():
    composed = "S\u00e3o Paulo fica no Brasil."  # ã as one code point
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    assert content_id(composed) == content_id(decomposed)
    assert identify(content=decomposed).card_id == identify(content=composed).card_id


def test_tabs_newlines_and_unicode_spaces_collapse_to_one_space():
    assert normalised_text("a\t\tb\n\nc\u00a0\u2003d  ") == "a b c d"
    assert content_id("a\tb\nc") == content_id("a b c")


def test_an_empty_content_names_no_card():
    assert content_id("") is None
    assert content_id(" \t\n\u00a0") is None
    assert identify(content="  \n") is None
    assert identify() is None


def test_two_chunks_with_the_same_text_are_the_same_card():
    first, second = identify(content="Same  text."), identify(content="Same text.")
    assert first.card_id == second.card_id and first.method == second.method == "content"
    assert first.text == "Same  text."  # the text as stored, for the explorer


def test_different_texts_are_different_cards_matching_is_exact():
    assert content_id("Paris is in France.") != content_id("Paris is in France")
    assert content_id("paris is in france.") != content_id("Paris is in France.")


def test_an_integer_id_equals_its_decimal_string():
    assert identify(id=7).card_id == identify(id="7").card_id == "7"
    assert identify(metadata={"doc_uri": 12}).card_id == "12"


def test_id_wins_over_metadata_and_metadata_over_content():
    assert identify(id="d1", metadata={"doc_uri": "u"}, content="x").method == "id"
    card = identify(metadata={"source": "s", "id": "i", "doc_uri": "u"}, content="x")
    assert (card.card_id, card.method) == ("u", "metadata")
    assert identify(metadata={"source": "s", "id": "i"}).card_id == "i"
    assert identify(metadata={"source": "s"}).card_id == "s"
    assert identify(id="", metadata={"doc_uri": ""}, content="x").method == "content"
