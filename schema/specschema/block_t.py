"""The t interval over blocks (pure): protocols with ``interval: "block_t"``.

The bootstrap (``specschema.block_bootstrap``) cannot be honest with two draft blocks:
resampling two blocks only ever sees their own disagreement, so when two blocks happen to
agree the interval is narrow although the next run may read 30 % apart (BENCHMARKS.md,
interval calibration). With K draft blocks the standard small-sample answer is Student's t
on K - 1 degrees of freedom, which pays for estimating the spread from few blocks (t = 12.7
for K = 2, 3.18 for K = 4). On log ratios, because a speedup is multiplicative (2x and 0.5x
are equally far from 1x) and the spread of rates grows with the rate:

- each draft block's ratio r_k is its median over the baseline interpolated at its place
  (``specschema.block_ratios``: a linear drift between neighbouring baseline blocks
  cancels);
- the estimate is their geometric mean, exp(mean(log r_k));
- the interval is exp(mean(log r) -/+ t(K-1) * sd(log r) / sqrt(K)), sd with K - 1.

Each r_k carries the noise of its own trials and of the baseline blocks around it, so the
spread of the r_k is the between-block spread the interval must cover; nothing is drawn at
random. Neighbouring draft blocks share a baseline block, which correlates their ratios: in
a run whose trials carry times the interval counts that too (``shared_baseline_variance``);
without, it errs narrow by that much (measured, BENCHMARKS.md). It is a
*within-run* interval: it covers what varies between the blocks of this run, not what
differs between this run and another on a machine under another load.
The t quantiles are a table (below), not a library call, so any re-implementation reads
the same numbers; math.log and math.exp are the platform's libm (client and server on one
platform agree bit for bit; another libm may differ in the last bit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from specschema.block_ratios import Block, BlockedEstimate, BlockRatios, block_ratios
from specschema.stats import median

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


def blocked_ratio_t(numerator: Sequence[Block], denominator: Sequence[Block],
                    shared_baseline: bool = False) -> BlockedEstimate:
    """A draft's ratio to the baseline over blocks with the t interval on log block ratios
    (see above; 95 %). The CI is None with fewer than two draft blocks with values, and
    when a block ratio is 0 (a block that decoded nothing: no logarithm; the estimate is
    then 0). Blocks without values are ignored; a side with none raises ValueError.
    ``shared_baseline`` (runs placed in time): the interval also counts the baseline
    blocks the draft blocks share (``shared_baseline_variance``)."""
    found = block_ratios(numerator, denominator)
    return _t_over_blocks(found.ratios,
                          shared_baseline_variance(found) if shared_baseline else (0.0, 0))


# --- the baseline blocks the draft blocks share (runs placed in time) ----------------------
#
# A draft's K block ratios lean on the same few baseline blocks (4 draft blocks on 5
# baseline blocks in the current protocols), so a baseline block's error enters several of
# them alike: the spread of the ratios does not see it, and the t interval above covered
# the run's own speedup 91-92 % of the time in simulation instead of 95 % (BENCHMARKS.md,
# "Stability rule and within-run interval"). With draft block k's reference sum_b a_kb m_b
# (its two neighbours' interpolation weights) and the baseline blocks' log errors of
# variance s_B^2, the variance of the mean log ratio is
#     s^2 / K + s_B^2 * sum_b ((sum_k a_kb)^2 - sum_k a_kb^2) / (K (K - 1))
# where s^2 is the ratios' sample variance (it already holds each block's own share).
# s_B^2 is read from the baseline itself: each interior baseline block's log distance from
# the line between its neighbours, squared, over 1 + (1 - w)^2 + w^2 (the variance of that
# distance in units of s_B^2), averaged over the m interior blocks. The t quantile's degrees
# of freedom are Welch-Satterthwaite's for the two parts (never fewer than K - 1). In
# simulation: 95.9-97.1 % for runs that are quiet, drift steadily or carry a steady load,
# intervals 9-19 % wider. Runs without times keep the interval above, bit for bit.


def shared_baseline_variance(found: BlockRatios) -> tuple[float, int]:
    """The shared baseline's part of the variance of the mean log block ratio (above), and
    the degrees of freedom of its estimate (the interior baseline blocks); (0.0, 0) with
    fewer than three baseline blocks or fewer than two draft blocks."""
    den, where, blocks = found.den, found.where, len(found.ratios)
    spread, interior = _baseline_spread(tuple(den))
    if not interior or blocks < 2:
        return 0.0, 0
    weights = [[0.0, 0.0] for _ in den]  # per baseline block: sum of a_kb, sum of a_kb^2
    for i, j, w in where:
        for b, a in ((i, 1.0 - w), (j, w)):
            if a:
                weights[b][0] += a
                weights[b][1] += a * a
    shared = math.fsum(total * total - squares for total, squares in weights)
    return spread * shared / (blocks * (blocks - 1)), interior


@lru_cache(maxsize=64)
def _baseline_spread(den: tuple[Block, ...]) -> tuple[float, int]:
    """s_B^2 from the baseline's interior blocks (above) and how many there are; (0.0, 0)
    with fewer than three blocks or a block that decoded nothing. Cached: every draft of a
    run, and both of its speedups, read the same baseline."""
    medians = [median(b.values) for b in den]
    if len(den) < 3 or min(medians) <= 0:
        return 0.0, 0
    scaled: list[float] = []
    for i in range(1, len(den) - 1):
        before, after = den[i - 1].centre, den[i + 1].centre
        w = (den[i].centre - before) / (after - before) if after > before else 0.5
        line = medians[i - 1] * (1.0 - w) + medians[i + 1] * w
        scaled.append(math.log(medians[i] / line) ** 2 / (1.0 + (1.0 - w) ** 2 + w ** 2))
    return math.fsum(scaled) / len(scaled), len(scaled)


def _t_over_blocks(ratios: Sequence[float],
                   shared: tuple[float, int] = (0.0, 0)) -> BlockedEstimate:
    """The geometric mean of block ratios with Student's t on their logarithms; ``shared``:
    the shared baseline's variance and its degrees of freedom (none: the plain t)."""
    if min(ratios) <= 0:
        return BlockedEstimate(0.0, None, None, tuple(ratios))
    logs = [math.log(r) for r in ratios]
    blocks = len(logs)
    centre = math.fsum(logs) / blocks
    if blocks < 2:
        return BlockedEstimate(math.exp(centre), None, None, tuple(ratios))
    spread = math.sqrt(math.fsum((v - centre) ** 2 for v in logs) / (blocks - 1))
    extra, extra_df = shared
    if extra <= 0.0 or extra_df < 1:
        half = t_975(blocks - 1) * spread / math.sqrt(blocks)
    else:
        own = spread * spread / blocks
        variance = own + extra
        parts = own * own / (blocks - 1) + extra * extra / extra_df
        df = max(blocks - 1, int(variance * variance / parts))
        half = t_975(df) * math.sqrt(variance)
    return BlockedEstimate(math.exp(centre), math.exp(centre - half), math.exp(centre + half),
                           tuple(ratios))


def blocked_ratio_t_over(numerators: Sequence[Sequence[Block]],
                         denominators: Sequence[Sequence[Block]]) -> BlockedEstimate:
    """``blocked_ratio_t`` over several parts measured in the same blocks (a prompt set's
    domains: each block answered every prompt once): block b's ratio is the geometric mean
    of the parts' ratios in block b, then the t interval over blocks as there. Every part
    must have the same draft blocks with values; a part whose baseline has none raises
    ValueError."""
    per_part = [block_ratios(num, den).ratios for num, den in
                zip(numerators, denominators, strict=True)]
    if not per_part or len({len(r) for r in per_part}) != 1:
        raise ValueError("parts measured in different blocks")
    if min(min(r) for r in per_part) <= 0:
        return _t_over_blocks([0.0] * len(per_part[0]))
    return _t_over_blocks([math.exp(math.fsum(math.log(r[b]) for r in per_part) / len(per_part))
                           for b in range(len(per_part[0]))])
