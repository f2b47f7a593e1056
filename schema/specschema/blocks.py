"""A run's blocks, read from its trials (pure): the unit the interval resamples, and the
stability rule of the baseline.

A block is a run of one config's consecutive trials after its own warm-up (and, on
llama-server, its own engine start); ``Trial.block`` numbers them in run order. A protocol
with an interleaved block order (``Protocol.order``) measures every config in two blocks
or more, so the baseline's blocks are repeated measurements of the same thing at other
moments of the run: how far they disagree says how much the machine changed under it.

Rule (``unstable``): when the baseline's block medians of decode tok/s disagree by more
than ``MAX_BASELINE_DRIFT`` (the fastest block over the slowest, minus 1), no ratio of that
run is a measurement of speculation, whatever its counters say: the drafts' verdict is
``unstable`` (``specschema.capability``). The bound is wide enough for an honest run on a
shared machine whose load changes (linear drift is cancelled by the interpolation in
``specschema.stats.blocked_ratio``) and narrow enough to catch a run whose baseline lost a
third of its speed between blocks. It is a judgement, not calibrated: on the real
llama-server on a busy machine it flagged 9 of 13 runs and did not pick the runs whose
estimates were farthest from the others (BENCHMARKS.md, "Interval calibration"). It is
shared by every protocol version, so changing it would change stored results' verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence

from specschema.block_ratios import Block, block_drift
from specschema.models import ConfigResult, Trial
from specschema.stats import median

# Baseline block medians within a factor 1.5 of each other (docs/aggregation.md).
MAX_BASELINE_DRIFT = 0.5


def has_blocks(trials: Sequence[Trial]) -> bool:
    """Whether every trial says its block (clients before blocks leave it null)."""
    return bool(trials) and all(t.block is not None for t in trials)


def trial_blocks(trials: Sequence[Trial], values: Sequence[float | None]) -> list[Block]:
    """The trials' values grouped by block, in block order; ``values[i]`` belongs to
    ``trials[i]`` (None: the trial has no value, e.g. no eval time). The centre of a block
    is the mean run position of its trials (with or without a value)."""
    positions: dict[int, list[int]] = {}
    found: dict[int, list[float]] = {}
    for trial, value in zip(trials, values, strict=True):
        block = trial.block if trial.block is not None else -1
        positions.setdefault(block, []).append(trial.position)
        if value is not None:
            found.setdefault(block, []).append(value)
    return [Block(sum(p) / len(p), tuple(found.get(b, ()))) for b, p in sorted(positions.items())]


def decode_rates(trials: Sequence[Trial]) -> list[float | None]:
    """Each trial's decode tok/s (``specschema.stats.decode_tps``), None without eval time."""
    return [t.eval_count / t.eval_duration_ns * 1e9 if t.eval_duration_ns > 0 else None
            for t in trials]


def baseline_drift(baseline: ConfigResult | None) -> float | None:
    """The baseline's block drift (``stats.block_drift`` of its block medians of decode
    tok/s); None without blocks or with fewer than two."""
    if baseline is None or not has_blocks(baseline.trials):
        return None
    blocks = trial_blocks(baseline.trials, decode_rates(baseline.trials))
    return block_drift([median(b.values) for b in blocks if b.values])


def is_unstable(drift: float | None) -> bool:
    return drift is not None and drift > MAX_BASELINE_DRIFT
