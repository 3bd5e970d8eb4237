"""Tied groups agree with the pairwise tests (SPEC 11, SPEC 16): a compact letter display
(Piepho 2004, insert-and-absorb). Every pair that is not significant shares a group, no
significant pair shares one, groups may overlap and none lies inside another; `compare
--format json` carries the pairs the groups come from."""

from __future__ import annotations

import json
from itertools import combinations

import polars as pl
import pytest
import scipy.stats
from builders import SAMPLE_RUN_IDS, cli, copy_sample
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_eval.transforms.comparison import pairwise, tied_groups
from retrieval_eval.transforms.letter_display import letters
from retrieval_eval.transforms.letter_display import tied_groups as letter_groups


def assert_display_holds(runs, significant, groups):
    shared = {frozenset(pair) for group in groups for pair in combinations(group, 2)}
    for pair in map(frozenset, combinations(runs, 2)):
        assert (pair in shared) != (pair in significant), (pair, groups)
    assert sorted({run for group in groups for run in group}) == sorted(runs)  # every run in a group
    sets = [set(group) for group in groups]
    assert not any(a < b for a in sets for b in sets), groups  # no group inside another
    assert len({frozenset(s) for s in sets}) == len(sets)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=8).flatmap(lambda n: st.tuples(
    st.lists(st.floats(0, 1), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n * (n - 1) // 2, max_size=n * (n - 1) // 2))))
def test_the_display_holds_both_rules_for_any_significance_matrix(drawn):
    means, flags = drawn
    runs = [f"r{i}" for i in range(len(means))]
    significant = {frozenset(pair) for pair, flag in zip(combinations(runs, 2), flags) if flag}
    groups = letter_groups(dict(zip(runs, means)), significant)
    assert_display_holds(runs, significant, groups)
    marks = letters(groups)
    for a, b in combinations(runs, 2):
        assert bool(set(marks[a]) & set(marks[b])) == (frozenset((a, b)) not in significant)


def test_a_run_can_differ_from_a_better_run_and_not_from_a_worse_one():
    # The example: A differs from B but not from C though mean(B) > mean(C). The old
    # stretches of consecutive means gave {A}, {B, C}, so A and C shared no group.
    groups = letter_groups({"A": 0.5, "B": 0.3, "C": 0.25}, {frozenset("AB")})
    assert groups == [["A", "C"], ["B", "C"]]
    assert letters(groups) == {"A": "a", "C": "ab", "B": "b"}


def test_stretches_still_come_out_where_significance_follows_the_means():
    means = {"A": 0.9, "B": 0.85, "C": 0.8, "D": 0.7, "E": 0.5}
    significant = {frozenset(p) for p in ["AC", "AD", "AE", "BD", "BE", "CE", "DE"]}
    assert letter_groups(means, significant) == [["A", "B"], ["B", "C"], ["C", "D"], ["E"]]
    assert letter_groups(means, set()) == [["A", "B", "C", "D", "E"]]
    every_pair = {frozenset((a, b)) for a in means for b in means if a != b}
    assert letter_groups(means, every_pair) == [[r] for r in "ABCDE"]
    assert letter_groups({}, set()) == []
    assert letter_groups({"y": 0.5, "x": 0.5}, set()) == [["x", "y"]]  # equal means: by run id


def paired_runs() -> pl.DataFrame:
    """Three runs over 40 cases where, by the exact sign-flip (McNemar) test, A differs from B
    and from neither C, and B not from C, though mean(B) = 0.300 > mean(C) = 0.250.

    A hits cases 0–19. B keeps 12 of them (8 losses, none gained: p = 2·0.5^8 = 0.0078, Holm
    over 3 pairs ×3 = 0.023). C loses all 20 and gains cases 20–29 (30 discordant, 10 one way:
    p = 2·P(Bin(30, ½) ≤ 10) = 0.099). B against C: 12 one way, 10 the other (p = 0.83).
    """
    hit = {"A": set(range(20)), "B": set(range(12)), "C": set(range(20, 30))}
    return pl.DataFrame([{"run_id": run, "case_id": f"c{i:02d}", "hit_at_k": float(i in cases)}
                         for run, cases in hit.items() for i in range(40)])


def test_the_groups_of_real_paired_tests_agree_with_the_pairs():
    cases = paired_runs()
    pairs = pairwise(cases, "hit_at_k")
    by_pair = {(r["a"], r["b"]): r for r in pairs.iter_rows(named=True)}
    assert by_pair[("A", "B")]["p_value"] == pytest.approx(2 * 0.5**8)
    assert by_pair[("A", "B")]["p_adjusted"] == pytest.approx(3 * 2 * 0.5**8)
    # 2^30 sign assignments: 100,000 seeded flips, within 4 binomial standard errors of McNemar's.
    assert by_pair[("A", "C")]["p_value"] == pytest.approx(scipy.stats.binomtest(10, 30, 0.5).pvalue, abs=0.004)
    assert [(a, b) for (a, b), r in by_pair.items() if r["significant"]] == [("A", "B")]
    groups = tied_groups(cases, "hit_at_k", pairs)
    assert groups == [["A", "C"], ["B", "C"]]
    assert_display_holds(["A", "B", "C"], {frozenset("AB")}, groups)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = copy_sample(tmp_path_factory.mktemp("letters"))
    assert cli("run", cwd=root).returncode == 0
    return root


def test_compare_json_carries_the_pairs_its_groups_come_from(sample):
    result = cli("compare", *SAMPLE_RUN_IDS, "--format", "json", "--metrics", "hit_at_k", cwd=sample)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    pairs = document["pairs"]
    assert len(pairs) == len(SAMPLE_RUN_IDS) * (len(SAMPLE_RUN_IDS) - 1) // 2
    assert all(set(p) == {"a", "b", "p_value", "p_adjusted", "significant"} for p in pairs)
    assert document["pairs_correction"] == "holm"
    assert document["pairs_family"] == f"Holm over the 6 pairs of the 4 runs on hit_at_k@{document['k']}, slice all"
    significant = {frozenset((p["a"], p["b"])) for p in pairs if p["significant"]}
    assert all(p["significant"] == (p["p_adjusted"] < document["alpha"]) for p in pairs)
    assert_display_holds(SAMPLE_RUN_IDS, significant, document["tied_groups"])
    text = cli("compare", *SAMPLE_RUN_IDS, "--metrics", "hit_at_k", cwd=sample).stdout
    assert "Tied groups on hit@" in text and "Letters: " in text and "run a" in text
