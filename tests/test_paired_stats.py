"""Tests of paired_stats: exact values by hand, agreement with scipy/statsmodels, and the gate's error rates."""

import math

import numpy as np
import polars as pl
import pytest
import retrieval_eval.transforms.paired_stats as ps
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from retrieval_eval.transforms.paired_stats import (
    FLIPS,
    benjamini_hochberg,
    bootstrap_p_value,
    compare,
    compare_frame,
    compare_many,
    exact_sign_flip_p_value,
    holm,
    normal_quantile,
    paired_interval,
    paired_t_p_value,
    randomization_p_value,
    wins_ties_losses,
)
from statsmodels.stats.multitest import multipletests


def mc_bound(p: float, *flip_counts: int) -> float:
    """Four binomial standard errors of a difference of Monte-Carlo p-values, plus their +1 offsets."""
    variance = sum(p * (1 - p) / b for b in flip_counts)
    return 4 * math.sqrt(variance) + sum(2 / b for b in flip_counts)


def scipy_sign_flip(d: np.ndarray, n_resamples=np.inf, seed=0) -> float:
    """scipy's paired permutation test of the mean difference (candidate − reference = d)."""
    reference = np.zeros_like(d)
    return scipy.stats.permutation_test(
        (d, reference), lambda x, y, axis: np.mean(x - y, axis=axis), vectorized=True,
        permutation_type="samples", alternative="two-sided", n_resamples=n_resamples,
        rng=np.random.default_rng(seed)).pvalue


# --- the randomization test on hand-made pairs ---------------------------------------------

def test_randomization_three_unequal_differences():
    # T_obs = 0.5 − 0.25 + 1.0 = 1.25. The 8 sums ±0.5 ±0.25 ±1.0 are ±1.75, ±1.25, ±0.75,
    # ±0.25; |T| ≥ 1.25 for ±1.75 and ±1.25: p = 4/8.
    assert randomization_p_value([0.5, -0.25, 1.0]) == 0.5


def test_randomization_five_equal_wins():
    # T_obs = 5 is reached only by all signs + or all −: p = 2/32 = 0.0625.
    assert randomization_p_value([1, 1, 1, 1, 1]) == 0.0625


def test_randomization_zeros_do_not_count():
    # Zeros move nothing: the test is on [0.5, 0.5, 0.5], T_obs = 1.5, reached by +++ and
    # −−− of 8 assignments: p = 2/8 = 0.25 (not 2/64 over six "differences").
    assert randomization_p_value([0, 0.5, 0, 0.5, 0.5, 0]) == 0.25


def test_randomization_tied_magnitudes():
    # d = [0.5, 0.5, −0.5, 1.0], T_obs = 1.5. T = 1.0·s4 + 0.5·(s1+s2+s3), where
    # s1+s2+s3 is 3, 1, −1, −3 in 1, 3, 3, 1 of the 8 ways. s4 = +1 gives 2.5 (1), 1.5 (3),
    # 0.5 (3), −0.5 (1); s4 = −1 the mirror. |T| ≥ 1.5: 1 + 3 + 3 + 1 = 8 of 16: p = 0.5.
    assert randomization_p_value([0.5, 0.5, -0.5, 1.0]) == 0.5


def test_randomization_floating_point_tie_counts_as_tie():
    # 0.1 + 0.2 − 0.3 is 5.6e-17, not 0, in floating point: the observed sum is a float
    # zero. Every assignment is at least as extreme as 0, so p = 1; without the tie
    # tolerance the assignments that recompute the same sum in another order could miss it.
    assert randomization_p_value([0.1, 0.2, -0.3]) == 1.0


def test_randomization_is_symmetric_and_order_free():
    rng = np.random.default_rng(7)
    d = rng.choice([-1.0, -0.5, 0.0, 0.25, 1.0], size=300)
    p = randomization_p_value(d)
    assert randomization_p_value(-d) == p
    assert randomization_p_value(rng.permutation(d)) == p
    assert randomization_p_value(d) == p  # deterministic run to run


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([-1.0, -0.5, -0.1, 0.0, 0.2, 0.5, 1.0]), max_size=14))
def test_randomization_properties_small(d):
    p = randomization_p_value(d)
    assert 0 < p <= 1
    assert p == randomization_p_value([-x for x in d]) == randomization_p_value(d[::-1])


# --- against scipy ----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_randomization_equals_scipy_exact(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 13))
    # Half the cases on a lattice (ties of |d| and zeros), half continuous.
    if seed % 2:
        reference, candidate = rng.choice([0, .25, .5, .75, 1], (2, n))
    else:
        reference, candidate = rng.random((2, n))
    d = candidate - reference
    assert randomization_p_value(d) == pytest.approx(scipy_sign_flip(d), abs=1e-12)


def test_randomization_within_monte_carlo_error_of_scipy_off_lattice():
    # 60 continuous differences: 2^60 assignments, so both sides sample (ours the 100,000
    # flips of the SPEC, scipy 20,000); they agree within 4 standard errors of the difference.
    rng = np.random.default_rng(11)
    d = rng.random(60) - rng.random(60) + 0.12
    ours = randomization_p_value(d)
    theirs = scipy_sign_flip(d, n_resamples=20_000)
    assert exact_sign_flip_p_value(d) is None  # really the simulated path
    assert abs(ours - theirs) <= mc_bound(theirs, FLIPS, 20_000)


def test_randomization_within_monte_carlo_error_on_lattice():
    # 200 hit differences: the exact tail is computed, and the reported p is a draw of the
    # Monte-Carlo p around it; scipy's 20,000 resamples land within 4 errors of both.
    rng = np.random.default_rng(12)
    reference = (rng.random(200) < 0.8).astype(float)
    candidate = (rng.random(200) < 0.72).astype(float)
    d = candidate - reference
    exact = exact_sign_flip_p_value(d)
    assert abs(randomization_p_value(d) - exact) <= mc_bound(exact, FLIPS)
    assert abs(scipy_sign_flip(d, n_resamples=20_000) - exact) <= mc_bound(exact, 20_000)


def test_lattice_inversion_equals_enumeration():
    # Below 2^16 assignments both the enumeration and the lattice inversion apply.
    rng = np.random.default_rng(13)
    for _ in range(50):
        d = rng.choice([-1, -.5, -.25, 0, .25, .5, .75, 1, 1 / 3, -2 / 3], size=int(rng.integers(1, 16)))
        g = ps._groups(d)
        if g.size:
            assert ps._exact_tail(g) == pytest.approx(ps._enumerated_p(g), abs=1e-13)


def test_lattice_inversion_equals_direct_convolution():
    # P(|Σ q_g X_g| ≥ t) with X_g a sum of m_g signs, against the convolution of the
    # scaled Binomial(m_g, ½) laws; sizes far beyond enumeration.
    rng = np.random.default_rng(14)
    for _ in range(40):
        q = rng.choice(np.arange(1, 40), size=int(rng.integers(1, 6)), replace=False)
        m = rng.integers(1, 300, size=q.size)
        pmf, offset = np.array([1.0]), 0
        for qq, mm in zip(q, m):
            step = np.zeros(2 * mm * qq + 1)
            step[::2 * qq] = scipy.stats.binom.pmf(np.arange(mm + 1), mm, 0.5)
            pmf, offset = np.convolve(pmf, step), offset + mm * qq
        t = int(rng.integers(1, max(2, int(np.sum(q * m)) // 8)))
        expected = pmf[np.abs(np.arange(pmf.size) - offset) >= t].sum()
        assert ps._lattice_tail(q, m, t) == pytest.approx(expected, abs=1e-12)


def test_lattice_detection():
    assert ps._lattice(np.array([0.1, 0.3, 0.7, 1.0])) == 10
    assert ps._lattice(np.abs(np.array([1 / 3 - 1 / 7, 1 / 9 - 1 / 10, 0.5]))) == 630
    assert ps._lattice(np.array([1 / math.log2(3), 0.5])) is None


def test_simulated_flips_match_the_exact_law():
    # Lattice data whose groups need every simulation route (binomial ≥ 512, popcount
    # 16–511, tables below 16): simulated counts against the exact tail, 4 errors.
    rng = np.random.default_rng(15)
    magnitudes = np.concatenate([np.full(2000, 0.1), np.full(300, 0.3), np.full(40, 0.7),
                                 np.full(5, 0.9), np.arange(1, 200) / 200])
    d = magnitudes * rng.choice([-1, 1], size=magnitudes.size, p=[0.47, 0.53])
    g = ps._groups(d)
    exact = ps._exact_tail(g)
    simulated = ps._p_from_sums(ps._flip_sums(g, FLIPS, np.random.default_rng(1)), g)
    assert abs(simulated - exact) <= mc_bound(exact, FLIPS)


# --- bootstrap and t ------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_paired_t_equals_scipy(seed):
    rng = np.random.default_rng(seed)
    n = [2, 5, 30, 400, 20_000][seed]
    reference = rng.random(n)
    candidate = reference + rng.normal(0.02, 0.3, n)
    expected = scipy.stats.ttest_rel(candidate, reference).pvalue
    assert paired_t_p_value(candidate - reference) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_paired_t_edge_cases():
    assert paired_t_p_value([]) == 1.0
    assert paired_t_p_value([0.5]) == 1.0  # n = 1: no variance to test against
    assert paired_t_p_value([0.0, 0.0, 0.0]) == 1.0  # zero variance, zero mean
    assert paired_t_p_value([0.2, 0.2, 0.2]) == 0.0  # zero variance, mean known to be 0.2


def test_bootstrap_interval_and_p():
    rng = np.random.default_rng(21)
    d = rng.choice([-1.0, 0.0, 1.0], size=400, p=[0.1, 0.7, 0.2])
    low, high = paired_interval(d)
    assert low < d.mean() < high
    # The normal interval is as good for n = 400 within a few percent of its width.
    half = 1.959963984540054 * d.std(ddof=1) / math.sqrt(d.size)
    assert low == pytest.approx(d.mean() - half, abs=0.1 * half)
    assert high == pytest.approx(d.mean() + half, abs=0.1 * half)
    assert paired_interval(d) == (low, high)  # deterministic
    p = bootstrap_p_value(d)
    assert p == pytest.approx(paired_t_p_value(d), abs=0.01)


def test_bootstrap_resampling_law_matches_direct_resampling():
    # The multinomial-by-value resampler against resampling cases directly: the means'
    # mean and sd agree within sampling error (frequent values and pooled rare ones).
    rng = np.random.default_rng(22)
    d = np.concatenate([rng.choice([-0.5, 0, 0.5], 300), rng.random(60) - 0.3])
    ours = ps._bootstrap_means(d, 4000, 1)
    direct = d[rng.integers(0, d.size, (4000, d.size))].mean(axis=1)
    se = direct.std() / math.sqrt(4000)
    assert abs(ours.mean() - direct.mean()) < 5 * se * math.sqrt(2)
    assert ours.std() == pytest.approx(direct.std(), rel=0.06)
    assert paired_interval(rng.permutation(d)) == paired_interval(d)  # order free


def test_interval_normal_above_threshold():
    d = np.tile([0.0, 1.0, -1.0, 0.0], 30)
    low, high = paired_interval(d, normal_above=100)
    half = 1.959963984540054 * d.std(ddof=1) / math.sqrt(d.size)
    assert (low, high) == pytest.approx((-half, half))


# --- multiple testing ------------------------------------------------------------------------

def test_holm_by_hand():
    # Sorted: 0.005, 0.01, 0.03, 0.04 (m = 4) → ×4, ×3, ×2, ×1 = 0.02, 0.03, 0.06, 0.04,
    # then the running maximum: 0.02, 0.03, 0.06, 0.06. Back in input order:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # 2·0.5 = 1.0, then max(1.0, 0.6) = 1.0: clipped at 1 and monotone.
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    # NaN is not a hypothesis: m = 2.
    np.testing.assert_allclose(holm([0.01, math.nan, 0.04]), [0.02, math.nan, 0.04])


def test_benjamini_hochberg_by_hand():
    # Sorted: 0.005, 0.01, 0.03, 0.04 → ×4/1, ×4/2, ×4/3, ×4/4 = 0.02, 0.02, 0.04, 0.04;
    # running minimum from the top leaves them. Back in input order:
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    # 0.5·2/1 = 1.0 and 0.6·2/2 = 0.6; the minimum from the top makes both 0.6.
    assert benjamini_hochberg([0.5, 0.6]) == pytest.approx([0.6, 0.6])
    assert holm([]).size == 0 and benjamini_hochberg([]).size == 0


@pytest.mark.parametrize("seed", range(8))
def test_adjustments_equal_statsmodels(seed):
    rng = np.random.default_rng(seed)
    p = rng.random(int(rng.integers(1, 40))) ** 3
    p[rng.random(p.size) < 0.2] = p[0]  # ties
    assert holm(p) == pytest.approx(multipletests(p, method="holm")[1], abs=1e-15)
    assert benjamini_hochberg(p) == pytest.approx(multipletests(p, method="fdr_bh")[1], abs=1e-15)
    assert np.all(benjamini_hochberg(p) <= holm(p) + 1e-15)


# --- power ---------------------------------------------------------------------------------

def test_normal_quantile_equals_scipy():
    for p in [1e-300, 1e-50, 1e-10, 1e-5, 0.001, 0.02425, 0.025, 0.2, 0.5, 0.8, 0.975, 0.999, 1 - 1e-10]:
        assert normal_quantile(p) == pytest.approx(scipy.stats.norm.ppf(p), rel=1e-12, abs=1e-15)
    assert normal_quantile(0.0) == -math.inf and normal_quantile(1.0) == math.inf
    with pytest.raises(ValueError):
        normal_quantile(1.5)


# --- the gate on simulated runs ----------------------------------------------------------------

def gate_false_alarm_rates(drop_to: float, repetitions: int, seed: int):
    """Share of gates that fail, over 4 slices of 80 cases, hit ~ Bernoulli(0.8).

    Significant gate: a slice fails when its drop exceeds 0.08 and its Holm-adjusted
    randomization p (over the 4 slices) is below 0.05. Point gate: a drop above 0.08.
    The first slice's candidate hit rate is `drop_to`; the other three are null.
    """
    rng = np.random.default_rng(seed)
    significant = point = point_line = 0
    for _ in range(repetitions):
        reference = rng.random((4, 80)) < 0.8
        candidate = rng.random((4, 80)) < np.array([drop_to, 0.8, 0.8, 0.8])[:, None]
        d = candidate.astype(float) - reference
        drops = -d.mean(axis=1)
        adjusted = holm([randomization_p_value(row) for row in d])
        significant += bool(np.any((drops > 0.08) & (adjusted < 0.05)))
        point += bool(np.any(drops > 0.08))
        point_line += int(drops[1] > 0.08)
    return significant / repetitions, point / repetitions, point_line / repetitions


def test_gate_false_alarms_and_power():
    repetitions = 1000  # standard error 0.7 points at 5%: 5% and 15% are 14 errors apart
    significant, point, point_line = gate_false_alarm_rates(0.8, repetitions, seed=31)
    print(f"\nno true drop, n=80 per slice, 4 slices: significant gate fails {significant:.1%}, "
          f"point rule (drop > 0.08) fails {point:.1%} of gates and {point_line:.1%} of single slices")
    assert significant <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / repetitions)
    assert point > 0.15  # the point rule's false-alarm rate is large at n = 80
    power, _, _ = gate_false_alarm_rates(0.5, 300, seed=32)
    print(f"true drop 0.8 → 0.5 in one slice: significant gate fails {power:.1%}")
    assert power >= 0.90  # Holm tests the smallest of 4 p-values at 0.0125


# --- wins, edge cases ----------------------------------------------------------

def test_wins_ties_losses():
    assert wins_ties_losses([0.5, 0.0, -0.25, 1.0, 0.0, math.nan]) == (2, 2, 1)


def test_edge_case_empty_input():
    c = compare([], [])
    assert (c.n, c.p_value, c.wins, c.ties, c.losses) == (0, 1.0, 0, 0, 0)
    assert math.isnan(c.delta) and math.isnan(c.ci_low) and math.isnan(c.ci_high)
    assert randomization_p_value([]) == 1.0 and bootstrap_p_value([]) == 1.0


def test_edge_case_all_zeros():
    c = compare([0.5, 1.0, 0.0], [0.5, 1.0, 0.0])
    assert (c.n, c.delta, c.p_value, c.ci_low, c.ci_high, c.ties) == (3, 0.0, 1.0, 0.0, 0.0, 3)
    for test in ps.TESTS:
        assert compare([1, 0, 1], [1, 0, 1], test=test).p_value == 1.0


def test_edge_case_one_case():
    c = compare([0.0], [1.0])
    # One nonzero difference: both sign assignments reach |T_obs| = 1, p = 2/2.
    assert (c.n, c.delta, c.p_value, c.ci_low, c.ci_high, c.wins) == (1, 1.0, 1.0, 1.0, 1.0, 1)
    assert compare([0.0], [1.0], test="t").p_value == 1.0


def test_unscored_cases_are_left_out():
    c = compare([1.0, 0.0, math.nan, 1.0], [1.0, 1.0, 0.0, math.nan])
    assert (c.n, c.reference_mean, c.mean, c.wins, c.ties) == (2, 0.5, 1.0, 1, 1)


# --- many comparisons at once ------------------------------------------------------------------

def test_compare_many_equals_compare_line_by_line():
    rng = np.random.default_rng(41)
    n = 3000
    reference = rng.choice([0.0, 0.1, 0.2, 0.5, 1.0], n)
    candidates = np.where(rng.random((3, n)) < 0.7, reference, rng.choice([0.0, 0.1, 0.2, 0.5, 1.0], (3, n)))
    candidates[1, :5] = np.nan
    masks = np.array([np.ones(n, bool), np.arange(n) % 3 == 0, np.arange(n) < 17])
    result = compare_many(reference, candidates, masks)
    for i in range(3):
        for k in range(3):
            keep = masks[k]
            alone = compare(reference[keep], candidates[i, keep])
            assert result.at(i, k) == alone


def test_compare_many_off_lattice_shares_atoms_and_stays_exact():
    # nDCG-like values: off-lattice, so flips are simulated per atom of the masks; each
    # mask's p is still within Monte-Carlo error of its own single-mask p.
    rng = np.random.default_rng(42)
    n = 4000
    gains = np.r_[0, 1 / np.log2(np.arange(2, 12))]
    reference = rng.choice(gains, n)
    candidate = np.where(rng.random(n) < 0.6, reference, rng.choice(gains, n) * 0.97 + 0.02)
    group = rng.integers(0, 4, n)
    masks = np.array([np.ones(n, bool), group < 2, group == 3])
    many = compare_many(reference, candidate[None, :], masks)
    for k in range(3):
        alone = randomization_p_value(candidate[masks[k]] - reference[masks[k]])
        assert abs(many.p_value[0, k] - alone) <= mc_bound(alone, FLIPS, FLIPS)
    assert many.p_value.tolist() == compare_many(reference, candidate[None, :], masks).p_value.tolist()


def test_compare_frame():
    rng = np.random.default_rng(43)
    n = 500
    values = {"ref": rng.random(n), "a": rng.random(n), "b": rng.random(n)}
    values["a"][:3] = np.nan
    locale = rng.choice(["en", "de"], n)
    rows = []
    for run, v in values.items():
        for metric, scale in [("hit_at_k", 1.0), ("ndcg_at_k", 0.5)]:
            for i in range(n):
                for slice_, slice_value in [("all", "all"), ("locale", locale[i])]:
                    rows.append((run, f"c{i:04d}", slice_, slice_value, metric, v[i] * scale))
    cases = pl.DataFrame(rows, schema=["run_id", "case_id", "slice", "slice_value", "metric", "value"], orient="row")
    out = compare_frame(cases, "ref", flips=2000)
    assert out.height == 2 * 3 * 2  # runs × slice values × metrics
    line = out.filter((pl.col("run_id") == "a") & (pl.col("slice_value") == "de") & (pl.col("metric") == "ndcg_at_k"))
    keep = locale == "de"
    expected = compare(values["ref"][keep] * 0.5, values["a"][keep] * 0.5, flips=2000)
    got = line.row(0, named=True)
    for name in ("n", "reference_mean", "mean", "delta", "ci_low", "ci_high", "wins", "ties", "losses"):
        assert got[name] == pytest.approx(getattr(expected, name), rel=1e-12)
    assert got["p_value"] == pytest.approx(expected.p_value, abs=mc_bound(expected.p_value, 2000, 2000))
    bad = cases.with_columns(value=pl.when((pl.col("slice") == "locale") & (pl.col("case_id") == "c0001"))
                             .then(pl.col("value") + 1).otherwise(pl.col("value")))
    with pytest.raises(ValueError):
        compare_frame(bad, "ref")
