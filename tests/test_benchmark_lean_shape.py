"""The generator's lean shape (issue 33, SPEC 9: the ratio to pytrec_eval must hold on artifacts
whose lines carry little beyond the metric fields and short passage text): each chunk is only
id, parent_id, score and text, a case has no answer and no cited_ids, and the cards, gold and
ranks are the standard shape's, so the two shapes differ in bytes only, never in figures. The
standard shape's bytes are those of the generator before the lean shape was added."""

from __future__ import annotations

import hashlib
import json

from benchmarks.generate import generate
from benchmarks.run import OURS, PYTREC, max_disagreement, run_harness

# sha256 of cases.jsonl for generate(200, 5, seed=7, processes=1) by benchmarks/generate.py at
# commit ce94752 (before the lean shape), computed from `git show ce94752:benchmarks/generate.py`.
STANDARD_200_5_SEED7 = "8acb8710ce0d4143b3c84c42fd87432ec127c53aaaa762f69d9208b46e3eda42"


def cases(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_standard_shape_writes_the_same_bytes_as_before_the_lean_shape(tmp_path):
    written = generate(200, 5, tmp_path / "standard", seed=7, processes=1)
    assert hashlib.sha256(written.read_bytes()).hexdigest() == STANDARD_200_5_SEED7


def test_lean_lines_carry_only_the_metric_fields_and_text_with_the_standard_ranking(tmp_path):
    standard = cases(generate(300, 8, tmp_path / "standard", seed=3, processes=1))
    lean = cases(generate(300, 8, tmp_path / "lean", seed=3, processes=1, shape="lean"))
    assert len(lean) == len(standard) == 300
    for thin, full in zip(lean, standard):
        assert set(thin) == {"case_id", "locale", "category", "must_cite_one_of", "retrieved_context"}
        assert {"answer", "cited_ids"} <= set(full)
        assert [set(item) for item in thin["retrieved_context"]] == [{"id", "parent_id", "score", "text"}] * 8
        for key in ("case_id", "locale", "category", "must_cite_one_of"):
            assert thin[key] == full[key]
        ranking = [(i["id"], i["parent_id"], i["score"], i["text"]) for i in thin["retrieved_context"]]
        assert ranking == [(i["id"], i["parent_id"], i["score"], i["text"]) for i in full["retrieved_context"]]


def test_lean_artifacts_give_the_same_figures_in_retrieval_eval_and_pytrec_eval(tmp_path):
    rows = run_harness(cases=200, depth=5, repeat=1, work_dir=tmp_path, tools=(OURS, PYTREC), shape="lean")
    assert [row.tool for row in rows] == [OURS, PYTREC]
    assert all("ndcg@10" in row.metrics for row in rows)
    assert max_disagreement(rows) < 1e-6
    assert (tmp_path / "data" / "bench-200-d5-lean" / "cases.jsonl").is_file()
