"""The regression gate and the baseline snapshot (SPEC 8) on fixtures whose outcome is
obvious by construction: 100 en + 100 es-419 cases, one gold card each, 80 hits per locale
in the baseline (hit = recall = nDCG = RR per case, so every gated metric moves together)."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from builders import case, chunk, cli, evaluate, job_options, write_run
from retrieval_eval.flows.inputs.baseline_file import read_baseline
from retrieval_eval.flows.outputs.warehouse_gate import GateOptions, gate_run, refresh_baseline
from retrieval_eval.flows.warehouse.warehouse import Warehouse
from retrieval_eval.transforms.aggregates import aggregates, slice_partials
from retrieval_eval.transforms.baseline import (
    AGGREGATE_FIELDS,
    build_snapshot,
    snapshot_case_metrics,
)
from retrieval_eval.transforms.gate import compare, suggest_floors
from retrieval_eval.transforms.metrics import GATED
from retrieval_eval.transforms.gate_render import render_gate_markdown

LOCALES = ("en", "es-419")
N_PER_LOCALE, HITS_PER_LOCALE = 100, 80


def cases(misses_added: dict[str, int] | None = None, hits_added: dict[str, int] | None = None,
          locales=LOCALES, drop=(), extra=(), empty=False) -> list[dict]:
    """Baseline cases, with `misses_added[locale]` former hits turned into misses, etc."""
    out = []
    for locale in locales:
        for i in range(N_PER_LOCALE):
            case_id = f"{locale}-{i:03d}"
            if case_id in drop:
                continue
            hit = i < HITS_PER_LOCALE
            if hit and i >= HITS_PER_LOCALE - (misses_added or {}).get(locale, 0):
                hit = False
            if not hit and i < HITS_PER_LOCALE + (hits_added or {}).get(locale, 0) and i >= HITS_PER_LOCALE:
                hit = True
            retrieved = [] if empty else [chunk("G::00" if hit else "X::00", "G" if hit else "X"), chunk("Y::00", "Y")]
            out.append(case(case_id, retrieved, ["G"], locale=locale))
    out += [case(case_id, [chunk("G::00", "G")], ["G"], locale="en") for case_id in extra]
    return out


@pytest.fixture
def gate(tmp_path):
    """Gate a candidate (given as cases) against a baseline refreshed from the baseline cases."""
    warehouse = Warehouse(tmp_path / "wh")
    runs = tmp_path / "runs"
    kb = tmp_path / "cards.jsonl"  # the runs' own KB: every gold card (G) is a card
    kb.write_text("".join(json.dumps({"id": card, "title": card}) + "\n" for card in ("G", "X", "Y")))
    write_run(runs, "base", cases(), created_at="2026-11-01T00:00:00Z")
    evaluate(job_options(runs / "base", warehouse.root, kb=kb))
    baseline = tmp_path / "baseline.json"
    refresh_baseline(warehouse, "base", baseline)

    def run(candidate: list[dict], **options):
        write_run(runs, "cand", candidate, created_at="2026-11-02T00:00:00Z")
        evaluate(job_options(runs / "cand", warehouse.root, kb=kb))
        settings = {"tolerance": 0.05, "locale_tolerance": 0.08, "floors": {}} | options  # GateOptions fields
        return gate_run(warehouse.state(), "cand", GateOptions(baseline, warehouse.root, **settings), read_baseline(baseline))

    run.baseline = baseline
    run.warehouse = warehouse
    return run


def failing(result) -> set[tuple[str, str, str]]:
    return {(line.slice, line.slice_value, line.metric) for line in result.lines if line.failed}


def test_identical_candidate_passes(gate):
    result = gate(cases())
    assert result.passed and not result.improved
    assert result.to_miss == [] and result.to_hit == []
    all_hit = next(l for l in result.lines if (l.slice, l.metric) == ("all", "hit_at_k"))
    assert all_hit.delta == 0 and all_hit.delta_ci == (0.0, 0.0) and all_hit.n_baseline == 200


def test_drop_just_over_the_all_tolerance_fails(gate):
    # 6 + 5 hits lost of 200: all drops 0.055 > 0.05; en 0.06 and es 0.05 stay within 0.08.
    result = gate(cases(misses_added={"en": 6, "es-419": 5}))
    assert failing(result) == {("all", "all", m) for m in ("hit_at_k", "recall_at_k", "ndcg_at_k")}
    assert len(result.to_miss) == 11


def test_drop_just_under_the_all_tolerance_passes(gate):
    # 5 + 4 of 200: all drops 0.045.
    assert gate(cases(misses_added={"en": 5, "es-419": 4})).passed


def test_locale_only_drop_fails_on_that_locale(gate):
    # 9 of en's 100: en drops 0.09 > 0.08, all drops 0.045 < 0.05.
    result = gate(cases(misses_added={"en": 9}))
    assert failing(result) == {("locale", "en", m) for m in ("hit_at_k", "recall_at_k", "ndcg_at_k")}
    assert {c["locale"] for c in result.to_miss} == {"en"}


def test_drop_exactly_at_the_locale_tolerance_passes(gate):
    # 8 of 100: en drops exactly 0.08, which is not below baseline − 0.08.
    assert gate(cases(misses_added={"en": 8})).passed


def test_a_slice_missing_now_fails(gate):
    result = gate(cases(locales=("en",)))
    assert ("locale", "es-419", "hit_at_k") in failing(result)
    assert any("slice missing" in reason for reason in result.failures)
    assert len(result.removed) == 100


def test_floors_are_off_unless_given(gate):
    candidate = cases()
    assert gate(candidate).passed
    assert gate(candidate, floors={"hit_at_k": 0.75, "recall_at_k": 0.75}).passed
    result = gate(candidate, floors={"hit_at_k": 0.85})
    assert not result.passed and any("below the floor 0.85" in r for r in result.failures)


def test_improvement_passes_and_suggests_a_refresh(gate):
    from retrieval_eval.transforms.gate_render import render_gate

    result = gate(cases(hits_added={"en": 15, "es-419": 15}))
    assert result.passed and result.improved
    assert len(result.to_hit) == 30
    assert "consider `retrieval-eval baseline refresh cand`" in render_gate(result)


def test_vacuous_run_fails_with_that_word(gate):
    result = gate(cases(empty=True))
    assert not result.passed
    assert result.failures[0].startswith("VACUOUS")


def test_cases_added_and_removed_are_listed_and_pairing_uses_the_shared_ones(gate):
    candidate = cases(drop={"en-000", "es-419-099"}, extra=("en-new",))
    result = gate(candidate, allow_missing_cases=True)
    assert result.passed
    assert result.added == ["en-new"] and result.removed == ["en-000", "es-419-099"]
    all_hit = next(l for l in result.lines if (l.slice, l.metric) == ("all", "hit_at_k"))
    assert all_hit.n_current == 199 and all_hit.delta_ci == (0.0, 0.0)
    # Without --allow-missing-cases the two cases the gate never saw fail it.
    strict = gate(candidate)
    assert not strict.passed
    assert any("2 case(s) of the baseline are missing from cand (en-000, es-419-099)" in r for r in strict.failures)
    # listed in the CI summary (gate --format markdown) as in the terminal
    markdown = render_gate_markdown(result).splitlines()
    at = markdown.index("**1 case(s) added since the baseline, 2 removed** (paired figures use the cases in both):")
    assert markdown[at + 1:at + 4] == ["- added `en-new`", "- removed `en-000`", "- removed `es-419-099`"]


@pytest.mark.parametrize("decision", ["point", "significant"])
def test_cases_added_since_the_baseline_cannot_hide_a_drop_on_the_cases_it_has(gate, decision):
    # en loses 10 of its 80 hits (a paired drop of 0.10 > 0.08) while 60 new en cases, all
    # hits, lift en's slice mean to (70 + 60) / 160 = 0.8125 above its baseline 0.80, and
    # all's to 0.81. all's paired drop is 10 / 200 = 0.05, at its tolerance, so it passes.
    candidate = cases(misses_added={"en": 10}, extra=tuple(f"en-new-{i:02d}" for i in range(60)))
    result = gate(candidate, decision=decision)
    assert failing(result) == {("locale", "en", m) for m in ("hit_at_k", "recall_at_k", "ndcg_at_k")}
    en_hit = next(l for l in result.lines if (l.slice_value, l.metric) == ("en", "hit_at_k"))
    assert en_hit.current == pytest.approx(130 / 160) and en_hit.delta > 0
    assert "on the 100 cases both runs scored, 0.700 < 0.800 − 0.08" in en_hit.note
    assert not result.passed and not result.improved


def test_small_slices_warn_that_the_tolerance_is_not_detectable(gate):
    # The sign-flip test's MDE of hit (p = 0.8) is 0.039 on all (n = 200) and 0.078 per locale
    # (n = 100; tests/test_minimum_detectable_drop.py): below the default tolerances (0.05,
    # 0.08), so nothing warns; above tolerances of 0.03 and 0.05, so every gated slice warns.
    assert gate(cases()).warnings == []
    warnings = gate(cases(), tolerance=0.03, locale_tolerance=0.05).warnings
    assert [w.split(":")[0] for w in warnings] == ["all n = 200", "en n = 100", "es-419 n = 100"]


def test_refresh_is_byte_identical_from_the_same_run(gate, tmp_path):
    again = tmp_path / "again.json"
    refresh_baseline(gate.warehouse, "base", again)
    assert again.read_bytes() == gate.baseline.read_bytes()
    # A fresh warehouse built from the same artifacts gives the same bytes too.
    evaluate(job_options(tmp_path / "runs" / "base", tmp_path / "wh2"))
    fresh = tmp_path / "fresh.json"
    refresh_baseline(Warehouse(tmp_path / "wh2"), "base", fresh)
    assert fresh.read_bytes() == gate.baseline.read_bytes()
    snapshot = json.loads(fresh.read_text())
    assert snapshot["source"]["artifact_digest"].startswith("blake3:")
    assert len(snapshot["cases"]) == 200


def test_a_snapshot_the_metric_code_no_longer_reproduces_fails_plainly(gate):
    # A snapshot as code that scored en-000 a miss would have written it: the case and the
    # aggregates it enters, which must agree with the cases (the file is refused otherwise).
    snapshot = json.loads(gate.baseline.read_text())
    snapshot["cases"]["en-000"]["hit_at_k"] = 0.0
    cases_now = snapshot_case_metrics(snapshot).with_columns(pl.lit("base").alias("run_id"), pl.lit(snapshot["k"]).alias("k"))
    snapshot["aggregates"] = [{key: round(row[key], 10) if isinstance(row[key], float) else row[key] for key in AGGREGATE_FIELDS}
                              for row in aggregates(slice_partials(cases_now)).iter_rows(named=True)]
    gate.baseline.write_text(json.dumps(snapshot))
    result = gate(cases())
    assert not result.passed
    assert "recomputed now, differs from its snapshot in 1 case(s) (first: en-000)" in result.reproduction_error


def test_floor_suggestion_is_observed_minus_margin(gate):
    snapshot = json.loads(gate.baseline.read_text())
    # Baseline hit on all = 160 / 200 = 0.80 → 0.80 − 0.05 = 0.75.
    assert suggest_floors(snapshot, 0.05) == {"hit_at_k": 0.75, "recall_at_k": 0.75}


def test_gate_cli_exit_codes(gate, tmp_path):
    gate(cases(misses_added={"en": 9}))
    common = ["--warehouse", str(gate.warehouse.root), "--baseline", str(gate.baseline)]
    failed = cli("gate", "cand", *common, cwd=tmp_path)
    assert failed.returncode == 1 and "FAIL" in failed.stdout and "en-079 (en, golden)" in failed.stdout
    passed = cli("gate", "cand", *common, "--locale-tolerance", "0.1", cwd=tmp_path)
    assert passed.returncode == 0 and "PASS" in passed.stdout
    missing = cli("gate", "nope", *common, cwd=tmp_path)
    assert missing.returncode == 2 and "'nope' is not in the warehouse" in missing.stderr
    no_baseline = cli("gate", "cand", "--warehouse", str(gate.warehouse.root), "--baseline", "none.json", cwd=tmp_path)
    assert no_baseline.returncode == 2 and "no baseline" in no_baseline.stderr


def test_check_kb_lists_each_offending_case_and_id(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "run-a", [
        case("ok", [], ["card-a"]),
        case("bad", [], ["card-a", "card-gone"], relevant_ids=["card-also-gone"]),
    ])
    kb = tmp_path / "cards.jsonl"
    kb.write_text(json.dumps({"id": "card-a", "title": "A"}) + "\n")
    result = cli("check-kb", str(runs), "--kb", str(kb), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"run-a/bad: must_cite_one_of id 'card-gone' is not a card of {kb}",
        f"run-a/bad: relevant_ids id 'card-also-gone' is not a card of {kb}",
    ]


def test_check_kb_names_the_malformed_records_it_cannot_read_by_line(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "run-a", lines=[json.dumps(case("ok", [], ["card-a"])), '{"case_id": "cut",', "[1]"])
    kb = tmp_path / "cards.jsonl"
    kb.write_text(json.dumps({"id": "card-a", "title": "A"}) + "\n")
    result = cli("check-kb", str(runs), "--kb", str(kb), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    cases_file = runs / "run-a" / "cases.jsonl"
    assert f"{cases_file}: 2 malformed record(s)" in result.stderr
    assert f"{cases_file}:2: not valid JSON" in result.stderr and f"{cases_file}:3: " in result.stderr


def test_a_bad_kb_is_refused_naming_each_bad_card_by_its_line(tmp_path):
    kb = tmp_path / "cards.jsonl"
    kb.write_text("\n".join([
        '{"id": "card-a", "title": "A"}', '{"id": "card-b", "title": "B"}', "{bad",
        '{"id": "card-a", "title": "again"}', '{"title": "no id"}', '{"id": "card-z"}', "[1]", "",
        '{"id": 5, "title": "a number"}', '{"id": "card-c", "title": "C", "id": "card-d"}',
        '{"id": "card-e", "title": 5}',
        # fields the rules do not read hold anything, as in a cases file
        '{"id": "card-f", "title": "F", "size": 1e999, "tags": {"k": 1, "k": 2}}',
    ]) + "\n")
    from builders import REPO

    result = cli("check-kb", "--kb", str(kb), cwd=REPO)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[1:] == [
        f"{kb}:3: not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        f"{kb}:4: id 'card-a' repeats line 1",
        f"{kb}:5: card has no id",
        f"{kb}:6: card 'card-z' has no title",
        f"{kb}:7: a card is a JSON object, got list",
        f"{kb}:9: field id must be a non-empty string, got number",
        f"{kb}:10: field id is written twice",
        f"{kb}:11: field title of card 'card-e' must be a string, got number",
    ]
    assert "auto_detect" not in result.stderr  # DuckDB's advice on its own reader is not ours to give


def test_a_kb_card_gets_one_verdict_whatever_the_other_cards_hold(tmp_path):
    from builders import REPO
    from retrieval_eval.flows.inputs.kb import kb_titles, read_kb

    odd = ['{"id": "card-a", "title": "A", "size": 1e999}', '{"id": "card-b", "title": "B", "x": {"k": 1, "k": 2}}']
    kb = tmp_path / "cards.jsonl"
    kb.write_text("\n".join(odd) + "\n")
    assert kb_titles(read_kb(kb)) == {"card-a": "A", "card-b": "B"}
    kb.write_text("\n".join([*odd, '{"title": "no id"}']) + "\n")
    result = cli("check-kb", "--kb", str(kb), cwd=REPO)
    assert result.returncode == 2 and result.stderr.splitlines()[1:] == [f"{kb}:3: card has no id"]


def test_a_job_judges_its_kb_once_and_its_gate_tells_the_flips_whose_gold_is_not_a_card(tmp_path, monkeypatch):
    """`run --kb K --baseline B`: each card of K gets one verdict in the whole job (the report
    and the gate use the KB the job read), and the gate's flips whose gold is not a card of K
    say so (reason gold_not_in_kb, transforms/flips.py)."""
    from retrieval_eval.flows.inputs import kb as kb_module

    runs, warehouse, baseline = tmp_path / "runs", tmp_path / "wh", tmp_path / "baseline.json"
    kb = tmp_path / "cards.jsonl"
    kb.write_text('{"id": "X", "title": "x"}\n{"id": "Y", "title": "y"}\n')  # the gold card, G, is not one
    write_run(runs, "base", cases(), created_at="2026-11-01T00:00:00Z")
    evaluate(job_options(runs / "base", warehouse, kb=kb))
    refresh_baseline(Warehouse(warehouse), "base", baseline)
    write_run(runs, "cand", cases(misses_added={"en": 10}), created_at="2026-11-02T00:00:00Z")
    judged = []
    judge = kb_module.card_problem
    monkeypatch.setattr(kb_module, "card_problem", lambda line, seen, number: judged.append(number) or judge(line, seen, number))
    result = evaluate(job_options(runs / "cand", warehouse, kb=kb, gate=GateOptions(baseline, warehouse)))
    assert judged == [1, 2]
    assert not result.gate.passed
    assert len(result.gate.to_miss) == 10 and {flip["reason"] for flip in result.gate.to_miss} == {"gold_not_in_kb"}
    assert "cand: 200 gold id(s) in 200 case(s) are not cards of the knowledge base" in result.report.markdown.read_text()


def test_check_kb_passes_on_the_committed_sample(tmp_path):
    from builders import REPO

    result = cli("check-kb", cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("spoil, message", [
    (lambda b: b | {"aggregates": []}, "aggregates: must hold at least one"),
    (lambda b: b | {"cases": {}}, "cases: must hold at least one case"),
    (lambda b: b | {"aggregates": [b["aggregates"][0] | {"mean": None}, *b["aggregates"][1:]]},
     "aggregates[0].mean: must be a number in [0, 1], got null"),
    (lambda b: {key: value for key, value in b.items() if key != "k"}, "k: required"),
    (lambda b: b | {"aggregates": [b["aggregates"][0] | {"metric": "map"}]}, "aggregates[0].metric: must be one of"),
    (lambda b: b | {"extra": 1}, "extra: unknown field"),
    (lambda b: b | {"k": 7}, "has no metrics at k=7"),
    # the aggregates the gate reads must be those of the snapshot's own cases
    (lambda b: b | {"aggregates": [a | {"mean": 0.6} if (a["slice"], a["slice_value"], a["metric"]) == (
        "locale", "en", "hit_at_k") else a for a in b["aggregates"]]},
     "(locale en hit_at_k).mean: 0.6 where its cases give 0.8"),
    (lambda b: b | {"aggregates": [a for a in b["aggregates"] if a["slice"] != "locale"]},
     "aggregates: no entry for locale en hit_at_k, which its cases make"),
    (lambda b: b | {"aggregates": [*b["aggregates"], b["aggregates"][-1]]}, "written twice"),
    (lambda b: b | {"relevance_level": 2}, "the baseline counts grades >= 2 as relevant"),
    (lambda b: json.dumps(b)[:-1] + ', "k": 4}', "key 'k' is written twice in one object"),
])
def test_a_malformed_or_empty_baseline_is_refused_naming_the_field(gate, tmp_path, spoil, message):
    gate(cases())
    spoiled = tmp_path / "spoiled.json"
    spoiled_value = spoil(json.loads(gate.baseline.read_text()))
    spoiled.write_text(spoiled_value if isinstance(spoiled_value, str) else json.dumps(spoiled_value))
    result = cli("gate", "cand", "--warehouse", str(gate.warehouse.root), "--baseline", str(spoiled), cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr
    assert "PASS" not in result.stdout


def test_a_baseline_whose_run_is_not_in_the_warehouse_says_it_could_not_be_checked(gate, tmp_path):
    other = Warehouse(tmp_path / "other")
    write_run(tmp_path / "runs2", "cand", cases(), created_at="2026-11-02T00:00:00Z")
    evaluate(job_options(tmp_path / "runs2", other.root))
    result = gate_run(other.state(), "cand", GateOptions(gate.baseline, other.root, 0.05, 0.08, {}), read_baseline(gate.baseline))
    assert result.passed and result.warnings[0] == (
        "the baseline's run base is not in this warehouse: the snapshot could not be checked against its run recomputed")


def test_a_run_without_a_labelled_case_makes_no_baseline(tmp_path):
    write_run(tmp_path / "runs", "unlabelled", [case("u", [chunk("A::00", "A")])])
    evaluate(job_options(tmp_path / "runs", tmp_path / "wh"))
    result = cli("baseline", "refresh", "unlabelled", "--warehouse", str(tmp_path / "wh"),
                 "--out", str(tmp_path / "b.json"), cwd=tmp_path)
    assert result.returncode == 2 and "has no labelled case" in result.stderr
    assert not (tmp_path / "b.json").exists()


def test_rejected_records_cannot_hide_a_regression(sample_copy, tmp_path):
    # The pt-BR regression fails the gate; give its missed pt-BR cases a NaN score, load the run
    # with --allow-rejects, and the cases it lost are missing, not passing.
    from builders import SAMPLE_BASELINE

    root = sample_copy.parent
    cases_file = sample_copy / "runs" / "2026-11-23-hybrid-rerank-ptbr-regression" / "cases.jsonl"
    lines = cases_file.read_text().splitlines()
    baseline = json.loads(SAMPLE_BASELINE.read_text())
    spoiled = 0
    for i, line in enumerate(lines):
        record = json.loads(line)
        before = baseline["cases"].get(record["case_id"])
        if record["locale"] == "pt-BR" and before and before["hit_at_k"] == 1.0:
            lines[i] = line.replace('"score": ', '"score": NaN, "was": ', 1)
            spoiled += 1
    assert spoiled >= 22
    cases_file.write_text("\n".join(lines) + "\n")
    ran = cli("run", "--allow-rejects", "--baseline", str(SAMPLE_BASELINE), cwd=root)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    gated = cli("gate", "2026-11-23-hybrid-rerank-ptbr-regression", "--baseline", str(SAMPLE_BASELINE), cwd=root)
    assert gated.returncode == 1
    assert f"{spoiled} case(s) of the baseline are missing" in gated.stdout
    assert f"{spoiled} record(s) of the run were rejected" in gated.stdout
    allowed = cli("gate", "2026-11-23-hybrid-rerank-ptbr-regression", "--baseline", str(SAMPLE_BASELINE),
                  "--allow-missing-cases", cwd=root)
    failures = allowed.stdout.split("FAIL\n")[-1]
    assert allowed.returncode == 1 and "missing from" not in failures  # still failing, on pt-BR itself
    assert "on locale=pt-BR" in failures


def test_run_with_a_baseline_gates_the_newest_run_and_exits_1_when_it_fails(sample_copy):
    from builders import SAMPLE_BASELINE

    root = sample_copy.parent
    failed = cli("run", "--baseline", str(SAMPLE_BASELINE), cwd=root)
    assert failed.returncode == 1, failed.stderr
    assert "gate: run 2026-11-23-hybrid-rerank-ptbr-regression against baseline" in failed.stdout
    assert "FAIL" in failed.stdout
    passed = cli("run", "data/runs/2026-11-16-hybrid-rerank", "--baseline", str(SAMPLE_BASELINE), cwd=root)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "PASS" in passed.stdout


def test_run_with_a_malformed_baseline_stops_before_any_work(sample_copy, tmp_path):
    from builders import SAMPLE_BASELINE

    spoiled = tmp_path / "baseline.json"
    spoiled.write_text(json.dumps(json.loads(SAMPLE_BASELINE.read_text()) | {"cases": {}}))
    warehouse = tmp_path / "wh"
    ran = cli("run", "--baseline", str(spoiled), "--warehouse", str(warehouse), cwd=sample_copy.parent)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert f"{spoiled}: cases: must hold at least one case" in ran.stderr
    assert not warehouse.exists()  # nothing ingested, nothing committed


@pytest.mark.parametrize("args, message", [
    (["--k", "3"], "the baseline is at k=4, run '2026-11-23-hybrid-rerank-ptbr-regression' is evaluated at k in [3]"),
    (["--relevance-level", "2"], "the baseline counts grades >= 1 as relevant"),
], ids=["another-k", "another-relevance-level"])
def test_run_with_a_baseline_it_cannot_gate_against_stops_before_any_work(sample_copy, tmp_path, args, message):
    from builders import SAMPLE_BASELINE

    warehouse, report = tmp_path / "wh", tmp_path / "rep"
    ran = cli("run", *args, "--baseline", str(SAMPLE_BASELINE), "--warehouse", str(warehouse),
              "--report-dir", str(report), cwd=sample_copy.parent)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert f"{SAMPLE_BASELINE}: {message}" in ran.stderr and "Traceback" not in ran.stderr
    assert not report.exists()
    assert not Warehouse(warehouse).exists() or not Warehouse(warehouse).state().runs  # nothing committed


def test_significant_decision_passes_a_drop_that_noise_explains(gate):
    # en: 15 hits lost and 6 gained of 100 → 0.80 → 0.71, a drop of 0.09 > 0.08 (point fails).
    # Paired, 21 cases moved by ±1: the sign-flip p of |sum| ≥ 9 is P(B ≥ 15 or B ≤ 6) for
    # B ~ Binomial(21, ½) = 2 × 0.03918 = 0.0784 > 0.05 before any correction: not significant.
    candidate = cases(misses_added={"en": 15}, hits_added={"en": 6})
    point = gate(candidate)
    assert failing(point) >= {("locale", "en", "hit_at_k")}
    significant = gate(candidate, decision="significant")
    assert significant.passed, significant.failures
    line = next(l for l in significant.lines if (l.slice_value, l.metric) == ("en", "hit_at_k"))
    assert line.p_value == pytest.approx(0.0784, abs=0.003)  # exact enumeration: 2^21 > 100,000 → Monte-Carlo
    # A clear drop is significant too: 20 of en's 80 hits lost, none gained (p = 2 / 2^20).
    assert ("locale", "en", "hit_at_k") in failing(gate(cases(misses_added={"en": 20}), decision="significant"))


def test_non_inferior_decision_needs_the_interval_above_minus_the_tolerance(gate):
    assert gate(cases(), decision="non-inferior").passed  # no change: the interval is [0, 0]
    # en: 6 hits lost of 100 → drop 0.06 < 0.08 (point passes); the paired 95% interval of
    # the delta reaches about −0.06 − 1.96·√(0.06·0.94/100) ≈ −0.107 < −0.08: not shown
    # non-inferior.
    candidate = cases(misses_added={"en": 6})
    assert gate(candidate).passed
    result = gate(candidate, decision="non-inferior")
    assert ("locale", "en", "hit_at_k") in failing(result)
    line = next(l for l in result.lines if (l.slice_value, l.metric) == ("en", "hit_at_k"))
    assert line.ci_low < -0.08 < line.delta


def test_every_gated_line_carries_its_minimum_detectable_drop(gate):
    # hit at p = 0.8, n = 100 per locale: 80 hits. The exact sign-flip test at 0.05 needs 6
    # losses (2·0.5^6 < 0.05 ≤ 2·0.5^5); P(Binomial(80, q) ≥ 6) = 0.8 at q = 0.0970297
    # (scipy.stats.binom.sf + brentq), so MDE = 0.0970297 × 80/100 = 0.077624; on all
    # (160 hits of 200): q = 0.0489637, MDE = 0.039171. Both are below the tolerances.
    result = gate(cases())
    mde = {(l.slice_value, l.metric): l.mde for l in result.lines if l.tolerance is not None}
    assert mde[("en", "hit_at_k")] == pytest.approx(0.077624, abs=1e-5)
    assert mde[("all", "hit_at_k")] == pytest.approx(0.039171, abs=1e-5)
    assert not any("cannot be told from noise" in w for w in result.warnings)
    strict = gate(cases(), tolerance=0.03, locale_tolerance=0.05)
    assert "en n = 100: a drop smaller than 0.08 cannot be told from noise" in " ".join(strict.warnings)


def test_gate_json_has_the_shape_the_spec_names(gate, tmp_path):
    gate(cases(misses_added={"en": 9}, drop={"es-419-000"}))
    result = cli("gate", "cand", "--warehouse", str(gate.warehouse.root), "--baseline", str(gate.baseline),
                 "--format", "json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert {"run_id", "baseline_run_id", "k", "decision", "passed", "lines", "flips", "missing_cases",
            "added_cases"} <= set(document)
    assert (document["run_id"], document["baseline_run_id"], document["k"], document["decision"],
            document["passed"]) == ("cand", "base", 4, "point", False)
    for line in document["lines"]:
        assert {"slice", "slice_value", "metric", "baseline", "current", "delta", "ci_low", "ci_high", "n",
                "mde", "failed"} <= set(line)
    assert {f["case_id"] for f in document["flips"]} == {f"en-{i:03d}" for i in range(71, 80)}
    assert all(set(f) == {"case_id", "from", "to", "reason", "rank_before", "rank_after"} for f in document["flips"])
    assert {f["reason"] for f in document["flips"]} == {"not_retrieved"}
    assert document["missing_cases"] == ["es-419-000"] and document["added_cases"] == []
    markdown = cli("gate", "cand", "--warehouse", str(gate.warehouse.root), "--baseline", str(gate.baseline),
                   "--format", "markdown", cwd=tmp_path).stdout
    assert markdown.startswith("### retrieval-eval gate: ❌ FAIL") and "| slice | metric |" in markdown


def test_the_gate_reads_a_baseline_of_many_cases_and_pairs_like_with_like():
    # 60,000 cases, a third per locale, every other one a hit at rank 1 of its 3 gold cards:
    # recall 1/3 and nDCG 1 / (1 + 1/log2(3) + 1/log2(4)), figures the snapshot keeps to 10
    # places. The candidate misses every pt-BR case: hit drops 0.5 → 0
    # there, 0.5 → 1/3 on `all`. Eager Polars 2.1 could not filter a frame of 16,384 rows or
    # more by slice `all`'s literal predicate (a ShapeError, from the gate of a 100k run); and
    # unrounded, each unchanged case differed from its snapshot by ~1e-11, all alike, which the
    # paired test called p < 0.001 on slices that did not move.
    n = 60_000
    locales = ["en", "es-419", "pt-BR"]
    ndcg = 1 / (1 + 1 / math.log2(3) + 1 / math.log2(4))

    def case_metrics(pt_br_hits: bool) -> pl.DataFrame:
        hit = [float(i % 2 == 0 and (pt_br_hits or locales[i % 3] != "pt-BR")) for i in range(n)]
        return pl.DataFrame({
            "run_id": "base" if pt_br_hits else "cand", "k": 5, "case_id": [f"c{i:05d}" for i in range(n)],
            "locale": [locales[i % 3] for i in range(n)], "category": "golden", "n_gold": 3,
            "hit_at_k": hit, "recall_at_k": [h / 3 for h in hit], "ndcg_at_k": [h * ndcg for h in hit],
            "precision_at_k": [h / 5 for h in hit], "reciprocal_rank_at_k": hit,
            "first_relevant_rank": [1 if h else None for h in hit], "n_retrieved": 5,
        })

    def run_row(run_id: str) -> dict:
        return {"run_id": run_id, "headline_k": 5, "created_at": "2026-11-01T00:00:00Z", "git_sha": None,
                "dataset_version": None, "artifact_digest": "blake3:" + "0" * 64, "n_cases": n, "n_labelled": n,
                "n_rejected": 0, "vacuous": False, "relevance_level": 1}

    base, cand = case_metrics(True), case_metrics(False)
    gold = base.select("case_id", pl.lit(["G1", "G2", "G3"]).alias("gold"))
    snapshot = build_snapshot(run_row("base"), aggregates(slice_partials(base)), base, gold, "test")
    result = compare(snapshot, run_row("cand"), aggregates(slice_partials(cand)), cand.join(gold, on="case_id"),
                     snapshot_case_metrics(snapshot), tolerance=0.05, locale_tolerance=0.08, floors={})
    assert not result.passed
    assert failing(result) == {("all", "all", m) for m in GATED} | {("locale", "pt-BR", m) for m in GATED}
    everything = next(line for line in result.lines if line.slice == "all" and line.metric == "hit_at_k")
    assert (everything.n_baseline, everything.baseline, round(everything.current, 6)) == (n, 0.5, round(1 / 3, 6))
    unchanged = [line for line in result.lines if line.slice_value in ("en", "es-419")]
    assert len(unchanged) == 2 * len(GATED)
    assert [(line.ci_low, line.ci_high, line.p_value) for line in unchanged] == [(0.0, 0.0, 1.0)] * len(unchanged)
    assert all(abs(line.delta) < 1e-10 for line in unchanged)  # the aggregates' own rounding
