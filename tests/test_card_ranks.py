"""The card ranks of retrieved items (SPEC 2.3) as transforms/_card_ranks.c computes them,
held to the Polars form transforms/rankings.py keeps for where it is not compiled, and to
hand-worked ranks."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from retrieval_eval.transforms import rankings
from retrieval_eval.transforms.rankings import first_card_ranks

compiled = pytest.mark.skipif(rankings._card_ranks is None, reason="transforms/_card_ranks.c was not compiled here")
# each hand-worked test runs on both: the kernel (where it is compiled) and the Polars form
either = pytest.mark.parametrize("kernel", [pytest.param(True, marks=compiled, id="kernel"),
                                            pytest.param(False, id="polars")])


def columns(cases: list[list[str]]) -> tuple[pl.Series, pl.Series]:
    rank = pl.Series([r for case in cases for r in range(1, len(case) + 1)], dtype=pl.Int32)
    return rank, pl.Series([card for case in cases for card in case], dtype=pl.String)


def ranked(cases: list[list[str]], kernel: bool) -> list:
    return first_card_ranks(*columns(cases), compiled=kernel).to_list()


@either
def test_hand_worked_ranks(kernel):
    # case 1: a, b, a again (its second chunk), c -> 1, 2, null, 3; case 2 starts over: a -> 1, a -> null;
    # ids past 12 bytes (held in a data buffer, not the view) and ones differing past the 4-byte prefix
    cases = [["a", "b", "a", "c"], ["a", "a"], ["card-000000000001", "card-000000000002", "card-000000000001"],
             ["", "é", "e"]]
    assert ranked(cases, kernel) == [1, 2, None, 3, 1, None, 1, 2, None, 1, 2, 3]


@either
def test_a_case_longer_than_any_table_start_size_is_ranked_exactly(kernel):
    # 5,000 items over 1,000 cards: the table grows past its 16 slots; each card first seen in order
    ranks = ranked([[f"card-{i % 1000:04d}" for i in range(5000)], ["card-0001"]], kernel)
    assert ranks[:1000] == list(range(1, 1001)) and ranks[1000:5000] == [None] * 4000 and ranks[5000] == 1


@either
def test_a_sliced_column_is_read_from_its_offset(kernel):
    rank = pl.Series([1, 2, 1, 2, 3], dtype=pl.Int32)
    card_id = pl.Series(["x", "x", "a", "b", "a"])
    assert first_card_ranks(rank.slice(2), card_id.slice(2), compiled=kernel).to_list() == [1, 2, None]


@compiled
def test_bad_inputs_are_refused_not_read_past():
    with pytest.raises(ValueError, match="as many items"):
        rankings._card_ranks.first_card_ranks(b"\x01\x00\x00\x00", b"", [], bytearray(4))
    with pytest.raises(ValueError, match="start a case"):
        rankings._card_ranks.first_card_ranks(b"\x02\x00\x00\x00", bytes(16), [], bytearray(4))
    view_past_its_buffer = (20).to_bytes(4, "little") + b"abcd" + (0).to_bytes(4, "little") + (0).to_bytes(4, "little")
    with pytest.raises(ValueError, match="outside"):
        rankings._card_ranks.first_card_ranks(b"\x01\x00\x00\x00", view_past_its_buffer, [b"short"], bytearray(4))


cards = st.text(alphabet=st.sampled_from("ab-é\x00"), max_size=16)


@compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(cards, min_size=1, max_size=40), max_size=20))
def test_the_kernel_agrees_with_polars(cases):
    assert ranked(cases, kernel=True) == ranked(cases, kernel=False)
