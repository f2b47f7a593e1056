"""Statistics shared by client and server: pure functions over plain numbers.

Confidence interval for a ratio of medians: a percentile bootstrap with a fixed seed.
With five trials per config the exact rank-based intervals for a *ratio* of two medians
have no closed form, and the bootstrap is the standard tool for it. Its cost is
randomness; we remove that with our own tiny generator (splitmix64) instead of
``random``, so the client, the server and any other language reproduce the same interval
bit for bit from the same trials. With n=5 the interval is coarse (it can only take
values formed by order statistics), which is the honest answer for five trials.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0x5BEC_BE4C
CONFIDENCE = 0.95
_MASK64 = (1 << 64) - 1


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return median_of_sorted(sorted(values))


def median_of_sorted(ordered: Sequence[float]) -> float:
    """``median`` of values already in ascending order (callers that sort once)."""
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def sample_stdev(values: Sequence[float]) -> float | None:
    """Sample standard deviation (n-1); None for fewer than two values."""
    if len(values) < 2:
        return None
    centre = mean(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1))


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    stdev = sample_stdev(values)
    centre = mean(values) if values else 0.0
    if stdev is None or centre == 0:
        return None
    return stdev / centre


def stdev_and_cv(values: Sequence[float]) -> tuple[float | None, float | None]:
    """``(sample_stdev(values), coefficient_of_variation(values))``, the mean taken once."""
    if len(values) < 2:
        return None, None
    centre = mean(values)
    stdev = math.sqrt(math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1))
    return stdev, (None if centre == 0 else stdev / centre)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default, 'type 7'), q in [0, 1]."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = math.ceil(pos)
    if low == high:
        return float(ordered[low])
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


# Iglewicz and Hoaglin (1993): a modified z-score above 3.5 marks a potential outlier;
# 0.6745 makes the MAD of normal data estimate its standard deviation (1 / 1.4826).
OUTLIER_SCORE = 3.5
_MAD_NORMAL = 0.6745
_MEAN_AD_NORMAL = 0.7979  # the same for the mean absolute deviation, when the MAD is 0
# A spread this small next to the median is rounding, not variation (two ratios computed
# along different paths differ by an ulp): dividing by it would score values 1e16 apart.
_ROUNDING_SPREAD = 1e-12


def median_absolute_deviation(values: Sequence[float]) -> float:
    """The median of the absolute deviations from the median (MAD), unscaled."""
    centre = median(values)
    return median([abs(v - centre) for v in values])


def robust_scores(values: Sequence[float]) -> list[float]:
    """Each value's modified z-score, ``0.6745 * (x - median) / MAD``, signed: robust to the
    outliers it is meant to find (a mean and standard deviation are pulled by them). When
    more than half the values are equal (to rounding) the MAD is 0; then the mean absolute deviation
    stands in for it (``0.7979 * (x - median) / meanAD``), and if that is 0 too every
    value is the median and scores 0."""
    if not values:
        return []
    centre = median(values)
    deviations = [v - centre for v in values]
    mad = median([abs(d) for d in deviations])
    rounding = _ROUNDING_SPREAD * abs(centre)
    if mad > rounding:
        return [_MAD_NORMAL * d / mad for d in deviations]
    mean_ad = math.fsum(abs(d) for d in deviations) / len(deviations)
    if mean_ad > rounding:
        return [_MEAN_AD_NORMAL * d / mean_ad for d in deviations]
    return [0.0 for _ in values]


def decode_tps(eval_count: int, eval_duration_ns: int) -> float | None:
    """Decode tokens per second as Ollama documents it: eval_count / eval_duration * 1e9."""
    if eval_duration_ns <= 0:
        return None
    return eval_count / eval_duration_ns * 1e9


class SplitMix64:
    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.next() % n  # modulo bias is < n / 2^64: irrelevant for n <= 1000


def _resample_median(values: Sequence[float], rng: SplitMix64) -> float:
    n = len(values)
    return median([values[rng.below(n)] for _ in range(n)])


@dataclass(frozen=True)
class RatioEstimate:
    ratio: float
    ci_low: float | None
    ci_high: float | None


def ratio_of_medians(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> RatioEstimate:
    """median(numerator) / median(denominator) with a seeded percentile-bootstrap CI.

    The CI is None when either side has fewer than two values.
    """
    denominator_median = median(denominator)
    if denominator_median == 0:
        raise ValueError("ratio of medians with a zero denominator")
    ratio = median(numerator) / denominator_median
    if len(numerator) < 2 or len(denominator) < 2:
        return RatioEstimate(ratio, None, None)
    if max(len(numerator), len(denominator)) <= _FAST_MAX_N:
        ci_low, ci_high = _bootstrap_ci_fast(numerator, denominator, resamples, seed, confidence)
    else:
        ci_low, ci_high = _bootstrap_ci_direct(numerator, denominator, resamples, seed, confidence)
    return RatioEstimate(ratio, ci_low, ci_high)


def _bootstrap_ci_direct(
    numerator: Sequence[float],
    denominator: Sequence[float],
    resamples: int,
    seed: int,
    confidence: float,
) -> tuple[float, float]:
    """The definition: draw, take medians, take percentiles. ~15 ms per call for n=5."""
    rng = SplitMix64(seed)
    ratios: list[float] = []
    for _ in range(resamples):
        num = _resample_median(numerator, rng)
        den = _resample_median(denominator, rng)
        if den > 0:
            ratios.append(num / den)
    alpha = (1.0 - confidence) / 2.0
    return percentile(ratios, alpha), percentile(ratios, 1.0 - alpha)


# --- the same bootstrap, computed exactly and without drawing ----------------------------
#
# The seed is fixed, so the indices drawn for every resample depend only on the two sample
# sizes (cached). A resample's median depends only on which *ranks* were drawn: for odd n
# it is the value of rank r when at least n//2 + 1 of its draws have rank <= r and fewer
# have rank <= r - 1 (even n: the two middle ranks the same way, with n//2 and n//2 + 1).
# Marking resamples as bits of an int, the values are taken in ascending order and, for
# each count k, the resamples with at least k draws among the values taken so far are kept
# as one mask (a few dozen big-int operations per value instead of a sort per resample).
# The number of resamples with (numerator median a, denominator median b) is then
# popcount(mask_a & mask_b), and the percentiles are read off the weighted, sorted distinct
# ratios. The arithmetic on the values is the same as in ``_bootstrap_ci_direct``, so the
# results are bit-identical (tests/schema/test_stats_fast.py checks this against the
# direct definition, which is kept only as the reference).

# Protocols run at most 18 trials a config (a bracketed baseline); wire models allow 200.
# The masks' cost grows with n * n / 2 per side, the direct definition's with n: beyond
# this the direct definition is used.
_FAST_MAX_N = 64
RankSpec = tuple[int, ...]


@lru_cache(maxsize=64)
def _draws(
    n_num: int, n_den: int, resamples: int, seed: int
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    rng = SplitMix64(seed)
    num: list[tuple[int, ...]] = []
    den: list[tuple[int, ...]] = []
    for _ in range(resamples):
        num.append(tuple(rng.below(n_num) for _ in range(n_num)))
        den.append(tuple(rng.below(n_den) for _ in range(n_den)))
    return tuple(num), tuple(den)


@lru_cache(maxsize=64)
def _count_masks(
    n_num: int, n_den: int, resamples: int, seed: int, side: int
) -> tuple[tuple[int, ...], ...]:
    """For each index of one side, the resamples that drew it at least once, twice, ...:
    bit j of ``masks[i][m - 1]`` is set when resample j drew index i at least m times."""
    n = n_num if side == 0 else n_den
    bits: list[list[list[int]]] = [[] for _ in range(n)]  # bits[i][m - 1]: resample numbers
    for resample, drawn in enumerate(_draws(n_num, n_den, resamples, seed)[side]):
        seen = [0] * n
        for index in drawn:
            seen[index] += 1
            if len(bits[index]) < seen[index]:
                bits[index].append([])
            bits[index][seen[index] - 1].append(resample)
    return tuple(tuple(sum(1 << j for j in members) for members in levels) for levels in bits)


@lru_cache(maxsize=4096)
def _spec_masks(
    n_num: int, n_den: int, resamples: int, seed: int, side: int, order: tuple[int, ...]
) -> tuple[tuple[RankSpec, int], ...]:
    """For values whose ascending order is ``order`` (their indices, sorted by value), the
    resamples of one side grouped by where their median comes from: the index of the
    middle value (odd n) or of the two middle ones (even n), each group as a mask."""
    n = len(order)
    mid = n // 2
    counts = _count_masks(n_num, n_den, resamples, seed, side)
    # at_least[k]: the resamples with at least k draws among the values taken so far
    at_least = [(1 << resamples) - 1] + [0] * (mid + 1)
    lower: list[int] = []  # per rank r: resamples whose (mid - 1)-th draw has rank <= r
    upper: list[int] = []  # the same for the mid-th draw (0-based, in ascending order)
    for index in order:
        levels = counts[index]
        for k in range(mid + 1, 0, -1):  # downwards: at_least[k - m] is still the old one
            gained = 0
            for m, mask in enumerate(levels[:k], 1):
                gained |= at_least[k - m] & mask
            at_least[k] |= gained
        lower.append(at_least[mid])
        upper.append(at_least[mid + 1])
    uppers = [(rank, mask & ~(upper[rank - 1] if rank else 0)) for rank, mask in enumerate(upper)]
    if n % 2:
        return tuple(((order[rank],), mask) for rank, mask in uppers if mask)
    masks: list[tuple[RankSpec, int]] = []
    for low, low_mask in enumerate(lower):
        low_mask &= ~(lower[low - 1] if low else 0)
        if not low_mask:
            continue
        for high, high_mask in uppers[low:]:
            if both := low_mask & high_mask:
                masks.append(((order[low], order[high]), both))
    return tuple(masks)


def _medians_by_spec(
    values: Sequence[float], n_num: int, n_den: int, resamples: int, seed: int, side: int
) -> list[tuple[float, int]]:
    order = tuple(sorted(range(len(values)), key=values.__getitem__))
    specs = _spec_masks(n_num, n_den, resamples, seed, side, order)
    if len(values) % 2:
        return [(float(values[i]), mask) for (i,), mask in specs]
    return [((values[i] + values[j]) / 2.0, mask) for (i, j), mask in specs]


def _bootstrap_ci_fast(
    numerator: Sequence[float],
    denominator: Sequence[float],
    resamples: int,
    seed: int,
    confidence: float,
) -> tuple[float, float]:
    n_num, n_den = len(numerator), len(denominator)
    nums = _medians_by_spec(numerator, n_num, n_den, resamples, seed, 0)
    dens = [
        (den, mask)
        for den, mask in _medians_by_spec(denominator, n_num, n_den, resamples, seed, 1)
        if den > 0
    ]
    cells = [
        (num / den, count)
        for num, num_mask in nums
        for den, den_mask in dens
        if (count := (num_mask & den_mask).bit_count())
    ]
    if not cells:
        raise ValueError("percentile of no values")
    cells.sort()
    # cumulative[i]: how many resamples have a ratio <= cells[i]'s; the k-th smallest
    # ratio (from 0) is the first cell whose cumulative count exceeds k.
    ratios = [value for value, _ in cells]
    cumulative = list(accumulate(count for _, count in cells))
    total = cumulative[-1]

    def weighted_percentile(q: float) -> float:
        pos = (total - 1) * q
        low = math.floor(pos)
        high = math.ceil(pos)
        at_low = ratios[bisect_right(cumulative, low)]
        if low == high:
            return float(at_low)
        return at_low + (ratios[bisect_right(cumulative, high)] - at_low) * (pos - low)

    alpha = (1.0 - confidence) / 2.0
    return weighted_percentile(alpha), weighted_percentile(1.0 - alpha)
