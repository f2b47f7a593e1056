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


class _SplitMix64:
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


def _resample_median(values: Sequence[float], rng: _SplitMix64) -> float:
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
    rng = _SplitMix64(seed)
    ratios: list[float] = []
    for _ in range(resamples):
        num = _resample_median(numerator, rng)
        den = _resample_median(denominator, rng)
        if den > 0:
            ratios.append(num / den)
    alpha = (1.0 - confidence) / 2.0
    return percentile(ratios, alpha), percentile(ratios, 1.0 - alpha)


# --- the same bootstrap, computed exactly but ~100x faster --------------------------------
#
# The seed is fixed, so the indices drawn for every resample depend only on the two sample
# sizes. A resample's median depends only on which *ranks* were drawn, so for a given
# ordering of the values (a permutation, cached) each resample's median is one of a few
# "rank specs". Marking the resamples of each spec as bits of an int, the number of
# resamples with (numerator spec a, denominator spec b) is popcount(mask_a & mask_b);
# the percentiles are then read off the weighted, sorted distinct ratios. The arithmetic
# on the values is the same as in ``_bootstrap_ci_direct``, so results are bit-identical
# (tests/schema/test_stats_fast.py checks this against the direct definition).

# Up to 12 trials a side (v3 protocols run 10 for the baseline): ~3 ms a call instead of
# ~20 ms; beyond, the direct definition.
_FAST_MAX_N = 12
RankSpec = tuple[int, ...]


@lru_cache(maxsize=64)
def _draws(
    n_num: int, n_den: int, resamples: int, seed: int
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    rng = _SplitMix64(seed)
    num: list[tuple[int, ...]] = []
    den: list[tuple[int, ...]] = []
    for _ in range(resamples):
        num.append(tuple(rng.below(n_num) for _ in range(n_num)))
        den.append(tuple(rng.below(n_den) for _ in range(n_den)))
    return tuple(num), tuple(den)


@lru_cache(maxsize=64)
def _draw_groups(
    n_num: int, n_den: int, resamples: int, seed: int, side: int
) -> tuple[tuple[tuple[int, ...], int], ...]:
    """One side's draws grouped by the multiset of indices drawn (sorted), each with the
    mask of the resamples that drew it: a median depends only on that multiset, and for
    n=5 the 2,000 draws fall into at most 126 groups."""
    members: dict[tuple[int, ...], int] = {}
    for index, drawn in enumerate(_draws(n_num, n_den, resamples, seed)[side]):
        key = tuple(sorted(drawn))
        members[key] = members.get(key, 0) | (1 << index)
    return tuple(members.items())


@lru_cache(maxsize=4096)
def _spec_masks(
    n_num: int, n_den: int, resamples: int, seed: int, side: int, order: tuple[int, ...]
) -> tuple[tuple[RankSpec, int], ...]:
    """For values whose ascending order is ``order`` (their indices, sorted by value), the
    resamples of one side grouped by where their median comes from: the index of the
    middle value (odd n) or of the two middle ones (even n), each group as a mask."""
    n = len(order)
    rank_of = [0] * n
    for rank, index in enumerate(order):
        rank_of[index] = rank
    mid = n // 2
    masks: dict[RankSpec, int] = {}
    for drawn, mask in _draw_groups(n_num, n_den, resamples, seed, side):
        ranks = sorted([rank_of[i] for i in drawn])
        spec = (order[ranks[mid]],) if n % 2 else (order[ranks[mid - 1]], order[ranks[mid]])
        masks[spec] = masks.get(spec, 0) | mask
    return tuple(masks.items())


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


# --- blocks: the unit that varies -----------------------------------------------------------
#
# A run measures each config in several blocks (a block: consecutive trials of one config,
# after its own engine start or warm-up). The machine's speed drifts between blocks far
# more than between the trials of one block (real-engine.md: a baseline fell from 47.6 to
# 26.0 tok/s within minutes), so an interval over trials alone is too narrow. Here:
#
# - each draft block is compared with the baseline *at its place in the run*: the baseline
#   blocks' medians interpolated linearly at the draft block's centre (mean run position of
#   its trials) between the nearest baseline block before and after it (the nearest one at
#   either end), so that a linear drift between neighbouring baseline blocks cancels;
# - the point estimate is the median of the draft blocks' ratios;
# - the interval is a two-stage percentile bootstrap: per resample, every baseline block's
#   trials are resampled within the block (the baseline is the reference curve: its blocks
#   keep their places), then the draft's blocks are drawn with replacement, and each drawn
#   block's trials are resampled within it. Resampling both levels over-states the variance
#   a little (the within-block spread is counted twice), which errs towards wide intervals.
#
# The draws come from the same splitmix64 generator and seed as ``ratio_of_medians``, in
# this order per resample: for each baseline block in order, one ``below(n)`` per trial;
# then one ``below(K)`` per draft block (which blocks are drawn); then for each drawn block
# in draw order, one ``below(n)`` per trial. Any re-implementation that follows the order
# reproduces the interval bit for bit.


@dataclass(frozen=True)
class Block:
    """One block's measurements: its centre (mean run position) and its values (rates)."""

    centre: float
    values: tuple[float, ...]


@dataclass(frozen=True)
class BlockedEstimate:
    ratio: float
    ci_low: float | None
    ci_high: float | None
    block_ratios: tuple[float, ...]


def _neighbours(centre: float, centres: Sequence[float]) -> tuple[int, int, float]:
    """The baseline blocks around ``centre`` (indices into ``centres``, ascending) and the
    weight of the second: the reference is ``m[i] * (1 - w) + m[j] * w``."""
    after = bisect_right(centres, centre)
    if after == 0:
        return 0, 0, 0.0
    if after == len(centres):
        return after - 1, after - 1, 0.0
    before = after - 1
    if centres[before] == centre:
        return before, before, 0.0
    weight = (centre - centres[before]) / (centres[after] - centres[before])
    return before, after, weight


@lru_cache(maxsize=256)
def _blocked_draws(
    den_sizes: tuple[int, ...], num_sizes: tuple[int, ...], resamples: int, seed: int
) -> tuple[tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, tuple[int, ...]], ...]], ...]:
    """Per resample: the indices drawn within each baseline block, then (draft block,
    indices drawn within it) for each drawn draft block (the documented order)."""
    rng = _SplitMix64(seed)
    blocks = len(num_sizes)
    out = []
    for _ in range(resamples):
        den = tuple(tuple(rng.below(n) for _ in range(n)) for n in den_sizes)
        picks = [rng.below(blocks) for _ in range(blocks)]
        num = tuple((p, tuple(rng.below(num_sizes[p]) for _ in range(num_sizes[p])))
                    for p in picks)
        out.append((den, num))
    return tuple(out)


_Plan = tuple[tuple[int, ...], tuple[int, ...], int, int]  # sizes, resamples, seed
_Spec = tuple[int, ...]  # the index (odd n) or the two indices (even n) of a median


@dataclass(frozen=True)
class _BlockRatios:
    """The blocks with values, the baseline sorted by centre, each draft block's neighbours
    among the baseline blocks, and each draft block's ratio to the baseline at its place."""

    num: list[Block]
    den: list[Block]
    where: list[tuple[int, int, float]]
    ratios: list[float]


def _reference(medians: Sequence[float], at: tuple[int, int, float]) -> float:
    i, j, w = at
    return medians[i] if w == 0.0 else medians[i] * (1.0 - w) + medians[j] * w


def _block_ratios(numerator: Sequence[Block], denominator: Sequence[Block]) -> _BlockRatios:
    num = [b for b in numerator if b.values]
    den = sorted((b for b in denominator if b.values), key=lambda b: b.centre)
    if not num or not den:
        raise ValueError("blocked ratio without values on one side")
    centres = [b.centre for b in den]
    den_medians = [median(b.values) for b in den]
    where = [_neighbours(b.centre, centres) for b in num]
    ratios: list[float] = []
    for block, at in zip(num, where, strict=True):
        ref = _reference(den_medians, at)
        if ref <= 0:
            raise ValueError("blocked ratio with a zero baseline")
        ratios.append(median(block.values) / ref)
    return _BlockRatios(num, den, where, ratios)


def blocked_ratio(
    numerator: Sequence[Block],
    denominator: Sequence[Block],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> BlockedEstimate:
    """A draft's ratio to the baseline over blocks (see above), with its seeded two-stage
    bootstrap CI; the CI is None when either side has fewer than two values in all.
    Blocks without values are ignored; a side with none raises ValueError."""
    found = _block_ratios(numerator, denominator)
    num, den, where, ratios = found.num, found.den, found.where, found.ratios
    ratio = median(ratios)
    if sum(len(b.values) for b in num) < 2 or sum(len(b.values) for b in den) < 2:
        return BlockedEstimate(ratio, None, None, tuple(ratios))
    den_sizes, num_sizes = tuple(len(b.values) for b in den), tuple(len(b.values) for b in num)
    den_values = [b.values for b in den]
    num_values = [b.values for b in num]
    plan = (den_sizes, num_sizes, resamples, seed)
    estimates = _blocked_estimates_fast(den_values, num_values, where, plan)
    if estimates is None:
        estimates = _blocked_estimates_direct(den_values, num_values, where, plan)
    alpha = (1.0 - confidence) / 2.0
    return BlockedEstimate(ratio, percentile(estimates, alpha),
                           percentile(estimates, 1.0 - alpha), tuple(ratios))


def _blocked_estimates_direct(den_values: Sequence[Sequence[float]],
                              num_values: Sequence[Sequence[float]],
                              where: Sequence[tuple[int, int, float]],
                              plan: _Plan) -> list[float]:
    """The definition: per resample, the drawn medians, the references, the drawn ratios
    and their median."""
    estimates: list[float] = []
    for den_draw, num_draw in _blocked_draws(*plan):
        medians = [median_of_sorted(sorted([values[k] for k in drawn]))
                   for values, drawn in zip(den_values, den_draw, strict=True)]
        drawn_ratios: list[float] = []
        for pick, drawn in num_draw:
            ref = _reference(medians, where[pick])
            if ref > 0:
                values = num_values[pick]
                drawn_ratios.append(median_of_sorted(sorted([values[k] for k in drawn])) / ref)
        if drawn_ratios:
            estimates.append(median(drawn_ratios))
    return estimates


# --- the same block bootstrap, column by column --------------------------------------------
#
# The loop above takes, per resample, the median of each drawn set of trials. A drawn set's
# median depends only on which ranks were drawn, so for the given order of a block's values
# the resamples' medians are lookups into the values (cached per draw plan and order, like
# the trial bootstrap's rank specs), computed for all resamples of one block at once. The
# arithmetic on the values is the loop's (the same median, the same interpolation, the same
# division, the same median of the drawn ratios), so the estimates are bit for bit the
# loop's (tests/schema/test_blocks_fast.py); only a zero or negative reference falls back.



def _median_spec(drawn: Sequence[int], rank_of: Sequence[int], order: Sequence[int]) -> _Spec:
    ranks = sorted(rank_of[i] for i in drawn)
    mid = len(ranks) // 2
    if len(ranks) % 2:
        return (order[ranks[mid]],)
    return (order[ranks[mid - 1]], order[ranks[mid]])


def _ranks(order: Sequence[int]) -> list[int]:
    rank_of = [0] * len(order)
    for rank, index in enumerate(order):
        rank_of[index] = rank
    return rank_of


@lru_cache(maxsize=512)
def _den_specs(plan: _Plan, block: int, order: tuple[int, ...]) -> tuple[_Spec, ...]:
    """Per resample, where baseline block ``block``'s drawn median comes from."""
    rank_of = _ranks(order)
    return tuple(_median_spec(den[block], rank_of, order)
                 for den, _ in _blocked_draws(*plan))


@lru_cache(maxsize=512)
def _num_specs(plan: _Plan, slot: int, orders: tuple[tuple[int, ...], ...]
               ) -> tuple[tuple[int, _Spec], ...]:
    """Per resample, the draft block drawn in ``slot`` and where its drawn median comes
    from."""
    ranks = [_ranks(order) for order in orders]
    out = []
    for _, num in _blocked_draws(*plan):
        pick, drawn = num[slot]
        out.append((pick, _median_spec(drawn, ranks[pick], orders[pick])))
    return tuple(out)


def _order(values: Sequence[float]) -> tuple[int, ...]:
    return tuple(sorted(range(len(values)), key=values.__getitem__))


def _medians(values: Sequence[float], specs: Sequence[_Spec]) -> list[float]:
    if len(values) % 2:
        return [float(values[i]) for (i,) in specs]
    return [(values[i] + values[j]) / 2.0 for i, j in specs]


def _blocked_estimates_fast(den_values: Sequence[Sequence[float]],
                            num_values: Sequence[Sequence[float]],
                            where: Sequence[tuple[int, int, float]],
                            plan: _Plan) -> list[float] | None:
    """The loop's estimates, one list per block instead of one loop per resample; None when
    a reference is not positive somewhere (the loop skips those: left to it)."""
    den_medians = [_medians(values, _den_specs(plan, b, _order(values)))
                   for b, values in enumerate(den_values)]
    references: list[list[float]] = []
    for i, j, w in where:
        if w == 0.0:
            references.append(den_medians[i])
        else:
            references.append([a * (1.0 - w) + b * w
                               for a, b in zip(den_medians[i], den_medians[j], strict=True)])
        if min(references[-1]) <= 0:
            return None
    orders = tuple(_order(values) for values in num_values)
    columns: list[list[float]] = []
    for slot in range(len(num_values)):
        specs = _num_specs(plan, slot, orders)
        columns.append([
            (float(num_values[pick][spec[0]]) if len(spec) == 1
             else (num_values[pick][spec[0]] + num_values[pick][spec[1]]) / 2.0)
            / references[pick][r]
            for r, (pick, spec) in enumerate(specs)])
    if len(columns) == 1:
        return [float(v) for v in columns[0]]
    if len(columns) == 2:
        # median of two: sorted, then (low + high) / 2, and a + b == b + a in IEEE arithmetic
        return [(a + b) / 2.0 for a, b in zip(columns[0], columns[1], strict=True)]
    return [median(row) for row in zip(*columns, strict=True)]


# --- blocks, the t interval (protocols with ``interval: "block_t"``) ------------------------
#
# The bootstrap above cannot be honest with two draft blocks: resampling two blocks only
# ever sees their own disagreement, so when two blocks happen to agree the interval is
# narrow although the next run may read 30 % apart (BENCHMARKS.md, interval calibration).
# With K draft blocks the standard small-sample answer is Student's t on K - 1 degrees of
# freedom, which pays for estimating the spread from few blocks (t = 12.7 for K = 2, 3.18
# for K = 4). On log ratios, because a speedup is multiplicative (2x and 0.5x are equally
# far from 1x) and the spread of rates grows with the rate:
#
# - each draft block's ratio r_k is its median over the baseline interpolated at its place
#   (as above: a linear drift between neighbouring baseline blocks cancels);
# - the estimate is their geometric mean, exp(mean(log r_k));
# - the interval is exp(mean(log r) -/+ t(K-1) * sd(log r) / sqrt(K)), sd with K - 1.
#
# Each r_k carries the noise of its own trials and of the baseline blocks around it, so the
# spread of the r_k is the between-block spread the interval must cover; nothing is drawn
# at random. Neighbouring draft blocks share a baseline block, which correlates their
# ratios a little: the interval errs narrow by that much (measured, BENCHMARKS.md).
# The t quantiles are a table (below), not a library call, so any re-implementation reads
# the same numbers; math.log and math.exp are the platform's libm (client and server on
# one platform agree bit for bit; another libm may differ in the last bit).

# Student t's 0.975 quantile for 1..100 degrees of freedom (9 significant digits; from
# the closed form of the t distribution for integer degrees of freedom, Abramowitz and
# Stegun 26.7.3-4, solved by bisection; tests/schema/test_block_t.py recomputes it).
T_975 = (
    12.7062047, 4.30265273, 3.18244631, 2.77644511, 2.57058184, 2.44691185, 2.36462425,
    2.30600414, 2.26215716, 2.22813885, 2.20098516, 2.17881283, 2.16036866, 2.14478669,
    2.13144955, 2.1199053, 2.10981558, 2.10092204, 2.09302405, 2.08596345, 2.07961384,
    2.07387307, 2.06865761, 2.06389856, 2.05953855, 2.05552944, 2.05183052, 2.04840714,
    2.04522964, 2.04227246, 2.03951345, 2.03693334, 2.0345153, 2.03224451, 2.03010793,
    2.028094, 2.02619246, 2.02439416, 2.02269092, 2.02107539, 2.01954097, 2.0180817,
    2.0166922, 2.01536757, 2.01410339, 2.0128956, 2.01174051, 2.01063476, 2.00957524,
    2.00855911, 2.00758377, 2.00664681, 2.005746, 2.00487929, 2.00404478, 2.00324072,
    2.00246546, 2.00171748, 2.00099538, 2.00029782, 1.99962358, 1.99897152, 1.99834054,
    1.99772965, 1.99713791, 1.99656442, 1.99600835, 1.99546893, 1.99494542, 1.99443711,
    1.99394337, 1.99346357, 1.99299713, 1.9925435, 1.99210215, 1.99167261, 1.9912544,
    1.99084707, 1.99045021, 1.99006342, 1.98968632, 1.98931856, 1.98895978, 1.98860967,
    1.98826791, 1.98793421, 1.98760828, 1.98728986, 1.9869787, 1.98667454, 1.98637715,
    1.98608632, 1.98580181, 1.98552344, 1.985251, 1.98498431, 1.98472319, 1.98446745,
    1.98421695, 1.98397152,
)


def t_975(degrees_of_freedom: int) -> float:
    """Student t's 0.975 quantile; beyond the table its last entry (wider than the truth,
    and no shipped protocol has more than 100 blocks per config)."""
    if degrees_of_freedom < 1:
        raise ValueError("t quantile without degrees of freedom")
    return T_975[min(degrees_of_freedom, len(T_975)) - 1]


def blocked_ratio_t(numerator: Sequence[Block], denominator: Sequence[Block]) -> BlockedEstimate:
    """A draft's ratio to the baseline over blocks with the t interval on log block ratios
    (see above; 95 %). The CI is None with fewer than two draft blocks with values, and
    when a block ratio is 0 (a block that decoded nothing: no logarithm; the estimate is
    then 0). Blocks without values are ignored; a side with none raises ValueError."""
    return _t_over_blocks(_block_ratios(numerator, denominator).ratios)


def _t_over_blocks(ratios: Sequence[float]) -> BlockedEstimate:
    """The geometric mean of block ratios with Student's t on their logarithms."""
    if min(ratios) <= 0:
        return BlockedEstimate(0.0, None, None, tuple(ratios))
    logs = [math.log(r) for r in ratios]
    blocks = len(logs)
    centre = math.fsum(logs) / blocks
    if blocks < 2:
        return BlockedEstimate(math.exp(centre), None, None, tuple(ratios))
    spread = math.sqrt(math.fsum((v - centre) ** 2 for v in logs) / (blocks - 1))
    half = t_975(blocks - 1) * spread / math.sqrt(blocks)
    return BlockedEstimate(math.exp(centre), math.exp(centre - half), math.exp(centre + half),
                           tuple(ratios))


def blocked_ratio_t_over(numerators: Sequence[Sequence[Block]],
                         denominators: Sequence[Sequence[Block]]) -> BlockedEstimate:
    """``blocked_ratio_t`` over several parts measured in the same blocks (a prompt set's
    domains: each block answered every prompt once): block b's ratio is the geometric mean
    of the parts' ratios in block b, then the t interval over blocks as there. Every part
    must have the same draft blocks with values; a part whose baseline has none raises
    ValueError."""
    per_part = [_block_ratios(num, den).ratios for num, den in
                zip(numerators, denominators, strict=True)]
    if not per_part or len({len(r) for r in per_part}) != 1:
        raise ValueError("parts measured in different blocks")
    if min(min(r) for r in per_part) <= 0:
        return _t_over_blocks([0.0] * len(per_part[0]))
    return _t_over_blocks([math.exp(math.fsum(math.log(r[b]) for r in per_part) / len(per_part))
                           for b in range(len(per_part[0]))])


def block_drift(medians: Sequence[float]) -> float | None:
    """How far repeated blocks of one config disagree: max / min of their medians, minus 1
    (0.3: the fastest block ran 30 % faster than the slowest); None for fewer than two."""
    present = [m for m in medians if m > 0]
    if len(present) < 2:
        return None
    return max(present) / min(present) - 1.0
