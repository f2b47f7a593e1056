"""Blocks, the unit that varies (pure): each draft block's ratio to the baseline at its place.

A run measures each config in several blocks (a block: consecutive trials of one config,
after its own engine start or warm-up). The machine's speed drifts between blocks far more
than between the trials of one block (real-engine.md: a baseline fell from 47.6 to 26.0
tok/s within minutes), so an interval over trials alone is too narrow. Each draft block is
compared with the baseline *at its place in the run*: the baseline blocks' medians
interpolated linearly at the draft block's centre between the nearest baseline block before
and after it (the nearest one at either end), so that a linear drift between neighbouring
baseline blocks cancels.

A block's centre is its place in the run: the mean start time of its trials (seconds on the
client's clock, ``Trial.started_s``) when every trial of the run carries one, else the mean
run position of its trials (``specschema.blocks.trial_blocks``). A drift is a change over
time: with times, a draft block whose trials ran twice as long as the baseline's sits where
it ran, not where its trial count puts it; results without times keep their numbers.

The estimators over these ratios are ``specschema.block_bootstrap`` (median of block ratios,
two-stage bootstrap) and ``specschema.block_t`` (geometric mean, Student's t).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from specschema.stats import median


@dataclass(frozen=True)
class Block:
    """One block's measurements: its centre (its place in the run: mean start time or mean
    run position of its trials) and its values (rates)."""

    centre: float
    values: tuple[float, ...]


@dataclass(frozen=True)
class BlockedEstimate:
    ratio: float
    ci_low: float | None
    ci_high: float | None
    block_ratios: tuple[float, ...]


Place = tuple[int, int, float]  # two baseline blocks and the weight of the second


def neighbours(centre: float, centres: Sequence[float]) -> Place:
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


@dataclass(frozen=True)
class BlockRatios:
    """The blocks with values, the baseline sorted by centre, each draft block's neighbours
    among the baseline blocks, and each draft block's ratio to the baseline at its place."""

    num: list[Block]
    den: list[Block]
    where: list[Place]
    ratios: list[float]


def reference(medians: Sequence[float], at: Place) -> float:
    """The baseline at a place: its neighbours' medians interpolated."""
    i, j, w = at
    return medians[i] if w == 0.0 else medians[i] * (1.0 - w) + medians[j] * w


def block_ratios(numerator: Sequence[Block], denominator: Sequence[Block]) -> BlockRatios:
    """Each draft block with values over the baseline at its place; blocks without values
    are ignored; a side with none, or a baseline of 0 at a place, raises ValueError."""
    num = [b for b in numerator if b.values]
    den = sorted((b for b in denominator if b.values), key=lambda b: b.centre)
    if not num or not den:
        raise ValueError("blocked ratio without values on one side")
    centres = [b.centre for b in den]
    den_medians = [median(b.values) for b in den]
    where = [neighbours(b.centre, centres) for b in num]
    ratios: list[float] = []
    for block, at in zip(num, where, strict=True):
        ref = reference(den_medians, at)
        if ref <= 0:
            raise ValueError("blocked ratio with a zero baseline")
        ratios.append(median(block.values) / ref)
    return BlockRatios(num, den, where, ratios)


def block_drift(medians: Sequence[float]) -> float | None:
    """How far repeated blocks of one config disagree: max / min of their medians, minus 1
    (0.3: the fastest block ran 30 % faster than the slowest); None for fewer than two."""
    present = [m for m in medians if m > 0]
    if len(present) < 2:
        return None
    return max(present) / min(present) - 1.0
