"""What a user would measure: a predicted speedup's interval widened by the noise of a
measurement (pure).

A prediction's own uncertainty (resampling its acceptance, its cost curve, its draft
step) says where the speedup is; a run that measures it lands off that by the run's own
noise: decode rates move between the blocks of a run as the machine's load moves, and a
measured speedup is a ratio of two such means. On the advisor bench (one request per kind
of work per block, two candidate blocks against three baseline ones) a request's rate
moved by 25-53 % (log-sd) between blocks, while the prediction's own interval was a
third of that: it covered 43-58 % of the measured cells at a nominal 90 %.

The noise of one measured speedup, from the rates it is the ratio of, n_c of the
candidate and n_b of the baseline, each with the variance v of their logs:

    s = sqrt(v_c / n_c + v_b / n_b)          (``measured_spread``: the log-sd of the ratio)

The crowd's measured rows carry it (each row's trials), so a prediction takes the median
across contributor units of theirs as the spread a run like theirs has, and draws each of
its bootstrap predictions times exp(s z), z standard normal (``measured_interval``): the
interval is then the one a user's run is expected to fall in, not the one the speedup's
expectation is.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

__all__ = ["log_variance", "measured_interval", "measured_spread", "moments_variance"]


def log_variance(values: Sequence[float]) -> float:
    """The sample variance of the values' logs (0 for fewer than two)."""
    if len(values) < 2:
        return 0.0
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    return sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)


def moments_variance(count: int, total: float, total_sq: float) -> float:
    """The sample variance from a count, a sum and a sum of squares (what a database sums
    without reading the rows); 0 for fewer than two, never below 0 (rounding)."""
    if count < 2:
        return 0.0
    return max((total_sq - total * total / count) / (count - 1), 0.0)


def measured_spread(var_candidate: float, n_candidate: int, var_baseline: float,
                    n_baseline: int) -> float:
    """The log-sd of a measured speedup: the ratio of the mean of ``n_candidate`` rates
    whose logs vary by ``var_candidate`` over the mean of ``n_baseline`` rates whose logs
    vary by ``var_baseline`` (module docstring)."""
    if n_candidate < 1 or n_baseline < 1 or var_candidate < 0 or var_baseline < 0:
        raise ValueError("a count below one or a negative variance")
    return math.sqrt(var_candidate / n_candidate + var_baseline / n_baseline)


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def measured_interval(draws: Sequence[float], spread: float, level: float,
                      rng: random.Random) -> tuple[float, float]:
    """The central ``level`` interval of the ``draws`` (bootstrap predictions) each times
    exp(``spread`` z), z drawn from ``rng``: where a run whose measurement has that log-sd
    is expected to land. ``spread`` 0 leaves the draws as they are (and draws nothing)."""
    if not draws:
        raise ValueError("an interval of no draws")
    if spread < 0:
        raise ValueError("a negative spread")
    noisy = [d * math.exp(spread * rng.gauss(0.0, 1.0)) for d in draws] if spread else \
        list(draws)
    ordered = sorted(noisy)
    tail = (1 - level) / 2
    return _quantile(ordered, tail), _quantile(ordered, 1 - tail)
