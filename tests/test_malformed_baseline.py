"""SPEC 16 "Every malformed input is exit 2 with one line": a baseline nested deep anywhere, or
holding a lone surrogate escape, is refused naming the file and the field, before any work."""

from __future__ import annotations

import json

import pytest
from builders import SAMPLE_BASELINE, case, chunk, cli, write_run


def spoiled_baseline(tmp_path, edit) -> str:
    document = json.loads(SAMPLE_BASELINE.read_text())
    path = tmp_path / "baseline.json"
    path.write_text(edit(document, json.dumps(document)))
    return str(path)


def gate_with(tmp_path, baseline: str):
    write_run(tmp_path / "runs", "run-a", [case("c1", [chunk("A::00", "A", 0.9)], ["A"])])
    return cli("run", "runs", "--warehouse", "wh", "--report-dir", "rep", "--baseline", baseline, cwd=tmp_path)


DEEP = "[" * 50_000 + "]" * 50_000
SPOILED = {
    # k nested 50,000 deep (json.loads meets RecursionError; the deep reader stops at the limit)
    "deep_k": (lambda d, text: text.replace(f'"k": {d["k"]}', f'"k": {DEEP}', 1),
               "k[0][0]", "nested deeper than 32 levels"),
    # deep nesting in another field, under objects
    "deep_source": (lambda d, text: text.replace('"source": {', '"source": {"x": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + ", ", 1),
                    "source.x.a.a", "nested deeper than 32 levels"),
    # a file of nothing but 5,000,000 opened arrays: refused at the limit, never held
    "only_opened": (lambda d, text: '{"k": ' + "[" * 5_000_000, "k[0]", "nested deeper than 32 levels"),
    # a case id that is a lone surrogate escape
    "surrogate_case_id": (lambda d, text: text.replace(json.dumps(next(iter(d["cases"]))), '"\\ud800"', 1),
                          'cases["\\ud800"]', "unpaired UTF-16 surrogate"),
    # a lone surrogate in a value
    "surrogate_run_id": (lambda d, text: text.replace(json.dumps(d["run_id"]), '"x\\udfff"', 1),
                         "run_id", "unpaired UTF-16 surrogate"),
}


@pytest.mark.parametrize("name", sorted(SPOILED))
def test_a_malformed_baseline_is_exit_2_with_one_line_naming_the_field(tmp_path, name):
    edit, field, reason = SPOILED[name]
    baseline = spoiled_baseline(tmp_path, edit)
    result = gate_with(tmp_path, baseline)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"retrieval-eval: {baseline}: {field}") and reason in result.stderr
    assert not (tmp_path / "wh").exists()  # refused before any work


@pytest.mark.parametrize(("name", "data", "said"), [
    ("bom", b"\xef\xbb\xbf" + SAMPLE_BASELINE.read_bytes(), "BOM"),
    ("invalid_utf8", SAMPLE_BASELINE.read_bytes().replace(b'"k"', b'"k\xff"', 1), "can't decode byte 0xff"),
])
def test_a_baseline_that_is_not_utf8_json_is_exit_2_naming_the_file(tmp_path, name, data, said):
    path = tmp_path / "baseline.json"
    path.write_bytes(data)
    result = gate_with(tmp_path, str(path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"retrieval-eval: {path}: not valid JSON") and said in result.stderr
