"""`retrieval-eval compare` (SPEC 11) on the committed sample: every run against the reference
per slice and metric, paired, corrected over every comparison printed, in four renderings of
one model, and the groups of runs no significant difference separates."""

from __future__ import annotations

import json

import pytest
from builders import SAMPLE_RUN_IDS, cli, copy_sample

FIELDS = {"run_id", "slice", "slice_value", "metric", "n", "reference_mean", "mean", "delta", "ci_low", "ci_high",
          "p_value", "p_adjusted", "significant", "wins", "ties", "losses"}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = copy_sample(tmp_path_factory.mktemp("compare"))
    assert cli("run", cwd=root).returncode == 0
    return root


def compare_json(sample, *args) -> dict:
    result = cli("compare", *SAMPLE_RUN_IDS, "--format", "json", *args, cwd=sample)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_json_document_has_the_spec_shape_and_the_oldest_run_is_the_reference(sample):
    document = compare_json(sample)
    assert set(document) == {"reference", "k", "test", "correction", "alpha", "p_family", "comparisons", "pairs",
                             "pairs_correction", "pairs_family", "tied_groups", "letters"}
    assert (document["reference"], document["k"], document["test"], document["correction"], document["alpha"]) == (
        SAMPLE_RUN_IDS[0], 4, "randomization", "holm", 0.05)
    rows = document["comparisons"]
    # 3 other runs × (all + 3 locales) × 3 metrics
    assert len(rows) == 3 * 4 * 3 and all(set(row) == FIELDS for row in rows)
    for row in rows:
        assert row["wins"] + row["ties"] + row["losses"] == row["n"]
        assert row["ci_low"] <= row["delta"] <= row["ci_high"]
        assert row["p_value"] <= row["p_adjusted"] <= 1 and row["significant"] == (row["p_adjusted"] < 0.05)
        assert row["delta"] == pytest.approx(row["mean"] - row["reference_mean"], abs=1e-12)
    assert sorted({run for group in document["tied_groups"] for run in group}) == sorted(set(SAMPLE_RUN_IDS))


def test_the_pt_br_regression_differs_significantly_on_pt_br_only(sample):
    document = compare_json(sample, "--reference", "2026-11-16-hybrid-rerank", "--metrics", "hit_at_k")
    by = {(r["run_id"], r["slice_value"]): r for r in document["comparisons"]}
    regression = "2026-11-23-hybrid-rerank-ptbr-regression"
    assert by[(regression, "pt-BR")]["delta"] == pytest.approx(-0.125)
    assert by[(regression, "pt-BR")]["significant"]
    assert not by[(regression, "en")]["significant"] and not by[(regression, "es-419")]["significant"]


def test_the_correction_runs_over_every_comparison_printed(sample):
    none = {(r["run_id"], r["slice_value"], r["metric"]): r for r in compare_json(sample, "--correction", "none")["comparisons"]}
    holm = {(r["run_id"], r["slice_value"], r["metric"]): r for r in compare_json(sample, "--correction", "holm")["comparisons"]}
    bh = {(r["run_id"], r["slice_value"], r["metric"]): r for r in compare_json(sample, "--correction", "bh")["comparisons"]}
    assert all(row["p_adjusted"] == row["p_value"] for row in none.values())
    # Holm's smallest adjusted p is the smallest raw p times the number of comparisons (36).
    smallest = min(none, key=lambda key: none[key]["p_value"])
    assert holm[smallest]["p_adjusted"] == pytest.approx(min(1.0, 36 * none[smallest]["p_value"]))
    assert all(bh[key]["p_adjusted"] <= holm[key]["p_adjusted"] + 1e-12 for key in holm)


@pytest.mark.parametrize("test", ["bootstrap", "t"])
def test_the_other_tests_give_the_same_deltas(sample, test):
    randomization = {(r["run_id"], r["slice_value"], r["metric"]): r for r in compare_json(sample)["comparisons"]}
    other = {(r["run_id"], r["slice_value"], r["metric"]): r for r in compare_json(sample, "--test", test)["comparisons"]}
    assert other.keys() == randomization.keys()
    assert all(other[key]["delta"] == randomization[key]["delta"] for key in other)


def test_table_markdown_and_html_render_one_model(sample):
    table = cli("compare", *SAMPLE_RUN_IDS, cwd=sample).stdout
    markdown = cli("compare", *SAMPLE_RUN_IDS, "--format", "markdown", cwd=sample).stdout
    html = cli("compare", *SAMPLE_RUN_IDS, "--format", "html", cwd=sample).stdout
    assert "Tied groups on hit@" in table and table.count("locale pt-BR") == 9
    assert "| run | slice |" in markdown
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") >= 6 and "http" not in html.split("<svg")[0]


@pytest.mark.parametrize("args, message", [
    (["2026-11-02-dense", "nope"], "run 'nope' is not in the warehouse"),
    (["2026-11-02-dense"], "only run '2026-11-02-dense' was given; give at least two runs"),
    (["2026-11-02-dense", "--reference", "2026-11-02-dense"], "(it is also the --reference)"),
    (["2026-11-02-dense", "2026-11-09-hybrid", "--k", "7"], "has no metrics at k=7"),
    (["2026-11-02-dense", "2026-11-09-hybrid", "--metrics", "map"], "expected a comma-separated list"),
])
def test_bad_input_is_exit_2_naming_it(sample, args, message):
    result = cli("compare", *args, cwd=sample)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_runs_with_no_scored_case_in_common_are_not_called_tied(tmp_path):
    from builders import case, chunk, write_run

    write_run(tmp_path / "runs", "old", [case("a", [chunk("A::00", "A")], ["A"])], created_at="2026-11-01T00:00:00Z")
    write_run(tmp_path / "runs", "new", [case("b", [chunk("B::00", "B")], ["B"])], created_at="2026-11-02T00:00:00Z")
    assert cli("run", "runs", "--warehouse", "wh", "--report-dir", "rep", cwd=tmp_path).returncode == 0
    result = cli("compare", "old", "new", "--warehouse", "wh", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "run 'new' scored no case that the reference 'old' scored" in result.stderr
