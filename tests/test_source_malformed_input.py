"""Every malformed input of another tool's format is exit 2 with one line naming the file,
never a traceback (SPEC 16, SPEC 15): bad UTF-8, nesting deeper than the readers' JSON limit
(flows/sources/formats/input_rows.py MAX_JSON_DEPTH, read by transforms/records.py
`strict_json_loads`), a JSON document that is a list where an object is expected, an empty
file, and a TSV the csv module cannot read; a bad record of a line or table file is a reject
named `file:line N` / `file:row N`, the other records read."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from builders import cli
from retrieval_eval.flows.sources.formats import READERS, qrels
from retrieval_eval.flows.sources.formats.input_rows import MAX_JSON_DEPTH
from retrieval_eval.transforms.errors import InputError
from test_source_formats import FIXTURES

DEEP = "[" * 5000 + "]" * 5000  # deeper than json.loads recurses, far deeper than MAX_JSON_DEPTH
# Inside an object (a row, a document): MAX_JSON_DEPTH + 1 containers, and MAX_JSON_DEPTH.
JUST_TOO_DEEP = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
DEEP_ENOUGH = JUST_TOO_DEEP[1:-1]
BEIR_QRELS = FIXTURES / "beir/qrels.tsv"

# (format, input file name, its bytes, qrels: None, a fixture's path, or (name, bytes)), and
# the words the one-line message holds after the file's path.
WHOLE_FILE_REFUSALS = {
    "beir results nested deep": ("beir", "results.json", f'{{"q1": {DEEP}}}'.encode(), BEIR_QRELS,
                                 "not JSON (q1[0]"),
    "ranx run nested just too deep": ("ranx", "run.json", f'{{"q1": {JUST_TOO_DEEP}}}'.encode(), BEIR_QRELS,
                                      f"nested deeper than {MAX_JSON_DEPTH} levels"),
    "mlflow table nested deep": ("mlflow", "table.json", f'{{"columns": ["a"], "data": [{DEEP}]}}'.encode(), None,
                                 "nested deeper than"),
    "deepeval run nested deep": ("deepeval", "run.json", f'{{"testRunData": {{"testCases": {DEEP}}}}}'.encode(),
                                 None, "nested deeper than"),
    "ranx qrels nested deep": ("ranx", "run.json", b'{"q1": {"d1": 1.0}}', ("qrels.json", f'{{"q1": {DEEP}}}'.encode()),
                               "nested deeper than"),
    "beir results not UTF-8": ("beir", "results.json", b'{"q1": {"d\xff": 1.0}}', BEIR_QRELS, "not UTF-8 text"),
    "deepeval run not UTF-8": ("deepeval", "run.json", b'{"testCases": [{"name": "\xc3("}]}', None, "not UTF-8 text"),
    "ragas csv not UTF-8": ("ragas", "data.csv", b"user_input,retrieved_contexts\n\xff,['a']\n", None,
                            "not UTF-8 text"),
    "beir qrels not UTF-8": ("beir", "results.json", b'{"q1": {"d1": 1.0}}',
                             ("qrels.tsv", b"query-id\tcorpus-id\tscore\nq1\td\xff\t1\n"), "not UTF-8 text"),
    "beir results a list": ("beir", "results.json", b"[]", BEIR_QRELS, "not a JSON object of query id"),
    "ranx qrels a list": ("ranx", "run.json", b'{"q1": {"d1": 1.0}}', ("qrels.json", b"[]"),
                          "not a JSON object of query id to {doc id: grade}"),
    "mlflow table a list": ("mlflow", "table.json", b"[]", None, "not the JSON of mlflow.log_table"),
    "deepeval run a list": ("deepeval", "run.json", b"[]", None, "not a DeepEval test run"),
    "beir results empty": ("beir", "results.json", b"", BEIR_QRELS, "is empty"),
    "mlflow table empty": ("mlflow", "table.json", b"  \n", None, "is empty"),
    "deepeval run empty": ("deepeval", "run.json", b"", None, "is empty"),
    "ranx qrels empty": ("ranx", "run.json", b'{"q1": {"d1": 1.0}}', ("qrels.json", b""), "is empty"),
    "beir qrels empty": ("beir", "results.json", b'{"q1": {"d1": 1.0}}', ("qrels.tsv", b""), "holds no judgments"),
    "jsonl qrels empty": ("openinference", "spans.jsonl", b'{"span_kind": "LLM"}\n', ("gold.jsonl", b"\n"),
                          "holds no judgments"),
    "ragas parquet not Parquet": ("ragas", "data.parquet", b"PAR1 not a parquet file PAR1", None,
                                  "not a readable Parquet file"),
}


def _write(tmp_path, format_name, name, data, qrels_given):
    path = tmp_path / name
    path.write_bytes(data)
    if isinstance(qrels_given, tuple):
        qrels_path = tmp_path / qrels_given[0]
        qrels_path.write_bytes(qrels_given[1])
        return path, qrels_path
    return path, qrels_given


@pytest.mark.parametrize("case", list(WHOLE_FILE_REFUSALS), ids=list(WHOLE_FILE_REFUSALS))
def test_a_malformed_file_is_bad_input_naming_it(tmp_path, case):
    format_name, name, data, qrels_given, words = WHOLE_FILE_REFUSALS[case]
    path, qrels_path = _write(tmp_path, format_name, name, data, qrels_given)
    with pytest.raises(InputError) as refused:
        list(READERS[format_name](path, qrels=qrels_path))
    message = str(refused.value)
    named = qrels_path if isinstance(qrels_given, tuple) else path
    assert message.startswith(f"{named}: ") and words in message, message
    assert "\n" not in message


def test_a_tsv_the_csv_module_refuses_is_bad_input(tmp_path, monkeypatch):
    # csv.Error is raised for a field longer than csv.field_size_limit, which the reader sets to
    # the record limit (64 MiB): lowered here to 100 bytes so the file can stay small.
    monkeypatch.setattr(qrels, "MAX_RECORD_BYTES", 100)
    tsv = tmp_path / "qrels.tsv"
    tsv.write_text("query-id\tcorpus-id\tscore\nq1\t" + "d" * 200 + "\t1\n")
    with pytest.raises(InputError, match=rf"^{tsv}: not a readable TSV file \(field larger than field limit"):
        qrels.read_gold(tsv)


def test_a_deep_or_bad_record_of_a_line_or_table_file_is_a_reject_by_its_place(tmp_path):
    lines = tmp_path / "data.jsonl"
    lines.write_bytes(b'{"user_input": "q", "retrieved_contexts": ["a"], "reference_contexts": ["a"]}\n'
                      + f'{{"user_input": "deep", "extra": {DEEP}}}\n'.encode()
                      + b'{"user_input": "\xff"}\n'
                      + f'{{"user_input": "just too deep", "extra": {JUST_TOO_DEEP}}}\n'.encode()
                      + f'{{"user_input": "deep enough", "extra": {DEEP_ENOUGH}}}\n'.encode())
    records = list(READERS["ragas"](lines, qrels=None))
    rejects = {record.origin: record.reject for record in records if record.reject}
    assert [record.case["case_id"] for record in records if record.case] == ["row-1", "row-5"]
    assert set(rejects) == {f"{lines}:line 2", f"{lines}:line 3", f"{lines}:line 4"}
    assert "nested deeper than 64 levels" in rejects[f"{lines}:line 2"]
    assert rejects[f"{lines}:line 3"].startswith("not JSON (") and "utf-8" in rejects[f"{lines}:line 3"]
    assert "nested deeper than 64 levels" in rejects[f"{lines}:line 4"]

    table = tmp_path / "data.csv"
    table.write_text("user_input,retrieved_contexts\nq,\"['a']\"\ndeep," + DEEP + "\nliteral," + JUST_TOO_DEEP + "\n")
    records = list(READERS["ragas"](table, qrels=None))
    assert [record.case["case_id"] for record in records if record.case] == ["row-1"]
    assert {record.origin for record in records if record.reject} == {f"{table}:row 2", f"{table}:row 3"}


def test_an_openinference_metadata_text_nested_deep_is_a_reject(tmp_path):
    span = {"context": {"trace_id": "t1"}, "attributes": {
        "openinference.span.kind": "RETRIEVER",
        "retrieval.documents.0.document.id": "d1",
        "retrieval.documents.0.document.metadata": '{"a": ' + DEEP + "}"}}
    spans = tmp_path / "spans.jsonl"
    spans.write_text(json.dumps(span) + "\n")
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"case_id": "t1", "must_cite_one_of": ["d1"]}\n')
    rejects = {record.origin: record.reject for record in READERS["openinference"](spans, qrels=gold) if record.reject}
    assert rejects == {f"{spans}:line 1": "retrieval.documents.0.document.metadata is not a JSON object"}


def _one_line_exit_2(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert all(word in line for word in words), line


def test_through_the_command_each_is_exit_2_with_one_line(tmp_path):
    where = ["--warehouse", str(tmp_path / "wh"), "--report-dir", str(tmp_path / "rep")]
    deep = tmp_path / "latest_test_run.json"
    deep.write_text(f'{{"testRunData": {{"testCases": {DEEP}}}}}')
    _one_line_exit_2(cli("run", "--source", "deepeval", str(deep), *where), str(deep), "nested deeper than")

    results = tmp_path / "results.json"
    results.write_text('{"q1": {"d1": 1.0}}')
    bad_qrels = tmp_path / "qrels.tsv"
    bad_qrels.write_bytes(b"query-id\tcorpus-id\tscore\nq1\td\xff\t1\n")
    _one_line_exit_2(cli("run", "--source", "beir", str(results), "--qrels", str(bad_qrels), *where),
                     str(bad_qrels), "not UTF-8 text")



def test_a_parquet_cell_json_cannot_hold_is_a_reject_by_its_row(tmp_path):
    parquet = tmp_path / "dataset.parquet"
    pq.write_table(pa.table({"user_input": [b"\x00question"], "retrieved_contexts": [["a"]],
                             "reference_contexts": [["a"]]}), parquet)
    result = cli("run", "--source", "ragas", str(parquet), "--warehouse", str(tmp_path / "wh"),
                 "--report-dir", str(tmp_path / "rep"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[1].startswith(f"{parquet}:row 1: holds a value that is not JSON (Object of type bytes")
