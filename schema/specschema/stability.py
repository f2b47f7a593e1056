"""The baseline's stability (pure): whether the machine changed under a run in a way the
design does not correct. The rule behind the verdict ``unstable``; client and server both
call ``baseline_stability``.

A bracketed run measures the baseline in blocks around the drafts' blocks and compares each
draft block with the baseline interpolated at its place in the run
(``specschema.block_ratios``): a steady drift, however large, cancels there. What it cannot
correct is a baseline block that sits *off the line* between its neighbours: the speed
stepped, or changed and changed back, between two baseline blocks, so the draft blocks
beside it were compared with a baseline that was not there. A baseline that merely
drifted (the first block 2.5 times the last) measures fine; one with a block 30 % below
the line through its neighbours does not.

Rule ``off_line`` (runs whose trials say when they started, ``Trial.started_s``): for every
baseline block with a neighbour on both sides, its *residual* (its median decode rate over
the line between its neighbours' medians at its time, minus 1) and its *load change* (its
mean 1-minute load average minus the line between its neighbours' loads; known when every
trial of the three blocks recorded ``Trial.load_1m``). The run is unstable when a block is
off its line by more than ``OFF_LINE`` whatever the load, or by more than
``OFF_LINE_WITH_LOAD`` while its load moved off its neighbours' line by ``LOAD_MOVED`` or
more (one more busy process): then the machine changed under the run, and the load says so.
Calibrated in simulation on the full protocol's shape (bench/stability.py: false alarms
under a steady drift and under steady noise, misses under a load that steps in the middle
of a run; BENCHMARKS.md "Stability rule").

Rule ``block_drift`` (runs without times: every result before them): the baseline's block
medians disagree by more than ``MAX_BASELINE_DRIFT`` (the fastest block over the slowest,
minus 1). It flags a steady drift that the design cancels, and it is kept only so that
those results keep their verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from specschema.block_ratios import block_drift, neighbours, reference
from specschema.blocks import block_loads, decode_rates, has_blocks, trial_blocks
from specschema.models import ConfigResult
from specschema.stats import median

# The older rule's bound: baseline block medians within a factor 1.5 of each other.
MAX_BASELINE_DRIFT = 0.5
# The off-line rule's bounds (module docstring; bench/stability.py calibrates them).
OFF_LINE = 0.30
OFF_LINE_WITH_LOAD = 0.08
LOAD_MOVED = 0.5

Rule = Literal["off_line", "block_drift"]


@dataclass(frozen=True)
class Bounds:
    """The off-line rule's bounds (the defaults are the rule; the bench varies them)."""

    off_line: float = OFF_LINE
    off_line_with_load: float = OFF_LINE_WITH_LOAD
    load_moved: float = LOAD_MOVED


@dataclass(frozen=True)
class OffLine:
    """One interior baseline block against the line between its neighbours."""

    block: int  # its place among the baseline's blocks with values (0: the first)
    residual: float  # its median over the line at its time, minus 1 (-0.3: 30 % below)
    load_change: float | None  # its load minus the line between its neighbours' loads

    def breaks(self, bounds: Bounds = Bounds()) -> bool:
        """Whether this block alone makes the run unstable."""
        off = abs(self.residual)
        if off > bounds.off_line:
            return True
        return (off > bounds.off_line_with_load and self.load_change is not None
                and abs(self.load_change) >= bounds.load_moved)


@dataclass(frozen=True)
class Stability:
    """What the baseline's blocks say about the run, by the rule that applies to it."""

    rule: Rule
    unstable: bool
    drift: float | None  # max / min of the baseline's block medians, minus 1
    worst: OffLine | None = None  # the interior block farthest off its line (off_line)


def off_line_blocks(centres: Sequence[float], medians: Sequence[float],
                    loads: Sequence[float | None]) -> list[OffLine]:
    """Each interior block's residual and load change; the blocks in run order (centres
    ascending, medians positive), ``loads[i]`` None where block i has no load."""
    found: list[OffLine] = []
    for i in range(1, len(centres) - 1):
        around = (centres[i - 1], centres[i + 1])
        place = neighbours(centres[i], around)
        line = reference((medians[i - 1], medians[i + 1]), place)
        low, high = loads[i - 1], loads[i + 1]
        load = loads[i]
        change = (None if load is None or low is None or high is None
                  else load - reference((low, high), place))
        found.append(OffLine(i, medians[i] / line - 1.0, change))
    return found


def judge(blocks: Sequence[OffLine], bounds: Bounds = Bounds()) -> tuple[bool, OffLine | None]:
    """Whether any block breaks the bounds, and the block to name: the first that breaks
    them, else the one farthest off its line (None without interior blocks)."""
    breaking = [b for b in blocks if b.breaks(bounds)]
    if breaking:
        return True, max(breaking, key=lambda b: abs(b.residual))
    return False, max(blocks, key=lambda b: abs(b.residual), default=None)


def baseline_stability(baseline: ConfigResult | None, by_time: bool,
                       bounds: Bounds = Bounds()) -> Stability | None:
    """The run's stability from its baseline's blocks: the off-line rule when the run is
    timed (``blocks.timed``), else the block-drift rule. None without blocks or with fewer
    than two baseline blocks with values (nothing to compare)."""
    if baseline is None or not has_blocks(baseline.trials):
        return None
    blocks = trial_blocks(baseline.trials, decode_rates(baseline.trials), by_time)
    if not by_time:
        drift = block_drift([median(b.values) for b in blocks if b.values])
        return (None if drift is None
                else Stability("block_drift", drift > MAX_BASELINE_DRIFT, drift))
    loads = block_loads(baseline.trials)
    kept = [(b, load) for b, load in zip(blocks, loads, strict=True) if b.values]
    medians = [median(b.values) for b, _ in kept]
    drift = block_drift(medians)
    if drift is None:
        return None
    kept.sort(key=lambda pair: pair[0].centre)
    if min(medians) <= 0:  # a block that decoded nothing: no line to be on
        return Stability("off_line", True, drift)
    unstable, worst = judge(off_line_blocks([b.centre for b, _ in kept],
                                            [median(b.values) for b, _ in kept],
                                            [load for _, load in kept]), bounds)
    return Stability("off_line", unstable, drift, worst)
