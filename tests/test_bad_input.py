"""Bad input (SPEC 6): every record is loaded or rejected with file, line and reason;
strict by default, --allow-rejects loads the valid ones; rejects always land in `rejects`."""

from __future__ import annotations

import gzip
import json

import pytest
from builders import case, chunk, evaluate, job_options, reader, write_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.transforms.errors import InputError, RejectedRecords
from retrieval_eval.transforms.records import record_problem

GOOD = json.dumps(case("good", [chunk("A::00", "A", 0.9)], ["A"]))


def good_line(case_id: str) -> str:
    return json.dumps(case(case_id, [chunk("A::00", "A", 0.9)], ["A"]))


def run_lines(tmp_path, lines: list[str], allow_rejects: bool = False) -> Warehouse:
    write_run(tmp_path / "runs", "run-a", lines=lines)
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh", allow_rejects=allow_rejects))
    return Warehouse(tmp_path / "wh")


BAD_LINES = {
    "not_json": ('{"case_id": "x",', "not valid JSON"),
    "json_array_not_object": ("[1, 2]", "not an object"),
    "missing_case_id": (json.dumps({"locale": "en", "category": "golden"}), "missing required field case_id"),
    "missing_locale": (json.dumps({"case_id": "x", "category": "golden"}), "missing required field locale"),
    "null_category": (json.dumps({"case_id": "x", "locale": "en", "category": None}), "missing required field category"),
    "numeric_case_id": (json.dumps({"case_id": 5, "locale": "en", "category": "g"}), "field case_id must be a string"),
    "gold_not_a_list": (json.dumps(case("x", [], "card-a")), "must_cite_one_of must be a list"),
    "gold_with_number": (json.dumps(case("x", [], ["a", 3])), "must_cite_one_of[1] must be a non-empty string"),
    "relevant_ids_not_a_list": (json.dumps(case("x", [], ["a"], relevant_ids={"a": 1})), "relevant_ids must be a list"),
    "context_not_a_list": (json.dumps(case("x", "card-a::00", ["a"])), "retrieved_context must be a list"),
    "item_without_id": (json.dumps(case("x", [{"parent_id": "A"}], ["A"])), "retrieved_context[0]: item has no id"),
    "item_with_null_id": (json.dumps(case("x", [chunk("B::00", "B"), {"id": None}], ["A"])), "retrieved_context[1]: item has no id"),
    "item_not_an_object": (json.dumps(case("x", ["A::00"], ["A"])), "retrieved_context[0]: item is a JSON string"),
    "string_score": (json.dumps(case("x", [{"id": "A::00", "score": "0.5"}], ["A"])), "score must be a number"),
    "nan_score": ('{"case_id": "x", "locale": "en", "category": "g", "retrieved_context": [{"id": "A", "score": NaN}]}', "not valid JSON"),
    "infinite_score": ('{"case_id": "x", "locale": "en", "category": "g", "retrieved_context": [{"id": "A", "score": 1e999}]}', "score must be finite"),
    "numeric_parent_id": (json.dumps(case("x", [{"id": "A::00", "parent_id": 7}], ["A"])), "parent_id must be a string"),
    "grade_beyond_64_bits": (json.dumps(case("x", [], None, relevance={"A": 2**70})),
                             "relevance['A'] must be an integer grade in [0, 9223372036854775807]"),
    "repeated_case_id": (good_line("good"), "case_id 'good' repeats line 1"),
    # What Arrow's reader refuses beyond the types is a rule of the line-by-line pass too.
    "case_id_written_twice": ('{"case_id": "x", "case_id": "y", "locale": "en", "category": "g"}', "field case_id is written twice"),
    "item_id_written_twice": ('{"case_id": "x", "locale": "en", "category": "g", "retrieved_context": [{"id": "A", "id": "B"}]}',
                              "retrieved_context[0]: field id is written twice"),
    "lone_surrogate_in_text": ('{"case_id": "x", "locale": "en", "category": "g", "answer": "\\ud800"}', "unpaired UTF-16 surrogate"),
    # One record per line: Arrow's reader would take these as records; the rules do not.
    "two_records_on_a_line": (GOOD.replace('"good"', '"x"') + " " + GOOD.replace('"good"', '"y"'), "not valid JSON (Extra data"),
}


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_bad_record_is_refused_with_file_line_and_reason(tmp_path, name):
    bad, reason = BAD_LINES[name]
    with pytest.raises(RejectedRecords) as refused:
        run_lines(tmp_path, [GOOD, bad])
    message = str(refused.value)
    assert "cases.jsonl:2: " in message and reason in message
    # Strict mode loads nothing of the run, but the rejected record lands in `rejects`.
    with reader(tmp_path / "wh") as con:
        rejects = con.table("rejects").pl()
        loaded = con.execute("select count(*) from duckdb_views() where view_name = 'cases'").fetchone()[0]
    assert rejects.select("line", "raw").rows() == [(2, bad)]
    assert reason in rejects["reason"][0]
    assert loaded == 0


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_allow_rejects_loads_the_valid_records(tmp_path, name):
    bad, _reason = BAD_LINES[name]
    wh = run_lines(tmp_path, [GOOD, bad, good_line("other")], allow_rejects=True)
    with reader(wh) as con:
        cases = con.table("cases").pl()
        runs = con.table("runs").pl()
        rejects = con.table("rejects").pl()
    assert sorted(cases["case_id"].to_list()) == ["good", "other"]
    assert runs["n_rejected"].to_list() == [1] and rejects["line"].to_list() == [2]


def test_a_record_split_over_two_lines_is_two_rejected_lines(tmp_path):
    # Arrow's reader would join them into one record; each line is judged on its own.
    wh = run_lines(tmp_path, [GOOD, '{"case_id": "x",', '"locale": "en", "category": "g"}'], allow_rejects=True)
    with reader(wh) as con:
        assert [line for (line,) in con.execute("select line from rejects order by line").fetchall()] == [2, 3]
        assert con.table("cases").pl()["case_id"].to_list() == ["good"]


def test_a_file_opening_with_null_is_rejected_not_a_crash(tmp_path):
    # pyarrow 26's JSON reader crashes the process on a first value of null: it is never given one.
    wh = run_lines(tmp_path, ["null", GOOD], allow_rejects=True)
    with reader(wh) as con:
        assert con.execute("select line, reason from rejects").fetchall() == [(1, "record is a JSON null, not an object")]
        assert con.table("cases").pl()["case_id"].to_list() == ["good"]


def test_a_run_whose_every_record_is_rejected_loads_empty_tables(tmp_path):
    wh = run_lines(tmp_path, ["[1]", '{"case_id": 5}'], allow_rejects=True)
    with reader(wh) as con:
        assert con.execute("select n_cases, n_rejected from runs").fetchall() == [(0, 2)]
        for table in ("cases", "retrieved", "case_metrics", "aggregates"):  # every view exists, empty
            assert con.table(table).pl().height == 0, table


def test_blank_lines_are_skipped_not_rejected(tmp_path):
    wh = run_lines(tmp_path, [GOOD, "", "   ", good_line("other")])
    with reader(wh) as con:
        assert con.table("cases").pl().height == 2
        assert con.table("rejects").pl().height == 0


def test_unicode_is_kept(tmp_path):
    line = json.dumps(case("pt-ação-1", [chunk("cartão::00", "cartão")], ["cartão"], locale="pt-BR"), ensure_ascii=False)
    wh = run_lines(tmp_path, [line])
    with reader(wh) as con:
        assert con.table("case_metrics").pl()["case_id"].to_list() == ["pt-ação-1"]


def test_gzip_cases_file_is_read(tmp_path):
    run_dir = write_run(tmp_path / "runs", "run-a", lines=[GOOD, "not json"])
    (run_dir / "cases.jsonl").unlink()
    with gzip.open(run_dir / "cases.jsonl.gz", "wt", encoding="utf-8") as out:
        out.write(GOOD + "\nnot json\n")
    with pytest.raises(RejectedRecords, match=r"cases.jsonl.gz:2: not valid JSON"):
        evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh", allow_rejects=True))
    with reader(tmp_path / "wh") as con:
        assert con.table("cases").pl()["case_id"].to_list() == ["good"]


def test_empty_cases_file_is_refused(tmp_path):
    with pytest.raises(InputError, match="holds no records"):
        run_lines(tmp_path, [])


@pytest.mark.parametrize(
    "manifest, reason",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"run_id": "other", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 4}), "differs from its folder"),
        (json.dumps({"run_id": "run-a", "created_at": "yesterday", "retrieval_top_k": 4}), "created_at must be an ISO 8601"),
        (json.dumps({"run_id": "run-a", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 0}), r"retrieval_top_k must be an integer in \[1, 2147483647\], got 0"),
        (json.dumps({"run_id": "run-a", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 2**63}), r"retrieval_top_k must be an integer in \[1, 2147483647\], got 9223372036854775808"),
        (json.dumps({"run_id": "run-a", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": "4"}), r"retrieval_top_k must be an integer"),
        (json.dumps({"run_id": "../x", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 4}), "not a safe name"),
        (json.dumps({"run_id": "", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 4}), "not a safe name"),
        (json.dumps({"run_id": "a/b", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 4}), "not a safe name"),
        (json.dumps({"run_id": "run-a", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 4, "config": []}),
         "field config must be an object, got list"),
        (json.dumps({"run_id": "run-a", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 4, "config": ""}),
         "field config must be an object, got string"),
        # what the cases rules refuse on a line is not JSON in a manifest either
        ('{"run_id": "run-a", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 4, "config": {"t": NaN}}',
         r"not valid JSON \(NaN is not a JSON number\)"),
        ('{"run_id": "run-a", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 4, "config": {"t": 1e999}}',
         r"not valid JSON \(1e999 is too large for a number\)"),
        ('{"run_id": "run-a", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 4, "config": {"t": ' + "9" * 5000 + "}}",
         r"not valid JSON \(an integer of 5000 digits is too large for a number\)"),
        ('{"run_id": "run-a", "created_at": "2026-11-01T00:00:00Z", "retrieval_top_k": 3, "retrieval_top_k": 5}',
         r"not valid JSON \(key 'retrieval_top_k' is written twice in one object\)"),
    ],
)
def test_bad_manifest_is_refused_before_anything_is_written(tmp_path, manifest, reason):
    run_dir = write_run(tmp_path / "runs", "run-a", lines=[GOOD])
    (run_dir / "manifest.json").write_text(manifest)
    with pytest.raises(InputError, match=reason) as refused:
        evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    assert "manifest.json" in str(refused.value)
    assert not (tmp_path / "wh").exists()


def test_missing_manifest_is_refused(tmp_path):
    run_dir = write_run(tmp_path / "runs", "run-a", lines=[GOOD])
    (run_dir / "manifest.json").unlink()
    (tmp_path / "runs" / "run-b").mkdir()
    with pytest.raises(InputError, match="manifest.json: missing"):
        evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))


def _refuse(name: str):
    raise ValueError(name)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
record_like = st.fixed_dictionaries(
    {},
    optional={
        "case_id": st.sampled_from(["a", "b", ""]) | json_values,
        "locale": st.just("en") | json_values,
        "category": st.just("golden") | json_values,
        "must_cite_one_of": st.lists(st.sampled_from(["A", "B"]), max_size=2) | json_values,
        "relevant_ids": st.none() | json_values,
        "retrieved_context": st.lists(
            st.fixed_dictionaries({}, optional={"id": st.sampled_from(["A::00", "B"]) | json_values,
                                                "parent_id": st.just("A") | json_values,
                                                "score": st.floats(-1, 1) | json_values,
                                                "chunk_index": json_values})
            | json_values,
            max_size=3,
        ) | json_values,
    },
)
fuzz_line = st.one_of(record_like.map(json.dumps), st.text(max_size=30), json_values.map(json.dumps))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(fuzz_line, min_size=1, max_size=8))
def test_fuzzed_lines_are_all_accounted_for(tmp_path_factory, lines):
    tmp_path = tmp_path_factory.mktemp("fuzz")
    lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
    written = [GOOD] + lines
    try:
        wh = run_lines(tmp_path, written, allow_rejects=True)
    except InputError as error:  # the only refusal left with --allow-rejects: nothing valid at all
        assert "holds no records" in str(error)
        return
    with reader(wh) as con:
        n_cases = con.table("cases").pl().height
        rejects = con.table("rejects").pl()
    n_blank = sum(1 for line in written if not line.strip(" \t\r\n"))  # JSON whitespace only: NBSP is not blank
    assert n_cases + rejects.height + n_blank == len(written)
    # Each rejected line is rejected for the reason the record rules give.
    for row in rejects.iter_rows(named=True):
        raw = written[row["line"] - 1]
        assert row["raw"] == raw
        try:  # JSON proper: NaN and Infinity are not JSON numbers
            parsed = json.loads(raw, parse_constant=_refuse)
        except ValueError:
            assert row["reason"].startswith("not valid")
            continue
        problem = record_problem(parsed)
        assert problem is None or problem == row["reason"]


def test_clean_gzip_cases_file_takes_the_fast_path(tmp_path, monkeypatch):
    import retrieval_eval.flows.sources.ingest as ingest

    run_dir = write_run(tmp_path / "runs", "run-a", lines=[GOOD])
    (run_dir / "cases.jsonl").unlink()
    with gzip.open(run_dir / "cases.jsonl.gz", "wt", encoding="utf-8") as out:
        out.write(GOOD + "\n" + good_line("other") + "\n")
    monkeypatch.setattr(ingest, "split_records", lambda *a, **k: pytest.fail("took the line-by-line path"))
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    with reader(tmp_path / "wh") as con:
        assert sorted(r[0] for r in con.execute("select case_id from cases").fetchall()) == ["good", "other"]


NOT_JSON_ANYWHERE = {
    "nan_in_an_ignored_field": b'"answer_score": NaN',
    "infinity_in_an_ignored_field": b'"answer_score": Infinity',
    "minus_infinity_in_metadata": b'"metadata": {"x": -Infinity}',
    "invalid_utf8_in_an_ignored_field": b'"answer": "caf\xe9"',
}


@pytest.mark.parametrize("spoil", NOT_JSON_ANYWHERE.values(), ids=NOT_JSON_ANYWHERE.keys())
def test_a_record_gets_one_verdict_in_a_clean_file_and_beside_a_bad_line(tmp_path, spoil):
    # SPEC 6: NaN, Infinity or invalid UTF-8 anywhere on a line makes it not JSON, whichever
    # reading path meets it. Arrow's reader takes them in fields it ignores; the file's facts
    # send such a file to the line-by-line rules.
    odd = GOOD.replace('"good"', '"odd"').encode()[:-1] + b", " + spoil + b"}"
    verdicts = []
    for name, neighbours in (("clean", []), ("beside-a-bad-line", [b'{"case_id": "x",'])):
        lines = [GOOD.encode(), odd, *neighbours]
        run_dir = tmp_path / name / "runs" / "run-a"
        write_run(tmp_path / name / "runs", "run-a", lines=[])
        (run_dir / "cases.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        evaluate(job_options(tmp_path / name / "runs", tmp_path / name / "wh", allow_rejects=True))
        with reader(tmp_path / name / "wh") as con:
            loaded = {row[0] for row in con.execute("select case_id from cases").fetchall()}
            rejected = {row[0]: row[1] for row in con.execute("select line, reason from rejects").fetchall()}
        verdicts.append(("odd" in loaded, rejected.get(2)))
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][0] is False and verdicts[0][1].startswith("not valid")


@pytest.mark.parametrize("allow_rejects", [False, True], ids=["strict", "allow-rejects"])
def test_a_number_beyond_a_double_in_a_field_the_metrics_ignore_is_loaded_on_every_path(tmp_path, allow_rejects):
    # JSON has no range for numbers (SPEC 3: any other field is never an error). Arrow's reader
    # refuses 1e999 wherever it stands, so such a file goes line by line, and its clean copy
    # must not hold it; beside a bad line the verdicts are the same.
    # Nor an integer past Python's 4,300-digit limit for int(), which Arrow reads as a double.
    big = GOOD.replace('"good"', '"big"')[:-1] + ', "answer_score": 1e999, "x": -1e999, "n": ' + "9" * 5000 + "}"
    big_item = json.dumps(case("big-item", [{"id": "A::00", "parent_id": "A", "metadata": {"n": 1}}], ["A"]))
    big_item = big_item.replace('{"n": 1}', '{"n": 1e999}')
    for name, neighbours in (("clean", []), ("beside-a-bad-line", ['{"case_id": "x",'])):
        write_run(tmp_path / name / "runs", "run-a", lines=[GOOD, big, big_item, *neighbours])
        options = job_options(tmp_path / name / "runs", tmp_path / name / "wh", allow_rejects=allow_rejects)
        if neighbours and not allow_rejects:
            with pytest.raises(RejectedRecords) as refused:
                evaluate(options)
            assert [r.line for r in refused.value.rejects] == [4]  # the bad line only
            continue
        evaluate(options)
        with reader(tmp_path / name / "wh") as con:
            assert sorted(r[0] for r in con.execute("select case_id from cases").fetchall()) == ["big", "big-item", "good"]


def test_a_field_the_metrics_ignore_nested_thousands_deep_is_loaded_on_every_path(tmp_path):
    # Arrow's reader takes any depth; judged line by line (beside a bad line), json.loads met
    # RecursionError near 1,000 levels and the same record was rejected.
    # Its strings are still searched for an unpaired surrogate escape, without recursion.
    deep = GOOD.replace('"good"', '"deep"')[:-1] + ', "trace": ' + "[" * 5000 + '{"x": 1}' + "]" * 5000 + "}"
    lone = deep.replace('"deep"', '"lone"').replace('{"x": 1}', '{"x": "\\ud800"}')
    for name, neighbours in (("clean", []), ("beside-a-bad-line", ['{"case_id": "x",'])):
        write_run(tmp_path / name / "runs", "run-a", lines=[GOOD, deep, lone, *neighbours])
        options = job_options(tmp_path / name / "runs", tmp_path / name / "wh", allow_rejects=True)
        evaluate(options)
        with reader(tmp_path / name / "wh") as con:
            assert sorted(r[0] for r in con.execute("select case_id from cases").fetchall()) == ["deep", "good"]
            reasons = sorted(r[0] for r in con.execute("select reason from rejects").fetchall())
        assert "not valid JSON (an unpaired UTF-16 surrogate escape)" in reasons and len(reasons) == 1 + len(neighbours)


def test_nan_written_inside_text_is_text(tmp_path):
    # The facts cannot tell a token from text, so the file is judged line by line: loaded.
    quoted = json.dumps(case("quoted", [chunk("A::00", "A")], ["A"], answer="NaN and Infinity are words here"))
    write_run(tmp_path / "runs", "run-a", lines=[GOOD, quoted])
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    with reader(tmp_path / "wh") as con:
        assert con.execute("select count(*) from cases").fetchone() == (2,)


def test_both_a_cases_file_and_its_gzip_are_refused_before_any_work(tmp_path):
    run_dir = write_run(tmp_path / "runs", "run-a", lines=[GOOD])
    (run_dir / "cases.jsonl.gz").write_bytes(gzip.compress((GOOD + "\n").encode()))
    with pytest.raises(InputError, match="holds both cases.jsonl and cases.jsonl.gz"):
        evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    assert not (tmp_path / "wh").exists()


def test_a_kb_that_was_given_and_does_not_exist_is_refused_before_any_work(tmp_path):
    from builders import cli

    write_run(tmp_path / "runs", "run-a", lines=[GOOD])
    result = cli("run", "runs", "--kb", "data/kb/crads.jsonl", "--warehouse", "wh", "--report-dir", "rep", cwd=tmp_path)
    assert result.returncode == 2
    assert "data/kb/crads.jsonl: no such knowledge base file" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "wh").exists()


def test_a_kb_with_a_bad_card_is_refused_before_any_work(tmp_path):
    from builders import cli

    write_run(tmp_path / "runs", "run-a", lines=[GOOD])
    kb = tmp_path / "cards.jsonl"
    kb.write_text('{"id": "A", "title": "a"}\n{"id": "A", "title": "again"}\n')
    result = cli("run", "runs", "--kb", str(kb), "--warehouse", "wh", "--report-dir", "rep", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{kb}:2: id 'A' repeats line 1" in result.stderr
    assert not (tmp_path / "wh").exists() and not (tmp_path / "rep").exists()


def test_runs_are_ordered_by_the_instant_of_created_at(tmp_path):
    # "2026-11-02T01:00:00+05:00" is 2026-11-01T20:00Z: earlier than "2026-11-01T22:00:00Z",
    # though its text sorts after it.
    write_run(tmp_path / "runs", "offset", lines=[GOOD], created_at="2026-11-02T01:00:00+05:00")
    write_run(tmp_path / "runs", "utc", lines=[good_line("other")], created_at="2026-11-01T22:00:00Z")
    result = evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    assert result.report.report.runs["run_id"].to_list() == ["offset", "utc"]
    assert result.report.report.newest.run_id == "utc"  # the newest, detailed and gated
