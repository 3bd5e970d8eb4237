"""Explanations describe the run they name (SPEC 16): beside every adjusted p the report, the
gate and `compare` print the family its correction ran over; a chart's legend says what its
fill means; and no `*` stands beside a p printed as not below alpha (one formatting function,
transforms/tables.py `fmt_p`, for every renderer)."""

from __future__ import annotations

import json
import re

import pytest
from builders import SAMPLE_RUN_IDS, cli, copy_sample
from hypothesis import given
from hypothesis import strategies as st

from retrieval_eval.transforms.comparison import adjusted_by, p_family
from retrieval_eval.transforms.tables import fmt_p

REGRESSION, RERANK = "2026-11-23-hybrid-rerank-ptbr-regression", "2026-11-16-hybrid-rerank"


@given(st.floats(0, 1), st.sampled_from([0.1, 0.05, 0.01, 0.005, 0.001, 0.0005, 1e-5]))
def test_a_printed_p_reads_on_the_same_side_of_alpha_as_the_p_itself(p, alpha):
    text = fmt_p(p, alpha)
    if text == "<0.001":
        assert p < 0.001 < alpha  # reads as below alpha, and is
    else:
        assert (float(text) < alpha) == (p < alpha), (p, alpha, text)


def test_a_p_just_below_alpha_shows_the_digits_that_put_it_there():
    assert fmt_p(0.0499, 0.05) == "0.0499"  # three decimals would read 0.050 beside a star
    assert fmt_p(0.04996, 0.05) == "0.04996"
    assert fmt_p(0.0504, 0.05) == "0.050"  # not below alpha, and does not read as below
    assert fmt_p(0.2, 0.05) == "0.200" and fmt_p(0.0004) == "<0.001" and fmt_p(None) == "—"
    assert fmt_p(0.0004, 0.0005) == "0.0004" and fmt_p(0.0006, 0.0005) == "0.0006"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = copy_sample(tmp_path_factory.mktemp("families"))
    assert cli("run", cwd=root).returncode == 0
    (root / "data" / "baselines").mkdir()
    assert cli("baseline", "refresh", RERANK, cwd=root).returncode == 0  # data/baselines/baseline.json
    return root


def test_the_gate_names_the_family_of_its_holm_correction(sample):
    result = cli("gate", REGRESSION, "--format", "json", "--decision", "significant", cwd=sample)
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    adjusted = [line for line in document["lines"] if line["p_adjusted"] is not None]
    assert len(adjusted) == 12  # hit, recall, nDCG on all and on each of the 3 locales
    assert document["p_family"] == "Holm over the 12 gated lines"
    assert "(Holm over the 12 gated lines)" in " ".join(document["failures"])
    text = cli("gate", REGRESSION, "--decision", "significant", cwd=sample).stdout
    assert "p (Holm): the paired sign-flip test's p-value, adjusted by Holm over the 12 gated lines" in text
    markdown = cli("gate", REGRESSION, "--format", "markdown", cwd=sample).stdout
    assert "adjusted by Holm over the 12 gated lines" in markdown


def test_the_report_names_the_family_of_what_changed_and_its_chart_says_what_the_fill_means(sample):
    report = (sample / "data" / "reports" / "report.md").read_text()
    # 3 gated metrics × (all + 3 locales + 3 categories) = 21 changes.
    assert "p (Holm) is adjusted by Holm over the 21 slice × metric changes compared; * = p (Holm) < 0.05" in report
    chart = (sample / "data" / "reports" / "changes.svg").read_text()
    assert "p &lt; 0.05, Holm over 21 (*)" in chart and "interval excludes 0" not in chart


def test_compare_names_both_families_and_no_star_contradicts_its_p(sample):
    args = ("compare", *SAMPLE_RUN_IDS, "--reference", RERANK, "--metrics", "hit_at_k")
    document = json.loads(cli(*args, "--format", "json", cwd=sample).stdout)
    # 3 runs against the reference × (all + 3 locales) = 12 comparisons; 4 runs make 6 pairs.
    assert document["p_family"] == "Holm over the 12 comparisons of this table"
    assert document["pairs_family"].startswith("Holm over the 6 pairs of the 4 runs")
    text = cli(*args, cwd=sample).stdout
    assert "p adjusted by Holm over the 12 comparisons of this table, * = p adjusted < 0.05" in text
    starred = [line for line in text.splitlines() if re.search(r"\d \*  ", line)]
    assert starred
    for line in text.splitlines():
        if " hit@" not in line or " … " not in line:  # the rows of the comparisons table
            continue
        p_adjusted = line.split()[-3]  # p adjusted, then wins/ties/losses and n
        below = p_adjusted == "<0.001" or float(p_adjusted) < 0.05
        assert (" * " in line) == below, line
    html = cli(*args, "--format", "html", cwd=sample).stdout
    assert "p &lt; 0.05, Holm over 12 (*)" in html and "interval excludes 0" not in html


def test_a_family_reads_in_words_for_every_correction_and_count():
    holm = p_family("holm", 12, "gated line")
    assert adjusted_by("holm", holm) == "adjusted by Holm over the 12 gated lines"
    one = p_family("bh", 1, "pair", " of the 2 runs")
    assert adjusted_by("bh", one) == "adjusted by Benjamini–Hochberg over the 1 pair of the 2 runs"
    # no correction: never "adjusted by not adjusted"
    none = p_family("none", 4, "comparison", " of this table")
    assert adjusted_by("none", none) == "not adjusted (4 comparisons of this table)"
    assert p_family("holm", 21) == "Holm over 21" and p_family("none", 21) == "not adjusted"
