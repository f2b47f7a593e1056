"""A run's blocks, read from its trials (pure): the unit the interval works over.

A block is a run of one config's consecutive trials after its own warm-up (and, on
llama-server, its own engine start); ``Trial.block`` numbers them in run order. A protocol
with an interleaved block order (``Protocol.order``) measures every config in two blocks
or more, so the baseline's blocks are repeated measurements of the same thing at other
moments of the run: whether they sit on a line says whether the machine changed under it
in a way the design cannot correct (``specschema.stability``, the verdict ``unstable``).
A block's place in the run is a time when every trial says when it started, else a run
position (``trial_blocks``).
"""

from __future__ import annotations

from collections.abc import Sequence

from specschema.block_ratios import Block, block_drift
from specschema.models import ConfigResult, Trial
from specschema.stats import median


def has_blocks(trials: Sequence[Trial]) -> bool:
    """Whether every trial says its block (clients before blocks leave it null)."""
    return bool(trials) and all(t.block is not None for t in trials)


def timed(configs: Sequence[ConfigResult]) -> bool:
    """Whether every trial of the run says when it started (``Trial.started_s``), the times
    rising with the run positions: then a block's place in the run is a time, else a run
    position (clients before times; times out of order are no clock's)."""
    first = next((c.trials[0] for c in configs if c.trials), None)
    if first is None or first.started_s is None:  # a result from before times: at once
        return False
    placed = sorted((t.position, t.started_s) for c in configs for t in c.trials)
    if any(started is None for _, started in placed):
        return False
    return all(a[1] < b[1] for a, b in zip(placed, placed[1:], strict=False))  # type: ignore[operator]


def trial_blocks(trials: Sequence[Trial], values: Sequence[float | None],
                 by_time: bool = False) -> list[Block]:
    """The trials' values grouped by block, in block order; ``values[i]`` belongs to
    ``trials[i]`` (None: the trial has no value, e.g. no eval time). The centre of a block
    is the mean place of its trials (with or without a value): the middle of each request in
    seconds with ``by_time`` (``timed``: every trial of the run has a time), else the run
    position, as every result before times has it."""
    places: dict[int, list[float]] = {}
    found: dict[int, list[float]] = {}
    for trial, value in zip(trials, values, strict=True):
        block = trial.block if trial.block is not None else -1
        places.setdefault(block, []).append(trial.position)
        if value is not None:
            found.setdefault(block, []).append(value)
    if by_time:  # the same blocks, each trial at the middle of its request
        places = {}
        for trial in trials:
            started = trial.started_s
            places.setdefault(trial.block if trial.block is not None else -1, []).append(
                started + trial.wall_s / 2.0 if started is not None else trial.position)
    return [Block(sum(p) / len(p), tuple(found.get(b, ()))) for b, p in sorted(places.items())]


def block_loads(trials: Sequence[Trial]) -> list[float | None]:
    """Each block's mean 1-minute load average (``Trial.load_1m``), in block order; None for
    a block where any trial lacks one."""
    loads: dict[int, list[float | None]] = {}
    for trial in trials:
        loads.setdefault(trial.block if trial.block is not None else -1, []).append(trial.load_1m)
    out: list[float | None] = []
    for _, found in sorted(loads.items()):
        present = [v for v in found if v is not None]
        out.append(sum(present) / len(present) if len(present) == len(found) else None)
    return out


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
