"""The strict parser of the first read (flows/sources/_case_columns.c): it never takes a line the record
rules (transforms/records.py) refuse, unless staging refuses that line's values as it does for
any reader; the columns it gives are the values json.loads reads; it takes every well-typed
record; and a file read through it gives the tables Arrow's reader gives.

The record rules and json.loads are the reference here: the parser is checked against them
on generated records and on those records spoiled byte by byte."""

from __future__ import annotations

import gzip
import io
import json
import struct

import pyarrow as pa
import pyarrow.json as pa_json
import pytest
from builders import case, chunk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from retrieval_eval.flows.sources import _case_columns, strict_read
from retrieval_eval.flows.sources.case_file import CaseFileRead, parsed_batch
from retrieval_eval.transforms.case_schema import CLEAN_CASES_SCHEMA
from retrieval_eval.transforms.errors import NotClean
from retrieval_eval.transforms.records import MAX_RECORD_BYTES, judge_line
from retrieval_eval.transforms.staging import stage

TEXT_FIELDS = ("case_id", "locale", "category", "question", "query")
GOLD_FIELDS = ("must_cite_one_of", "relevant_ids")


def parse(line: bytes, max_line: int = MAX_RECORD_BYTES):
    return _case_columns.parse(line, max_line)


def rows_of(line: bytes) -> list[dict] | None:
    parsed = parse(line)
    return None if parsed is None else parsed_batch(parsed).to_pylist()


def expected_row(record: dict) -> dict:
    """A record's metric fields as json.loads reads them, in the parser's columns."""
    row = {name: record.get(name) for name in (*TEXT_FIELDS, *GOLD_FIELDS)}
    context = record.get("retrieved_context")
    row["retrieved_context"] = None if context is None else [
        {"id": item.get("id"), "parent_id": item.get("parent_id"),
         "score": None if item.get("score") is None else float(item["score"])}
        for item in context
    ]
    row["relevance"] = None
    return row


# ----------------------------------------------------------------------------- named rules

WELL_TYPED = json.dumps(case("c-1", [chunk("A::00", "A", 0.5), {"id": "B", "score": 3, "text": "x"}], ["A"],
                             question="why?", answer={"nested": [1, 2.5e-3, True, None, "x"]}))

REFUSED = {
    "trailing_comma_in_the_record": b'{"case_id": "a",}',
    "trailing_comma_in_an_ignored_list": b'{"case_id": "a", "x": [1, 2,]}',
    "trailing_comma_in_an_ignored_object": b'{"case_id": "a", "x": {"y": 1,}}',
    "trailing_comma_in_gold": b'{"case_id": "a", "must_cite_one_of": ["A",]}',
    "trailing_comma_in_the_items": b'{"case_id": "a", "retrieved_context": [{"id": "A"},]}',
    "nan": b'{"case_id": "a", "x": NaN}',
    "infinity": b'{"case_id": "a", "x": Infinity}',
    "minus_infinity": b'{"case_id": "a", "x": -Infinity}',
    "lowercase_nan": b'{"case_id": "a", "x": nan}',
    "nan_score": b'{"case_id": "a", "retrieved_context": [{"id": "A", "score": NaN}]}',
    "leading_whitespace": b' {"case_id": "a"}',
    "blank_line": b"   ",
    "two_records": b'{"case_id": "a"} {"case_id": "b"}',
    "an_array": b'[{"case_id": "a"}]',
    "null": b"null",
    "byte_order_mark": b'\xef\xbb\xbf{"case_id": "a"}',
    "invalid_utf8_in_an_ignored_field": b'{"case_id": "a", "x": "caf\xe9"}',
    "encoded_surrogate": b'{"case_id": "a", "x": "\xed\xa0\x80"}',
    "overlong_utf8": b'{"case_id": "a", "x": "\xc0\xaf"}',
    "lone_high_surrogate_escape": b'{"case_id": "a", "x": "\\ud800"}',
    "lone_low_surrogate_escape": b'{"case_id": "a", "x": "\\udc00"}',
    "high_surrogate_then_not_low": b'{"case_id": "a", "x": "\\ud800\\u0041"}',
    "surrogate_in_a_key": b'{"case_id": "a", "\\ud800": 1}',
    "raw_tab_in_a_string": b'{"case_id": "a\tb"}',
    "raw_control_in_a_string": b'{"case_id": "a", "x": "\x01"}',
    "unknown_escape": b'{"case_id": "a\\qb"}',
    "short_unicode_escape": b'{"case_id": "a\\u12"}',
    "leading_zero": b'{"case_id": "a", "x": 01}',
    "bare_fraction": b'{"case_id": "a", "x": .5}',
    "bare_point": b'{"case_id": "a", "x": 5.}',
    "bare_minus": b'{"case_id": "a", "x": -}',
    "plus_sign": b'{"case_id": "a", "x": +1}',
    "bare_exponent": b'{"case_id": "a", "x": 1e}',
    "hex": b'{"case_id": "a", "x": 0x10}',
    "comment": b'{"case_id": "a" /* c */}',
    "single_quotes": b"{'case_id': 'a'}",
    "unquoted_key": b'{case_id: "a"}',
    "capital_true": b'{"case_id": "a", "x": True}',
    "cut_short": b'{"case_id": "a"',
    "unclosed_ignored_list": b'{"case_id": "a", "x": [1, {"y": 2]}',
    "vertical_tab_as_space": b'{"case_id":\x0b"a"}',
    "case_id_twice": b'{"case_id": "a", "case_id": "b"}',
    "case_id_twice_once_escaped": b'{"case_id": "a", "case\\u005fid": "b"}',
    "item_id_twice": b'{"case_id": "a", "retrieved_context": [{"id": "A", "id": "B"}]}',
    "score_twice": b'{"case_id": "a", "retrieved_context": [{"id": "A", "score": 1, "score": 2}]}',
    "numeric_case_id": b'{"case_id": 5}',
    "object_for_locale": b'{"case_id": "a", "locale": {"x": 1}}',
    "list_for_category": b'{"case_id": "a", "category": ["g"]}',
    "true_for_case_id": b'{"case_id": true}',
    "escaped_key_numeric_case_id": b'{"case\\u005fid": 5}',
    "question_not_text": b'{"case_id": "a", "question": 7}',
    "gold_not_a_list": b'{"case_id": "a", "must_cite_one_of": "A"}',
    "number_in_gold": b'{"case_id": "a", "must_cite_one_of": ["A", 3]}',
    "null_in_gold": b'{"case_id": "a", "relevant_ids": [null]}',
    "context_not_a_list": b'{"case_id": "a", "retrieved_context": "A::00"}',
    "item_not_an_object": b'{"case_id": "a", "retrieved_context": ["A::00"]}',
    "null_item": b'{"case_id": "a", "retrieved_context": [null]}',
    "numeric_item_id": b'{"case_id": "a", "retrieved_context": [{"id": 7}]}',
    "numeric_parent_id": b'{"case_id": "a", "retrieved_context": [{"id": "A", "parent_id": 7}]}',
    "string_score": b'{"case_id": "a", "retrieved_context": [{"id": "A", "score": "0.5"}]}',
    "boolean_score": b'{"case_id": "a", "retrieved_context": [{"id": "A", "score": true}]}',
    "graded_relevance": b'{"case_id": "a", "relevance": {"A": 1}}',
    "empty_relevance": b'{"case_id": "a", "relevance": {}}',
}


@pytest.mark.parametrize("line", REFUSED.values(), ids=REFUSED.keys())
def test_a_line_that_is_not_one_clean_record_is_refused(line):
    assert parse(line) is None
    assert parse(WELL_TYPED.encode() + b"\n" + line + b"\n") is None  # beside a clean line too


def test_an_empty_line_is_refused_and_an_empty_block_has_no_records():
    assert parse(WELL_TYPED.encode() + b"\n\n" + WELL_TYPED.encode()) is None
    assert parse(b"")[0] == 0


def test_a_well_typed_record_is_read_as_json_loads_reads_it():
    for text in (WELL_TYPED, json.dumps(json.loads(WELL_TYPED), ensure_ascii=False, separators=(",", ":"))):
        assert rows_of(text.encode()) == [expected_row(json.loads(text))]


def test_escapes_unicode_and_pairs_are_decoded():
    record = case("é\"\\/\b\f\n\r\t\u0000\U0001F600", [chunk("A\u2028::00", "A")], ["\U0001F600"], locale="pt-BR")
    for ascii_only in (True, False):
        line = json.dumps(record, ensure_ascii=ascii_only).replace("/", "\\/")
        assert rows_of(line.encode()) == [expected_row(record)]


def test_a_key_written_with_escapes_is_the_field_it_names():
    assert rows_of(b'{"case\\u005fid": "a", "loc\\u0061le": "en"}')[0]["case_id"] == "a"


def test_nulls_absent_fields_and_empty_lists_are_kept_apart():
    rows = rows_of(b'{"case_id": "a", "locale": null, "must_cite_one_of": [], "retrieved_context": [],'
                   b' "relevance": null}\n{"case_id": "b", "retrieved_context": [{"id": "A", "score": null}]}')
    assert [(r["locale"], r["must_cite_one_of"], r["relevant_ids"], r["retrieved_context"]) for r in rows] == [
        (None, [], None, []), (None, None, None, [{"id": "A", "parent_id": None, "score": None}])]


def test_values_the_rules_refuse_are_given_to_staging_which_refuses_them():
    # the types are right, the values are not: staging refuses them whatever read the line
    for line in (b'{"case_id": "", "locale": "en", "category": "g"}', b'{"locale": "en", "category": "g"}',
                 b'{"case_id": "a", "locale": "en", "category": "g", "retrieved_context": [{"parent_id": "A"}]}',
                 b'{"case_id": "a", "locale": "en", "category": "g", "retrieved_context": [{"id": "A", "score": 1e999}]}'):
        assert judge_line(line).reason is not None
        with pytest.raises(NotClean):
            stage(pa.Table.from_batches([parsed_batch(parse(line))]))


def test_a_number_beyond_a_double_in_a_field_the_metrics_ignore_is_read():
    line = WELL_TYPED[:-1] + ', "answer_score": 1e999, "n": ' + "9" * 5000 + "}"
    assert judge_line(line.encode()).reason is None and rows_of(line.encode()) == [expected_row(json.loads(WELL_TYPED))]


def test_a_field_the_metrics_ignore_nested_thousands_deep_is_read():
    deep = WELL_TYPED[:-1] + ', "trace": ' + "[" * 5000 + '{"x": [1, {}]}' + "]" * 5000 + "}"
    assert rows_of(deep.encode()) == [expected_row(json.loads(WELL_TYPED))]
    assert parse(deep.replace('{"x"', '{"x": 1,').encode()) is None  # a trailing comma deep inside


def test_a_line_longer_than_a_record_may_be_is_refused():
    line = WELL_TYPED.encode()
    assert parse(line, max_line=len(line)) is not None
    assert parse(line, max_line=len(line) - 1) is None
    assert parse(line + b"\n", max_line=len(line)) is not None  # its newline is not counted


@settings(max_examples=3000, deadline=None)
@given(st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-10**25, 10**25).map(str),
    st.from_regex(r"-?(0|[1-9][0-9]{0,19})(\.[0-9]{1,19})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
))
def test_a_score_is_the_double_python_reads_to_the_bit(text):
    # Short decimals take an exact product or quotient of doubles, the rest strtod: both are
    # correctly rounded, as float() is (and Arrow's reader).
    line = b'{"case_id": "a", "retrieved_context": [{"id": "x", "score": ' + text.encode() + b"}]}"
    score = rows_of(line)[0]["retrieved_context"][0]["score"]
    assert struct.pack("<d", score) == struct.pack("<d", float(text))


def test_a_score_written_minus_zero_is_minus_zero_on_every_path():
    # Found by the differential fuzzer (CI, 2026-12-06): `-0` is what float() and Arrow's reader
    # read, -0.0; the strict parser agrees, and so must the line-by-line rules' clean copy,
    # kept as written or, with grades, written again (json.loads alone reads 0, a grade of 0).
    scores = b'[{"id": "a", "score": -0}, {"id": "b", "score": -0.0}, {"id": "c", "score": 0}]'
    plain = b'{"case_id": "s", "locale": "en", "category": "g", "retrieved_context": ' + scores + b"}"
    graded = plain[:-1] + b', "relevance": {"a": -0}}'
    expected = ["-0x0.0p+0", "-0x0.0p+0", "0x0.0p+0"]
    assert [item["score"].hex() for item in rows_of(plain)[0]["retrieved_context"]] == expected
    for line in (plain, graded):
        clean = judge_line(line).clean
        read = pa_json.read_json(io.BytesIO(clean), parse_options=pa_json.ParseOptions(explicit_schema=CLEAN_CASES_SCHEMA))
        row = read.to_pylist()[0]
        assert [item["score"].hex() for item in row["retrieved_context"]] == expected, clean
    assert row["relevance"] == [{"card_id": "a", "grade": 0}]


# ----------------------------------------------------------------------------- against the rules

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
text_or_null = st.none() | st.text(max_size=8)
well_typed_item = st.fixed_dictionaries(
    {"id": st.text(min_size=1, max_size=8)},
    optional={"parent_id": text_or_null, "score": st.none() | st.floats(-1e6, 1e6) | st.integers(-1000, 1000),
              "chunk_index": json_values, "text": st.text(max_size=20), "metadata": json_values},
)
well_typed_record = st.fixed_dictionaries(
    {"case_id": st.text(min_size=1, max_size=8), "locale": st.sampled_from(["en", "es-419", "pt-BR"]),
     "category": st.text(min_size=1, max_size=8)},
    optional={"question": text_or_null, "query": text_or_null,
              "must_cite_one_of": st.none() | st.lists(st.text(min_size=1, max_size=6), max_size=3),
              "relevant_ids": st.none() | st.lists(st.text(min_size=1, max_size=6), max_size=3),
              "relevance": st.none(),
              "retrieved_context": st.none() | st.lists(well_typed_item, max_size=4),
              "answer": json_values, "cited_ids": json_values},
)
any_record = st.dictionaries(
    st.sampled_from(["case_id", "locale", "category", "question", "must_cite_one_of", "relevant_ids", "relevance",
                     "retrieved_context", "x"]),
    json_values | st.lists(st.dictionaries(st.sampled_from(["id", "parent_id", "score", "t"]), json_values, max_size=4),
                           max_size=3),
    max_size=6,
)


def dumped(record: dict, ascii_only: bool, compact: bool) -> bytes:
    separators = (",", ":") if compact else (", ", ": ")
    return json.dumps(record, ensure_ascii=ascii_only, separators=separators).encode("utf-8")


@settings(max_examples=400, deadline=None)
@given(well_typed_record, st.booleans(), st.booleans())
def test_every_well_typed_record_is_read_as_json_loads_reads_it(record, ascii_only, compact):
    line = dumped(record, ascii_only, compact)
    assert rows_of(line) == [expected_row(json.loads(line))]


SPOILERS = [b"", b",", b"]", b"}", b"{", b"[", b'"', b"\\", b" ", b"\t", b"\n", b"\x00", b"\x1f", b"\x7f", b"\x80",
            b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"NaN", b"-", b"0", b"e", b".", b"n", b"t", b"\\u", b"\\ud800",
            b"\\udc00", b'"case_id": 1', b'"id": "x"', b"null", b":"]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(well_typed_record, any_record), st.booleans(), st.booleans(), st.data())
def test_a_line_the_parser_takes_is_one_the_rules_take_with_the_same_values(record, ascii_only, compact, data):
    line = dumped(record, ascii_only, compact)
    for _ in range(data.draw(st.integers(0, 3))):  # spoil it: bytes replaced, inserted or cut
        at = data.draw(st.integers(0, len(line)))
        cut = data.draw(st.integers(0, 2))
        line = line[:at] + data.draw(st.sampled_from(SPOILERS)) + line[at + cut:]
    if b"\n" in line or not line:
        return  # one line at a time here (whole files below); b"" is no line, but an empty block
    parsed = parse(line)
    if parsed is None:
        return
    verdict = judge_line(line)
    if verdict.reason is None:
        assert parsed_batch(parsed).to_pylist() == [expected_row(json.loads(line))]
    else:  # refused for its values only: staging refuses it too, whatever read it
        assert not verdict.reason.startswith("not valid"), verdict.reason
        with pytest.raises(NotClean):
            stage(pa.Table.from_batches([parsed_batch(parsed)]))


# ----------------------------------------------------------------------------- whole files


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(well_typed_record, min_size=1, max_size=12), st.sampled_from([7, 64, 4 << 20]), st.booleans())
def test_a_file_read_in_blocks_gives_the_tables_arrow_gives(tmp_path_factory, records, block_bytes, final_newline):
    # Blocks shorter than a line make the carry-over of a line cut by a block do its work.
    path = tmp_path_factory.mktemp("file") / "cases.jsonl"
    text = b"\n".join(dumped(r, ascii_only=False, compact=False) for r in records)
    path.write_bytes(text + (b"\n" if final_newline else b""))
    saved, strict_read.STRICT_BLOCK_BYTES = strict_read.STRICT_BLOCK_BYTES, block_bytes
    try:
        with CaseFileRead(path) as strict:
            assert strict.strict
            ours = pa.concat_tables(strict.tables(5))
            assert strict.facts().fast_read_holds(ours.num_rows)
    finally:
        strict_read.STRICT_BLOCK_BYTES = saved
    with CaseFileRead(path, strict=False) as arrow:
        theirs = pa.concat_tables(arrow.tables(5))
    assert ours.combine_chunks().equals(theirs.combine_chunks())


def test_a_line_longer_than_any_record_ends_the_read_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(strict_read, "STRICT_BLOCK_BYTES", 16)
    monkeypatch.setattr(strict_read, "MAX_RECORD_BYTES", 40)
    path = tmp_path / "cases.jsonl"
    path.write_bytes(b'{"case_id": "a"}\n{"case_id": "' + b"x" * 60 + b'"}\n{"case_id": "c"}\n')
    with CaseFileRead(path) as read, pytest.raises(NotClean):
        list(read.tables(10))


def test_a_gzip_file_and_a_clean_copy_are_read_by_arrow(tmp_path):
    plain, packed = tmp_path / "cases.jsonl", tmp_path / "cases.jsonl.gz"
    plain.write_text(WELL_TYPED + "\n")
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    with CaseFileRead(plain) as ours, CaseFileRead(packed) as gz, CaseFileRead(plain, scan=False) as clean_copy:
        assert ours.strict and not gz.strict and not clean_copy.strict
        assert list(ours.tables(10))[0].equals(list(gz.tables(10))[0])


def test_without_the_parser_every_read_takes_arrow_and_the_job_gives_the_same_figures(tmp_path, monkeypatch):
    # An install without a C compiler has no flows/sources/_case_columns (the extension is optional).
    from builders import SAMPLE_RUNS, evaluate, job_options, reader

    def figures(warehouse):
        with reader(warehouse) as con:
            return con.execute("select * exclude (run_id) from aggregates order by all").fetchall(), \
                con.execute("select * from case_metrics order by run_id, case_id, k").fetchall()

    evaluate(job_options(SAMPLE_RUNS, tmp_path / "strict"))
    monkeypatch.setattr(strict_read, "_case_columns", None)
    with CaseFileRead(next(SAMPLE_RUNS.glob("*/cases.jsonl"))) as read:
        assert not read.strict
    evaluate(job_options(SAMPLE_RUNS, tmp_path / "arrow"))
    assert figures(tmp_path / "strict") == figures(tmp_path / "arrow")
