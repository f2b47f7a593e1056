"""The two-stage block bootstrap (pure): a draft's ratio to the baseline over blocks, the
interval method ``block_bootstrap`` of the first bracketed protocols.

- each draft block's ratio is its median over the baseline at its place in the run
  (``specschema.block_ratios``);
- the point estimate is the median of the draft blocks' ratios;
- the interval is a two-stage percentile bootstrap: per resample, every baseline block's
  trials are resampled within the block (the baseline is the reference curve: its blocks
  keep their places), then the draft's blocks are drawn with replacement, and each drawn
  block's trials are resampled within it. Resampling both levels over-states the variance
  a little (the within-block spread is counted twice), which errs towards wide intervals.

The draws come from the same splitmix64 generator and seed as ``stats.ratio_of_medians``,
in this order per resample: for each baseline block in order, one ``below(n)`` per trial;
then one ``below(K)`` per draft block (which blocks are drawn); then for each drawn block
in draw order, one ``below(n)`` per trial. Any re-implementation that follows the order
reproduces the interval bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from specschema.block_ratios import Block, BlockedEstimate, Place, block_ratios, reference
from specschema.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    SplitMix64,
    median,
    median_of_sorted,
    percentile,
)


@lru_cache(maxsize=256)
def _blocked_draws(
    den_sizes: tuple[int, ...], num_sizes: tuple[int, ...], resamples: int, seed: int
) -> tuple[tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, tuple[int, ...]], ...]], ...]:
    """Per resample: the indices drawn within each baseline block, then (draft block,
    indices drawn within it) for each drawn draft block (the documented order)."""
    rng = SplitMix64(seed)
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
    found = block_ratios(numerator, denominator)
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
                              where: Sequence[Place],
                              plan: _Plan) -> list[float]:
    """The definition: per resample, the drawn medians, the references, the drawn ratios
    and their median."""
    estimates: list[float] = []
    for den_draw, num_draw in _blocked_draws(*plan):
        medians = [median_of_sorted(sorted([values[k] for k in drawn]))
                   for values, drawn in zip(den_values, den_draw, strict=True)]
        drawn_ratios: list[float] = []
        for pick, drawn in num_draw:
            ref = reference(medians, where[pick])
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
                            where: Sequence[Place],
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


