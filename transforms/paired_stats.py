"""Paired statistics for comparing retrieval runs case by case (SPEC: paired comparison).

Two runs are compared on the cases both scored: per case the difference
d_i = candidate_i − reference_i of a metric in [0, 1]. This module is pure statistics on
such differences and knows nothing of the warehouse. The gate calls `compare` once per
gated line (and `holm` over its lines); the compare command calls `compare_frame` (long
per-case frame) or `compare_many` (arrays) for every (run, slice, slice_value, metric).

Per comparison (`PairedComparison`): n, both means, the mean difference, its paired 95%
interval (percentile bootstrap, 2,000 resamples, fixed seed; the normal approximation
above 50,000 cases, as the gate does), a two-sided p-value (default: the paired
randomization test; or "bootstrap", or the paired "t" test), and wins / ties / losses
(counts of d > 0, d == 0, d < 0). Across comparisons: `holm`, `benjamini_hochberg`;
and the gate's `minimum_detectable_drop` (the power of this test under a stated model).

The randomization test, as the SPEC states it. Flipping the sign of d_i moves
T = Σ d_i by ±2|d_i|; zeros move nothing. With m nonzero differences:
- 2^m ≤ 100,000: every sign assignment is enumerated; p = the share with |T| ≥ |T_obs|.
- otherwise: 100,000 random flips, p = (flips with |T| ≥ |T_obs| + 1) / (100,000 + 1).
- m = 0: p = 1.
A flip ties the observed statistic when within 1e-12 · Σ|d_i| of it (the float noise of
sums that size), and ties count as "at least as extreme".

100,000 flips of 100,000 cases are 10^10 operations done naively. They are made cheap,
and stay exactly the sign-flip distribution, three ways:
1. The law of T depends only on the multiset of |d_i|, and a metric at a cutoff takes few
   values, so equal |d| are grouped: a group of m cases of value v contributes
   v · (2·Binomial(m, ½) − m), the law of m separate flips.
2. When all |d| lie on a lattice 1/L (hit, precision j/k, reciprocal rank 1/r, recall
   j/n_gold), L·T is an integer with characteristic function Π cos(q_g θ)^m_g;
   inverting it gives P(|T| ≥ |T_obs|) exactly (to ~1e-13), at a cost that depends on
   neither the flips nor n. The number of the 100,000 flips reaching |T_obs| is then
   Binomial(100,000, that probability) — the law of counting simulated flips — and is
   drawn as such. `exact_sign_flip_p_value` gives the probability itself.
3. Otherwise (nDCG: sums of 1/log2(r+1), on no lattice) flips are simulated: groups of
   ≥ 512 cases by a binomial draw, groups of 16–511 by popcounts of random words, the
   rest 12 cases at a time through a table of all 4,096 signed sums of their values,
   indexed by 12 random bits. `compare_many` simulates each atom of its masks (e.g. each
   locale×category cell) once and adds atoms up per slice value.

Seeds: generators are seeded by SEED (the gate's bootstrap seed), a stream number per
purpose, and the data the draw depends on (the |d| and |T_obs| for flips, the distinct
d and their counts for resamples), afresh for each comparison. Results are identical run
to run and do not depend on the order of cases; tests on different data get independent
Monte-Carlo errors; a line gives the same numbers from `compare` as from `compare_many`
except that off-lattice p-values there come from shared atom draws (same law).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Iterable, Sequence

import numpy as np
import polars as pl

SEED = 20261130
FLIPS = 100_000
EXACT_LIMIT = 100_000  # enumerate every sign assignment up to this many
_EXACT_MAX_NONZERO = EXACT_LIMIT.bit_length() - 1  # 2^16 ≤ 100,000 < 2^17
RESAMPLES = 2_000
NORMAL_ABOVE = 50_000  # more cases than this: normal-approximation interval (as the gate)
TIE_RTOL = 1e-12
TESTS = ("randomization", "bootstrap", "t")
Z_95 = 1.959963984540054

_FLIP_STREAM, _BOOTSTRAP_STREAM = 1, 2

# Lattice search: denominators of single |d| values and of their common lattice.
_MAX_DENOMINATOR = 100_000
_MAX_LATTICE = 10**9
# Characteristic-function inversion: Hoeffding radius exponent, and work limits beyond
# which simulating the flips is the cheaper exact route.
_TAIL_EXPONENT = 80.0  # P(|T| > radius) ≤ 2·e^-80
_CUT = 80.0  # |φ| below e^-(80 + ln N) cannot move the probability by 1e-30
_LEAF = 64
_MAX_GRID = 2**31 - 1
_MAX_WORK = 4_000_000  # (interval, group) bound evaluations
_MAX_POINTS = 2_000_000  # grid points where φ is evaluated

# Flip simulation: how each group of equal |d| is drawn, by its size.
_TABLE_BITS = 12
_POPCOUNT_MIN = 16
_BINOMIAL_MIN = 512
_CHUNK = 1_024  # flips per chunk where a (flips × words) bit matrix is built

_POOL_BELOW = 12  # bootstrap: values seen fewer times are resampled one by one



# ---------------------------------------------------------------------------------------
# Distributions (scipy is not a dependency: these are closed forms and classic algorithms)

# Acklam's rational approximation of the normal quantile (relative error < 1.2e-9),
# refined below by one Halley step to full double precision.
_ACKLAM_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
             1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
_ACKLAM_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
             6.680131188771972e01, -1.328068155288572e01)
_ACKLAM_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
             -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)
_ACKLAM_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
             3.754408661907416e00)
_ACKLAM_LOW = 0.02425


def normal_cdf(x: float) -> float:
    """Φ(x), the standard normal distribution function."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def normal_quantile(p: float) -> float:
    """Φ⁻¹(p): Acklam's approximation polished by one Halley step (about 1e-15 relative)."""
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise ValueError(f"a probability is in [0, 1], not {p}")
    if p == 0.0:
        return -math.inf
    if p == 1.0:
        return math.inf
    if p > 0.5:
        # 1 − p is exact for p ≥ ½, and the lower half is where Φ is computed accurately.
        return -normal_quantile(1.0 - p)
    a, b, c, d = _ACKLAM_A, _ACKLAM_B, _ACKLAM_C, _ACKLAM_D
    if p < _ACKLAM_LOW:
        q = math.sqrt(-2.0 * math.log(p))
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0)
    else:
        q = p - 0.5
        r = q * q
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / (
            ((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)
    error = normal_cdf(x) - p
    u = error * math.sqrt(2.0 * math.pi) * math.exp(x * x / 2.0)
    return x - u / (1.0 + x * u / 2.0)


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for k in range(1, 100_000):
        k2 = 2 * k
        for numerator in (k * (b - k) * x / ((a + k2 - 1.0) * (a + k2)),
                          -(a + k) * (a + b + k) * x / ((a + k2) * (a + k2 + 1.0))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            step = c * d
            h *= step
        if abs(step - 1.0) < 1e-16:
            return h
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def regularized_incomplete_beta(a: float, b: float, x: float, one_minus_x: float | None = None) -> float:
    """I_x(a, b); pass 1 − x when it is known more precisely than by subtraction."""
    y = 1.0 - x if one_minus_x is None else one_minus_x
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log(y))
    # The fraction converges fast on this side of the mean; the other side by symmetry.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, y) / b


def student_t_two_sided(t: float, df: float) -> float:
    """P(|T_df| ≥ |t|) for Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0
    t2 = t * t
    return regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))


# ---------------------------------------------------------------------------------------
# The randomization (sign-flip) test


def _clean(deltas: Sequence[float] | np.ndarray) -> np.ndarray:
    d = np.asarray(deltas, dtype=np.float64).ravel()
    return d[~np.isnan(d)]


@dataclass(frozen=True)
class _Groups:
    """Nonzero |d| grouped by value: values ascending, counts, and the observed T = Σ d."""

    values: np.ndarray
    counts: np.ndarray
    positives: np.ndarray  # per group, how many of its d are > 0
    observed: float
    scale: float  # Σ|d|, the size of the sums whose float noise the tie tolerance absorbs

    @property
    def size(self) -> int:
        return int(self.counts.sum())


def _groups(d: np.ndarray) -> _Groups:
    nonzero = d[d != 0.0]
    values, inverse, counts = np.unique(np.abs(nonzero), return_inverse=True, return_counts=True)
    positives = np.bincount(inverse, weights=nonzero > 0, minlength=values.size).astype(np.int64)
    return _Groups(values, counts.astype(np.int64), positives,
                   math.fsum(nonzero), math.fsum(np.abs(nonzero)))


def _enumerated_p(g: _Groups) -> float:
    """Share of all 2^m sign assignments with |T| ≥ |T_obs| (m ≤ 16)."""
    sums = np.zeros(1)
    for value in np.repeat(g.values, g.counts):
        sums = np.concatenate([sums + value, sums - value])
    return float(np.count_nonzero(np.abs(sums) >= abs(g.observed) - TIE_RTOL * g.scale)) / sums.size


def _lattice(values: np.ndarray) -> int | None:
    """Smallest L ≤ 1e9 with every value·L an integer (to float noise), else None."""
    x = values.astype(np.float64)
    denominator = np.ones(x.size, dtype=np.int64)
    found = np.zeros(x.size, dtype=bool)
    # Continued fractions of all values at once; convergent denominators k grow fast,
    # so a few dozen steps reach any denominator up to _MAX_DENOMINATOR.
    k_prev, k = np.zeros(x.size, dtype=np.int64), np.ones(x.size, dtype=np.int64)
    rest = x - np.floor(x)
    for _ in range(64):
        close = np.abs(x * k - np.rint(x * k)) <= 1e-9 * np.maximum(1.0, x * k)
        newly = close & ~found
        denominator[newly] = k[newly]
        found |= close
        if found.all():
            break
        if (k[~found] > _MAX_DENOMINATOR).any() or (rest[~found] == 0).any():
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            inverted = np.where(found, 1.0, 1.0 / np.where(rest == 0, 1.0, rest))
        partial = np.floor(inverted).astype(np.int64)
        rest = np.where(found, 0.5, inverted - partial)
        k_prev, k = k, np.where(found, k, partial * k + k_prev)
    else:
        return None
    lattice = 1
    for q in np.unique(denominator):
        lattice = lattice * int(q) // math.gcd(lattice, int(q))
        if lattice > _MAX_LATTICE:
            return None
    scaled = x * lattice
    if np.any(np.abs(scaled - np.rint(scaled)) > 1e-6):
        return None
    return lattice


def _log_cos_bound(lo: np.ndarray, hi: np.ndarray, q: np.ndarray, m: np.ndarray, grid: int) -> np.ndarray:
    """Upper bound of log|φ(2πj/grid)| over each integer interval [lo, hi] of j.

    |cos(2π q j / N)| = |cos(π y)|, y = 2qj/N, is 1 at integers y. An interval of y that
    contains none is at distance δ > 0 from the nearest, and there log|cos(πy)| ≤
    log cos(πδ) ≤ −(πδ)²/2. A margin of 1e-9 on δ covers the float rounding of y.
    """
    step = 2.0 * q.astype(np.float64) / grid
    a = lo[:, None] * step[None, :]
    b = hi[:, None] * step[None, :]
    cell = np.floor(a)
    distance = np.where(np.floor(b) == cell, np.minimum(a - cell, cell + 1.0 - b), 0.0)
    distance = np.maximum(distance - 1e-9, 0.0)
    return -(np.pi**2 / 2.0) * (distance**2 @ m.astype(np.float64))


def _points(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """All integers of the intervals [lo_i, hi_i], concatenated."""
    lengths = hi - lo + 1
    starts = np.repeat(lo - np.cumsum(lengths) + lengths, lengths)
    return starts + np.arange(int(lengths.sum()), dtype=np.int64)


def _lattice_tail(q: np.ndarray, m: np.ndarray, t: int) -> float | None:
    """P(|Σ_g q_g X_g| ≥ t), X_g a sum of m_g independent ±1; None when too costly.

    T = Σ q_g X_g is an integer with characteristic function φ(θ) = Π cos(q_g θ)^m_g.
    Hoeffding puts all but 2e^-80 of its mass within ±radius, so on a grid of
    N = 2·radius + 1 points the discrete Fourier inversion is exact, and
        P(|T| ≤ u) = (1/N) Σ_j φ(θ_j) D_u(θ_j),   θ_j = 2πj/N,
    with the Dirichlet kernel D_u(θ) = sin((2u+1)θ/2) / sin(θ/2). φ is negligible almost
    everywhere; a branch and bound over intervals of j, with the bound above, finds the
    few points where it is not, and only those are summed.
    """
    if t <= 0:
        return 1.0
    q = q.astype(np.int64)
    m = m.astype(np.int64)
    second_moment = float(np.sum(m * q.astype(np.float64) ** 2))
    radius = min(int(np.sum(m * q)), math.ceil(math.sqrt(2.0 * second_moment * _TAIL_EXPONENT)))
    if t > radius:
        return 0.0
    grid = 2 * radius + 1
    if grid > _MAX_GRID or 2 * int(q.max()) * grid >= 2**62:
        return None
    cut = _CUT + math.log(grid)
    lo, hi = np.array([1], dtype=np.int64), np.array([radius], dtype=np.int64)
    leaves, work = [], 0
    while lo.size:
        work += lo.size * q.size
        if work > _MAX_WORK:
            return None
        alive = _log_cos_bound(lo, hi, q, m, grid) > -cut
        lo, hi = lo[alive], hi[alive]
        leaf = hi - lo < _LEAF
        leaves.append(_points(lo[leaf], hi[leaf]))
        lo, hi = lo[~leaf], hi[~leaf]
        step = (hi - lo) // 8 + 1
        starts = lo[:, None] + step[:, None] * np.arange(8)
        ends = np.minimum(starts + step[:, None] - 1, hi[:, None])
        keep = starts <= hi[:, None]
        lo, hi = starts[keep], ends[keep]
    j = np.concatenate(leaves)
    if j.size > _MAX_POINTS:
        return None
    u = t - 1
    total = 0.0
    largest_first = np.argsort(-m, kind="stable")
    for start in range(0, j.size, 65_536):
        jj = j[start:start + 65_536]
        log_phi = np.zeros(jj.size)
        negative = np.zeros(jj.size, dtype=bool)
        # Largest groups first: most points fall below the cut after a few and are dropped.
        for g in largest_first:
            cos = np.cos(2.0 * np.pi * ((jj * q[g]) % grid) / grid)
            with np.errstate(divide="ignore"):
                log_phi += m[g] * np.log(np.abs(cos))
            if m[g] % 2:
                negative ^= cos < 0
            alive = log_phi > -cut
            if not alive.all():
                jj, log_phi, negative = jj[alive], log_phi[alive], negative[alive]
        phi = np.where(negative, -1.0, 1.0) * np.exp(log_phi)
        # The kernel's angles reduced with integers, so large u·j lose nothing.
        kernel = np.sin(np.pi * (((2 * u + 1) * jj) % (2 * grid)) / grid) / np.sin(np.pi * jj / grid)
        total += float(np.sum(phi * kernel))
    at_most_u = ((2 * u + 1) + 2.0 * total) / grid  # j and N − j give equal terms
    return min(1.0, max(0.0, 1.0 - at_most_u))


def _exact_tail(g: _Groups) -> float | None:
    """Exact P(|T| ≥ |T_obs|) by lattice inversion, or None (off-lattice or too costly)."""
    if g.size == 0:
        return 1.0
    lattice = _lattice(g.values)
    if lattice is None:
        return None
    q = np.rint(g.values * lattice).astype(np.int64)
    divisor = int(np.gcd.reduce(q))
    if divisor == 0 or np.any(q == 0):  # differences that are float noise on this lattice: simulate
        return None
    q //= divisor
    observed = int(np.sum(q * (2 * g.positives - g.counts)))
    return _lattice_tail(q, g.counts, abs(observed))


def _flip_generator(g: _Groups, seed: int) -> np.random.Generator:
    """A generator seeded by `seed` and by what the test depends on: the |d| and |T_obs|.

    Tests with different data get independent streams (their Monte-Carlo errors do not
    move together), and a test's stream depends on nothing but its own data — the same
    for d and −d, and for any order of the cases.
    """
    words = np.concatenate([[seed & 0xFFFFFFFF, seed >> 32, _FLIP_STREAM], g.values.view(np.uint32),
                            g.counts, np.array([abs(g.observed)]).view(np.uint32)]).astype(np.uint32)
    return np.random.default_rng(np.random.SeedSequence(words))


def _flip_sums(g: _Groups, flips: int, rng: np.random.Generator) -> np.ndarray:
    """`flips` independent draws of Σ s_i·|d_i| with uniform random signs s_i, exactly in law."""
    values, counts = g.values, g.counts
    sums = np.zeros(flips)
    # Large groups: v·(2·Binomial(m, ½) − m), one draw per flip.
    large = counts >= _BINOMIAL_MIN
    for value, count in zip(values[large], counts[large]):
        sums += value * (2.0 * rng.binomial(int(count), 0.5, size=flips) - count)
    # Middle groups: Binomial(m, ½) is the number of ones in m random bits, so all of them
    # at once are Σ_g v_g (2·ones_g − m_g) = 2·Σ_words v·ones − Σ_g v_g·m_g.
    middle = (counts >= _POPCOUNT_MIN) & ~large
    if middle.any():
        words = -(-counts[middle] // 64)
        word_value = 2.0 * np.repeat(values[middle], words)
        tail_bits = counts[middle] - 64 * (words - 1)
        mask = np.full(word_value.size, np.iinfo(np.uint64).max, dtype=np.uint64)
        low_bits = (np.uint64(1) << np.minimum(tail_bits, 63).astype(np.uint64)) - np.uint64(1)
        mask[np.cumsum(words) - 1] = np.where(tail_bits == 64, np.iinfo(np.uint64).max, low_bits)
        offset = float(np.sum(values[middle] * counts[middle]))
        for start in range(0, flips, _CHUNK):
            rows = min(_CHUNK, flips - start)
            bits = rng.bit_generator.random_raw(rows * word_value.size).reshape(rows, -1)
            bits &= mask
            sums[start:start + rows] += np.bitwise_count(bits).astype(np.float64) @ word_value - offset
    # Small groups and singletons, 12 cases at a time: a table holds all 4,096 signed sums
    # of the 12 values and 12 random bits pick one.
    small = counts < _POPCOUNT_MIN
    if small.any():
        items = np.repeat(values[small], counts[small])
        blocks = -(-items.size // _TABLE_BITS)
        padded = np.zeros(blocks * _TABLE_BITS)  # zeros add nothing whatever their sign
        padded[:items.size] = items
        patterns = np.arange(2**_TABLE_BITS)[:, None] >> np.arange(_TABLE_BITS)[None, :] & 1
        tables = padded.reshape(blocks, _TABLE_BITS) @ (2.0 * patterns - 1.0).T
        for start in range(0, blocks, 64):
            chunk = tables[start:start + 64]
            raw = rng.bit_generator.random_raw(-(-chunk.shape[0] * flips // 4))
            index = raw.view(np.uint16)[:chunk.shape[0] * flips].reshape(chunk.shape[0], flips)
            index &= np.uint16(2**_TABLE_BITS - 1)
            for table, idx in zip(chunk, index):
                sums += table[idx]
    return sums


def _p_without_simulation(g: _Groups, flips: int, seed: int) -> float | None:
    """The randomization p-value when no flip needs simulating (enumeration, lattice); else None."""
    if g.size == 0:
        return 1.0
    if g.size <= _EXACT_MAX_NONZERO:
        return _enumerated_p(g)
    tail = _exact_tail(g)
    if tail is None:
        return None
    # The count of flips reaching |T_obs| is Binomial(flips, tail): draw it directly.
    return (int(_flip_generator(g, seed).binomial(flips, tail)) + 1) / (flips + 1)


def _p_from_sums(sums: np.ndarray, g: _Groups) -> float:
    threshold = abs(g.observed) - TIE_RTOL * g.scale
    return (int(np.count_nonzero(np.abs(sums) >= threshold)) + 1) / (sums.size + 1)


def randomization_p_value(deltas: Sequence[float] | np.ndarray, *, flips: int = FLIPS, seed: int = SEED) -> float:
    """Two-sided paired randomization (sign-flip) p-value of the mean of `deltas` (NaN dropped)."""
    g = _groups(_clean(deltas))
    p = _p_without_simulation(g, flips, seed)
    return _p_from_sums(_flip_sums(g, flips, _flip_generator(g, seed)), g) if p is None else p


def exact_sign_flip_p_value(deltas: Sequence[float] | np.ndarray) -> float | None:
    """The sign-flip p-value over all 2^m assignments, when computable; else None.

    Computable by enumeration for m ≤ 16 nonzero differences and, for any m, when the
    |d| lie on a lattice 1/L (see the module docstring); None for off-lattice values
    (nDCG) with m > 16, or when the inversion would cost more than simulating.
    """
    g = _groups(_clean(deltas))
    if g.size <= _EXACT_MAX_NONZERO:
        return _enumerated_p(g) if g.size else 1.0
    return _exact_tail(g)


# ---------------------------------------------------------------------------------------
# Bootstrap and t


def _bootstrap_means(d: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Means of `resamples` paired bootstrap resamples of the n differences d.

    A resample's mean depends only on how often each distinct value is drawn, and those
    counts are Multinomial(n, frequencies): the law of resampling cases with replacement
    at a cost in distinct values, not in n. Values seen fewer than 12 times are pooled:
    the pool's count is drawn with the others and its members then drawn one by one
    (cheaper than a category each). The generator is seeded by `seed` and the values, so
    a line's interval depends on its own differences only, in any order.
    """
    values, counts = np.unique(d, return_counts=True)
    words = np.concatenate([[seed & 0xFFFFFFFF, seed >> 32, _BOOTSTRAP_STREAM], values.view(np.uint32), counts])
    rng = np.random.default_rng(np.random.SeedSequence(words.astype(np.uint32)))
    frequent = counts >= _POOL_BELOW
    pool = np.repeat(values[~frequent], counts[~frequent])
    draws = rng.multinomial(d.size, np.append(counts[frequent], pool.size) / d.size, size=resamples)
    sums = draws[:, :-1] @ values[frequent]
    if pool.size:
        # The narrowest index type draws several times faster than the default int64, and
        # a few resamples at a time keep the drawn members in cache.
        kind = np.uint16 if pool.size <= 2**16 else np.uint32
        step = max(1, 200_000 // pool.size)
        for start in range(0, resamples, step):
            taken = draws[start:start + step, -1]
            picked = pool[rng.integers(0, pool.size, size=int(taken.sum()), dtype=kind)]
            owner = np.repeat(np.arange(taken.size), taken)
            sums[start:start + step] += np.bincount(owner, weights=picked, minlength=taken.size)
    return sums / d.size


def _bootstrap_rule(means: np.ndarray) -> float:
    """Two-sided percentile p-value from resample means (see `bootstrap_p_value`)."""
    tail = min(np.count_nonzero(means <= 0), np.count_nonzero(means >= 0)) + 1
    return min(1.0, 2.0 * tail / (means.size + 1))


def _normal_interval(d: np.ndarray) -> tuple[float, float]:
    half = Z_95 * float(np.std(d, ddof=1)) / math.sqrt(d.size)
    mean = float(np.mean(d))
    return mean - half, mean + half


def _normal_p(d: np.ndarray) -> float:
    if not np.any(d):
        return 1.0
    sd = float(np.std(d, ddof=1))
    return 0.0 if sd == 0 else 2.0 * normal_cdf(-abs(float(np.mean(d))) / (sd / math.sqrt(d.size)))


def _interval(d: np.ndarray, resamples: int, seed: int, normal_above: int) -> tuple[float, float, float]:
    """ci_low, ci_high and the bootstrap p-value of mean(d), from the same resamples."""
    if d.size == 0:
        return math.nan, math.nan, 1.0
    if d.size > normal_above:
        return (*_normal_interval(d), _normal_p(d))
    means = _bootstrap_means(d, resamples, seed)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high), (_bootstrap_rule(means) if np.any(d) else 1.0)


def paired_interval(deltas: Sequence[float] | np.ndarray, *, resamples: int = RESAMPLES, seed: int = SEED,
                    normal_above: int = NORMAL_ABOVE) -> tuple[float, float]:
    """95% interval of the mean of `deltas`: percentile bootstrap, or normal beyond `normal_above` cases.

    Empty input gives (nan, nan); one case gives (d, d).
    """
    low, high, _ = _interval(_clean(deltas), resamples, seed, normal_above)
    return low, high


def bootstrap_p_value(deltas: Sequence[float] | np.ndarray, *, resamples: int = RESAMPLES, seed: int = SEED,
                      normal_above: int = NORMAL_ABOVE) -> float:
    """Two-sided bootstrap p-value of the mean of `deltas`, from the interval's own resamples.

    Rule: p = min(1, 2·min(1 + #{mean* ≤ 0}, 1 + #{mean* ≥ 0}) / (resamples + 1)), the
    smallest α whose equal-tailed percentile interval excludes 0 (resample means equal
    to 0 count on both sides). Beyond `normal_above` cases, p = 2·(1 − Φ(|z|)) with
    z = mean / (sd/√n), matching the normal interval. All-zero or empty input: 1.
    """
    return _interval(_clean(deltas), resamples, seed, normal_above)[2]


def paired_t_p_value(deltas: Sequence[float] | np.ndarray) -> float:
    """Two-sided paired t-test p-value of the mean of `deltas` (= scipy's ttest_rel).

    With fewer than two cases there is no variance to test against: p = 1. With zero
    variance the mean is known exactly: p = 1 if it is 0, else p = 0.
    """
    d = _clean(deltas)
    if d.size < 2:
        return 1.0
    if np.all(d == d[0]):
        # Equal differences have zero variance (np.std may leave float dust instead).
        return 1.0 if d[0] == 0.0 else 0.0
    mean = float(np.mean(d))
    sd = float(np.std(d, ddof=1))
    return student_t_two_sided(mean / (sd / math.sqrt(d.size)), d.size - 1)


# ---------------------------------------------------------------------------------------
# Across comparisons


def _adjust(p_values: Iterable[float], holm_rule: bool) -> np.ndarray:
    p = np.asarray(p_values if isinstance(p_values, np.ndarray) else list(p_values), dtype=np.float64)
    adjusted = np.full(p.shape, np.nan)
    present = np.flatnonzero(~np.isnan(p))
    m = present.size
    if m == 0:
        return adjusted
    order = present[np.argsort(p[present], kind="stable")]
    ranked = p[order]
    if holm_rule:
        # Step-down: the i-th smallest (from 0) times m − i, kept non-decreasing.
        stepped = np.maximum.accumulate((m - np.arange(m)) * ranked)
    else:
        # Step-up: the i-th smallest (from 1) times m/i, then the running minimum from the top.
        stepped = np.minimum.accumulate((m / np.arange(1, m + 1) * ranked)[::-1])[::-1]
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def holm(p_values: Iterable[float]) -> np.ndarray:
    """Holm step-down adjusted p-values, in input order; NaN stays NaN and is not counted."""
    return _adjust(p_values, holm_rule=True)


def benjamini_hochberg(p_values: Iterable[float]) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (FDR), in input order; NaN stays NaN and is not counted."""
    return _adjust(p_values, holm_rule=False)


def discordant_cases_needed(alpha: float = 0.05) -> int | None:
    """The fewest nonzero differences, all of one sign, that the sign-flip test rejects at `alpha`.

    With m nonzero differences all of one sign only the two all-alike sign assignments reach
    |T_obs|, so the exact p-value is 2·0.5^m (the smallest the test can give on m cases; for
    binary pairs this is McNemar's exact test, which is the sign-flip test on discordant pairs).
    Past 2^m > 100,000 the test counts 100,000 seeded flips and its p-value is at least
    1/100,001, so it is taken at its expectation there. The gate rejects on p < alpha. None when
    no m does (alpha at or below the sampled test's floor).
    """
    for m in range(1, 64):
        exact = 2.0 * 0.5**m
        p = exact if m <= _EXACT_MAX_NONZERO else (FLIPS * exact + 1.0) / (FLIPS + 1.0)
        if p < alpha:
            return m
    return None


def _binomial_upper_tail(trials: int, at_least: int, q: float) -> float:
    """P(Binomial(trials, q) ≥ at_least) = I_q(at_least, trials − at_least + 1)."""
    if at_least <= 0:
        return 1.0
    if at_least > trials:
        return 0.0
    return regularized_incomplete_beta(at_least, trials - at_least + 1, q, 1.0 - q)


def minimum_detectable_drop(baseline_values: Sequence[float] | np.ndarray, *, alpha: float = 0.05,
                            power: float = 0.8) -> float:
    """The smallest drop of a slice's mean that the gate's test detects with `power` at `alpha`.

    The test is the two-sided paired sign-flip (randomization) test of this module at level
    `alpha`; Holm's correction over the gated lines (decision `significant`) tests at alpha or
    below, so it can only raise this figure. NaN baseline values (not scored) are left out.

    Power model (the loss model): each case whose baseline value v_i is above 0 loses it
    (falls to 0: its gold card leaves the top k) independently with probability q, and no case
    gains, so the expected drop is q·Σv_i/n. The M cases lost are Binomial(n₊, q), n₊ the
    cases above 0, all of one sign, and the test rejects exactly when M ≥ m* =
    `discordant_cases_needed(alpha)` (p = 2·0.5^M). Power(q) = P(Binomial(n₊, q) ≥ m*) =
    I_q(m*, n₊ − m* + 1) rises with q; q* is where it reaches `power` (bisection), and the
    figure is q*·Σv_i/n, floored by the discreteness: no fewer than m* cases can be detected
    at all, so never below the m* smallest positive v_i summed, over n.
    - For a binary metric (hit) this is the power of McNemar's exact test (McNemar 1947;
      Agresti, Categorical Data Analysis, 3rd ed., §11.1: the exact conditional test on the
      discordant pairs, which the sign-flip test is on 0/1 pairs) when every discordant pair
      is a loss. Losses and gains together (churn) make the test weaker at the same net
      drop, so a drop below this figure cannot be detected with `power` whatever the churn:
      at a baseline of 1.000 and n = 20, m* = 6 (2·0.5^6 < 0.05 ≤ 2·0.5^5), so at least 6/20.
    - For graded metrics (recall, nDCG) it assumes whole losses; partial losses spread over
      more cases are detected at a smaller drop, and churn at a larger one.

    Returns inf when no drop is detectable with that power (fewer than m* cases above 0, or
    no m* at this alpha), and inf for an empty slice.
    """
    values = _clean(baseline_values)
    needed = discordant_cases_needed(alpha)
    positive = np.sort(values[values > 0.0])
    if needed is None or positive.size < needed:
        return math.inf
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2.0
        if _binomial_upper_tail(positive.size, needed, middle) >= power:
            high = middle
        else:
            low = middle
    model = high * math.fsum(positive) / values.size
    return max(model, math.fsum(positive[:needed]) / values.size)


def wins_ties_losses(deltas: Sequence[float] | np.ndarray) -> tuple[int, int, int]:
    """Counts of d > 0, d == 0 and d < 0 (NaN dropped)."""
    d = _clean(deltas)
    return int(np.count_nonzero(d > 0)), int(np.count_nonzero(d == 0)), int(np.count_nonzero(d < 0))


# ---------------------------------------------------------------------------------------
# Comparisons


@dataclass(frozen=True)
class PairedComparison:
    """One run against a reference on the cases both scored."""

    n: int
    reference_mean: float
    mean: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    wins: int
    ties: int
    losses: int


FIELDS = tuple(f.name for f in fields(PairedComparison))
_COUNT_FIELDS = ("n", "wins", "ties", "losses")


@dataclass(frozen=True)
class Comparisons:
    """`compare_many`'s result: each field an array of shape (candidates, masks)."""

    n: np.ndarray
    reference_mean: np.ndarray
    mean: np.ndarray
    delta: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    p_value: np.ndarray
    wins: np.ndarray
    ties: np.ndarray
    losses: np.ndarray

    def at(self, candidate: int, mask: int) -> PairedComparison:
        """The comparison of one candidate on one mask."""
        return PairedComparison(**{name: getattr(self, name)[candidate, mask].item() for name in FIELDS})


def compare(reference: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray, *,
            test: str = "randomization", flips: int = FLIPS, resamples: int = RESAMPLES, seed: int = SEED,
            normal_above: int = NORMAL_ABOVE) -> PairedComparison:
    """Compare `candidate` with `reference`, two aligned arrays of per-case values.

    Cases where either value is NaN (not scored) are left out. `test` chooses the
    p-value: "randomization" (default), "bootstrap" or "t".
    """
    r = np.asarray(reference, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if r.shape != c.shape or r.ndim != 1:
        raise ValueError(f"reference and candidate are aligned 1-d arrays, not {r.shape} and {c.shape}")
    return compare_many(r, c[None, :], test=test, flips=flips, resamples=resamples, seed=seed,
                        normal_above=normal_above).at(0, 0)


def _atoms(subsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The atoms of the masks: per case an atom id, and per atom which masks contain it."""
    packed = np.packbits(subsets.T, axis=1)
    _, first, atom = np.unique(packed, axis=0, return_index=True, return_inverse=True)
    return atom.ravel(), subsets[:, first].T


def compare_many(reference: np.ndarray, candidates: np.ndarray, masks: np.ndarray | None = None, *,
                 test: str = "randomization", flips: int = FLIPS, resamples: int = RESAMPLES,
                 seed: int = SEED, normal_above: int = NORMAL_ABOVE) -> Comparisons:
    """Compare every candidate run with its reference on every subset of cases.

    reference: (n,) per-case values, or (r, n) with one reference row per candidate (so
    several metrics can be compared in one call); candidates: (r, n), aligned by case;
    masks: (s, n) booleans, one row per subset (e.g. one per slice value), default all
    cases. NaN marks a case a run did not score. Entry [i, k] is the comparison of
    candidate i with its reference on the cases of mask k that both scored.

    Off-lattice randomization tests (nDCG) share work without changing any test's law:
    flips are simulated once per atom of the masks (the sets of cases that belong to
    exactly the same masks, e.g. locale×category cells) and each mask adds up its atoms.
    Their Monte-Carlo draws therefore depend on which masks are compared together (with
    a single mask they are `randomization_p_value`'s own); every other number depends on
    the line's own differences only, and equals what `compare` gives for that line.
    """
    if test not in TESTS:
        raise ValueError(f"test is one of {TESTS}, not {test!r}")
    cand = np.atleast_2d(np.asarray(candidates, dtype=np.float64))
    ref = np.broadcast_to(np.asarray(reference, dtype=np.float64), cand.shape)
    n_cases = cand.shape[1]
    subsets = (np.ones((1, n_cases), dtype=bool) if masks is None
               else np.atleast_2d(np.asarray(masks, dtype=bool)))
    if subsets.shape[1] != n_cases:
        raise ValueError("reference, candidates and masks must share the number of cases")
    rows, columns = cand.shape[0], subsets.shape[0]
    scored = ~(np.isnan(ref) | np.isnan(cand))
    deltas = np.where(scored, cand - ref, 0.0)
    out = {name: np.zeros((rows, columns), dtype=np.int64 if name in _COUNT_FIELDS else np.float64)
           for name in FIELDS}

    pending: dict[int, list[tuple[int, _Groups]]] = {}
    for i in range(rows):
        for k in range(columns):
            keep = subsets[k] & scored[i]
            d = deltas[i, keep]
            n = d.size
            out["n"][i, k] = n
            out["reference_mean"][i, k] = float(np.mean(ref[i, keep])) if n else math.nan
            out["mean"][i, k] = float(np.mean(cand[i, keep])) if n else math.nan
            out["delta"][i, k] = float(np.mean(d)) if n else math.nan
            out["wins"][i, k], out["ties"][i, k], out["losses"][i, k] = wins_ties_losses(d)
            out["ci_low"][i, k], out["ci_high"][i, k], bootstrap_p = _interval(d, resamples, seed, normal_above)
            if test == "t":
                out["p_value"][i, k] = paired_t_p_value(d)
            elif test == "bootstrap":
                out["p_value"][i, k] = bootstrap_p
            else:
                g = _groups(d)
                p = _p_without_simulation(g, flips, seed)
                if p is None:
                    pending.setdefault(i, []).append((k, g))
                else:
                    out["p_value"][i, k] = p

    if pending:
        atom, atom_in = _atoms(subsets)
        for i, tests in pending.items():
            sums = {k: np.zeros(flips) for k, _ in tests}
            for a in np.unique(np.concatenate([np.flatnonzero(atom_in[:, k]) for k, _ in tests])):
                g = _groups(deltas[i, (atom == a) & scored[i]])
                if g.size == 0:
                    continue
                drawn = _flip_sums(g, flips, _flip_generator(g, seed))
                for k, _ in tests:
                    if atom_in[a, k]:
                        sums[k] += drawn
            for k, g in tests:
                out["p_value"][i, k] = _p_from_sums(sums[k], g)

    return Comparisons(**out)


FRAME_KEYS = ("slice", "slice_value", "metric")


def compare_frame(cases: pl.DataFrame, reference_run: str, *, test: str = "randomization", flips: int = FLIPS,
                  resamples: int = RESAMPLES, seed: int = SEED, normal_above: int = NORMAL_ABOVE) -> pl.DataFrame:
    """One row per (run, slice, slice_value, metric) comparing each run with `reference_run`.

    `cases` is long: columns run_id, case_id, slice, slice_value, metric, value, a row per
    run, case, slice and metric. A case's slices are attributes of the case (the same in
    every run) and its value is a property of (run, case, metric) (the same in every
    slice); a ValueError says when the frame disagrees. A missing row or a null/NaN
    value is a case the run did not score. The result has run_id, slice, slice_value,
    metric, n, reference_mean, mean, delta, ci_low, ci_high, p_value, wins, ties,
    losses, sorted by its keys; raw p-values — adjust a family of them with `holm` or
    `benjamini_hochberg`.
    """
    # Keys become integer codes in sorted order (an Enum of the sorted distinct labels:
    # hashing, not sorting, the rows); the rest is array indexing.
    key_names = ("run_id", "case_id", "metric", "slice", "slice_value")
    labels_of = {name: cases[name].cast(pl.String).unique().sort() for name in key_names}
    codes = cases.select(
        *[pl.col(name).cast(pl.String).cast(pl.Enum(labels_of[name])).to_physical().cast(pl.Int64)
          for name in key_names],
        value=pl.col("value").cast(pl.Float64).fill_null(math.nan),
    )
    run, case, metric, slice_, slice_value = (codes[name].to_numpy() for name in key_names)
    value = codes["value"].to_numpy()
    run_names = labels_of["run_id"].to_list()
    metric_names = labels_of["metric"].to_list()
    if reference_run not in run_names:
        raise ValueError(f"reference run {reference_run!r} is not in the frame")
    reference = run_names.index(reference_run)
    n_cases = int(case.max()) + 1 if case.size else 0

    # Every (metric, run) a row of per-case values; reading the values back finds any
    # (run, case, metric) that has different values in different slices.
    row = metric * len(run_names) + run
    grid = np.full((len(metric_names) * len(run_names), n_cases), np.nan)
    grid[row, case] = value
    if not np.array_equal(grid[row, case], value, equal_nan=True):
        raise ValueError("a (run, case, metric) has different values in different slices")

    slice_code, first = np.unique(slice_ * (int(slice_value.max(initial=0)) + 1) + slice_value, return_index=True)
    masks = np.zeros((slice_code.size, n_cases), dtype=bool)
    masks[np.searchsorted(slice_code, slice_ * (int(slice_value.max(initial=0)) + 1) + slice_value), case] = True
    labels = cases[first].select("slice", "slice_value")

    candidates = [r for r in range(len(run_names)) if r != reference]
    pairs = [(m, r) for m in range(len(metric_names)) for r in candidates]
    result = compare_many(grid[[m * len(run_names) + reference for m, _ in pairs]],
                          grid[[m * len(run_names) + r for m, r in pairs]], masks, test=test, flips=flips,
                          resamples=resamples, seed=seed, normal_above=normal_above)
    keys = pl.DataFrame({
        "run_id": np.repeat([run_names[r] for _, r in pairs], labels.height),
        "slice": np.tile(labels["slice"].to_numpy(), len(pairs)),
        "slice_value": np.tile(labels["slice_value"].to_numpy(), len(pairs)),
        "metric": np.repeat([metric_names[m] for m, _ in pairs], labels.height),
    })
    stats = pl.DataFrame({name: getattr(result, name).ravel() for name in FIELDS})
    return pl.concat([keys, stats], how="horizontal").sort("run_id", *FRAME_KEYS)
