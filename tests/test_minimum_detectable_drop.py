"""The minimum detectable drop is the gate's own test's (SPEC 8, SPEC 16): the smallest drop that
the paired two-sided sign-flip test at alpha detects with 80% power at the line's n, from the
exact sign-flip distribution, so never 0 — checked against McNemar's exact test (scipy's
binomtest), scipy's binomial law, and a seeded simulation of the project's own test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
from scipy.optimize import brentq

from retrieval_eval.transforms import paired_stats as ps


def test_a_perfect_baseline_of_20_cases_has_a_minimum_detectable_drop_of_at_least_0_3():
    # By hand: m losses all of one sign give p = 2·0.5^m; 2·0.5^5 = 0.0625 ≥ 0.05 > 2·0.5^6 =
    # 0.03125, so 6 of the 20 cases must be lost: 6/20 = 0.3 is the least any test result can
    # show. 80% power needs more: P(Binomial(20, 0.3) ≥ 6) = 0.584 < 0.8.
    assert ps.discordant_cases_needed(0.05) == 6
    mde = ps.minimum_detectable_drop(np.ones(20), alpha=0.05)
    assert mde >= 0.3
    assert scipy.stats.binom.sf(5, 20, 0.3) == pytest.approx(0.5836, abs=1e-4)
    # q where P(Binomial(20, q) ≥ 6) = 0.8 (scipy), times the baseline mean 1.0.
    assert mde == pytest.approx(brentq(lambda q: scipy.stats.binom.sf(5, 20, q) - 0.8, 0.01, 0.99), abs=1e-9)
    assert mde == pytest.approx(0.366459, abs=1e-6)


@pytest.mark.parametrize("alpha", [0.1, 0.05, 0.01, 0.001, 1e-4])
def test_the_discordant_cases_needed_are_those_mcnemars_exact_test_needs(alpha):
    # McNemar's exact test on m discordant pairs all one way is a two-sided binomial test of
    # m successes in m trials at 1/2; the sign-flip test on 0/1 pairs is that test.
    needed = ps.discordant_cases_needed(alpha)
    assert scipy.stats.binomtest(needed, needed, 0.5).pvalue < alpha
    assert scipy.stats.binomtest(needed - 1, needed - 1, 0.5).pvalue >= alpha
    assert ps.exact_sign_flip_p_value(-np.ones(needed)) == pytest.approx(
        scipy.stats.binomtest(needed, needed, 0.5).pvalue, rel=1e-12)
    assert ps.randomization_p_value(np.r_[-np.ones(needed), np.zeros(20)]) < alpha
    assert ps.randomization_p_value(np.r_[-np.ones(needed - 1), np.zeros(20)]) >= alpha


def test_no_alpha_below_the_sampled_tests_floor_is_reachable():
    # Past 2^16 sign assignments the test counts 100,000 flips: p ≥ 1/100,001 ≈ 1e-5.
    assert ps.discordant_cases_needed(1e-6) is None
    assert ps.minimum_detectable_drop(np.ones(1000), alpha=1e-6) == math.inf


@pytest.mark.parametrize("hits, n", [(20, 20), (68, 80), (100, 200), (160, 200)])
def test_the_binary_power_model_is_the_binomial_law_of_the_cases_lost(hits, n):
    # The baseline's hits are each lost with probability q: losses ~ Binomial(hits, q).
    mde = ps.minimum_detectable_drop(np.r_[np.ones(hits), np.zeros(n - hits)])
    q = brentq(lambda q: scipy.stats.binom.sf(5, hits, q) - 0.8, 1e-6, 1 - 1e-9)
    assert mde == pytest.approx(q * hits / n, rel=1e-7)


@pytest.mark.parametrize("hits, n", [(20, 20), (68, 80), (100, 200)])
def test_the_gates_own_test_detects_the_minimum_detectable_drop_with_80_percent_power(hits, n):
    """A seeded simulation of the project's randomization test on runs that lose each baseline
    hit with probability MDE/p: it rejects at 0.05 in 80% of them (2,000 runs: 3 standard
    errors are 0.027)."""
    baseline = np.r_[np.ones(hits), np.zeros(n - hits)]
    mde = ps.minimum_detectable_drop(baseline)
    q = mde / baseline.mean()
    rng = np.random.default_rng(20261207 + n)
    runs = 2_000
    rejected = 0
    for _ in range(runs):
        candidate = np.where(rng.random(n) < q, 0.0, baseline)
        rejected += ps.randomization_p_value(candidate - baseline) < 0.05
    assert rejected / runs == pytest.approx(0.8, abs=3 * math.sqrt(0.8 * 0.2 / runs))
    # Churn (a gain for every second loss) at the same expected drop is detected less often.
    churned = 0
    for _ in range(runs):
        lost = rng.random(n) < 1.5 * q
        gained = (rng.random(n) < 0.5 * q * hits / max(n - hits, 1)) if hits < n else np.zeros(n, dtype=bool)
        candidate = np.where(lost & (baseline == 1), 0.0, np.where(gained & (baseline == 0), 1.0, baseline))
        churned += ps.randomization_p_value(candidate - baseline) < 0.05
    if hits < n:
        assert churned / runs < rejected / runs


def test_graded_metrics_never_read_zero_and_are_floored_by_the_discreteness():
    # Recall 1.0 everywhere reads as hit does; half of it, half the drop.
    assert ps.minimum_detectable_drop(np.ones(20)) == pytest.approx(0.366459, abs=1e-6)
    assert ps.minimum_detectable_drop(np.full(20, 0.5)) == pytest.approx(0.366459 / 2, abs=1e-6)
    # Six cases at 0.1 among 20: all six must be lost (0.6/20 = 0.03), more than the model's
    # q·Σv/n with q = 0.8^(1/6) = 0.9635 (0.0289).
    values = np.r_[np.full(6, 0.1), np.zeros(14)]
    assert 0.8 ** (1 / 6) * 0.6 / 20 < 0.03
    assert ps.minimum_detectable_drop(values) == pytest.approx(0.03, abs=1e-12)
    # Fewer cases above 0 than the test needs: no drop is detectable; NaN (unscored) is left out.
    assert ps.minimum_detectable_drop(np.r_[np.ones(5), np.zeros(30)]) == math.inf
    assert ps.minimum_detectable_drop(np.zeros(40)) == math.inf
    assert ps.minimum_detectable_drop(np.r_[np.ones(20), np.full(5, np.nan)]) == pytest.approx(0.366459, abs=1e-6)
    rng = np.random.default_rng(7)
    for _ in range(200):
        v = rng.choice([0.0, 0.25, 0.5, 1 / math.log2(3), 1.0], size=int(rng.integers(6, 300)))
        mde = ps.minimum_detectable_drop(v)
        assert mde == math.inf or 0 < mde <= v.mean() + 1e-12
