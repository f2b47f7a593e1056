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

The model itself misses too, and not by a run's noise: on the advisor bench's finer run
(the noise above down to 1-3 %) the probe priced a round 5-12 % off what the runs spent,
one way on one machine and the other way on another, and the interval covered 24-65 %.
Where contributors both probed their machine and ran a drafter that costs nothing, each
such run's miss is known: r = log(measured / predicted from its own acceptance and cost
curve), which holds the model's miss on that machine and the run's own noise, the two
things a user's run will see. With n such misses r_1..r_n (one per contributor unit),
taken as centred on the prediction (the point is not moved by them),

    s_model = sqrt((r_1^2 + ... + r_n^2) / n),

and a new machine's miss over s_model follows Student's t with n degrees of freedom (for
normal misses this is exact: n r^2 / sigma^2 is chi-square with n), so a few contributors
widen the interval much more than many (``model_error``). The noise each draw is multiplied
by is then exp(s t), s the larger of s_model and the measured spread (a run's noise is
never less than what it is measured to be).

What a machine's own cost ratio will be is drawn the same way where contributors read one
each (a draft model's pass in its plain steps, ``predict.drafting_factor``): on the advisor
bench one stand-in's pass cost 1.45 steps where three others' read 1.00-1.08, and on
another CPU two read 1.1-1.4 and 2.0-2.3 where two read 1.0-1.1. A bootstrap of their
median says where the median is, not where a machine none of them came from lands: that
is the median times exp(s sqrt(1 + 1/n) t), s the sample log-sd of the n readings and t
Student's t with n - 1 degrees of freedom, the normal-theory prediction interval of one
more reading (``new_machine_spread``, ``new_machine_draw``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ModelError", "log_variance", "measured_interval", "measured_spread",
           "model_error", "moments_variance", "new_machine_draw", "new_machine_spread"]


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


@dataclass(frozen=True)
class ModelError:
    """The log-sd of a user's measured speedup beside the prediction and the degrees of
    freedom it is known with (None: taken as exact, the noise normal)."""

    scale: float
    dof: int | None


def model_error(residuals: Sequence[float], spread: float, at_least: int = 1) -> ModelError:
    """From the contributors' misses (module docstring) and the measured spread: the spread
    alone (normal) when fewer than ``at_least`` misses are known (a deployment's minimum of
    contributors: one contributor's misses do not set everyone's interval alone)."""
    if spread < 0:
        raise ValueError("a negative spread")
    if not residuals or len(residuals) < at_least:
        return ModelError(spread, None)
    rms = math.sqrt(sum(r * r for r in residuals) / len(residuals))
    return ModelError(max(rms, spread), len(residuals))


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# A draw's log noise is held within this: a t with few degrees of freedom has tails that
# overflow exp(), and a factor of e^40 lies far outside any central interval anyway.
LOG_NOISE_MAX = 40.0


def _t(rng: random.Random, dof: int | None) -> float:
    """A draw of Student's t with ``dof`` degrees of freedom (None: standard normal)."""
    z = rng.gauss(0.0, 1.0)
    return z if dof is None else z / math.sqrt(rng.gammavariate(dof / 2, 2.0) / dof)


def _noise(spread: float, rng: random.Random, dof: int | None) -> float:
    return math.exp(min(max(spread * _t(rng, dof), -LOG_NOISE_MAX), LOG_NOISE_MAX))


def measured_interval(draws: Sequence[float], spread: float, level: float,
                      rng: random.Random, dof: int | None = None) -> tuple[float, float]:
    """The central ``level`` interval of the ``draws`` (bootstrap predictions) each times
    exp(``spread`` t), t drawn from ``rng`` (standard normal, or Student's t with ``dof``
    degrees of freedom when the spread is itself an estimate from that many misses,
    ``model_error``): where a run whose measurement has that log-sd is expected to land.
    ``spread`` 0 leaves the draws as they are (and draws nothing)."""
    if not draws:
        raise ValueError("an interval of no draws")
    if spread < 0:
        raise ValueError("a negative spread")
    if dof is not None and dof < 1:
        raise ValueError("degrees of freedom below one")
    noisy = [d * _noise(spread, rng, dof) for d in draws] if spread else \
        list(draws)
    ordered = sorted(noisy)
    tail = (1 - level) / 2
    return _quantile(ordered, tail), _quantile(ordered, 1 - tail)


def new_machine_spread(values: Sequence[float]) -> ModelError:
    """The log-sd and degrees of freedom one more reading of a cost ratio is drawn with
    beside the median of ``values`` (one per contributor unit): s sqrt(1 + 1/n) and n - 1
    (module docstring); none for fewer than two values (no spread is known)."""
    if any(v <= 0 for v in values):
        raise ValueError("a cost ratio that is not positive")
    if len(values) < 2:
        return ModelError(0.0, None)
    return ModelError(math.sqrt(log_variance(values) * (1 + 1 / len(values))),
                      len(values) - 1)


def new_machine_draw(center: float, spread: ModelError, rng: random.Random) -> float:
    """One draw of what a machine none of the readings came from would read: ``center``
    (their median) times exp(s t), ``spread`` from ``new_machine_spread``."""
    if center <= 0:
        raise ValueError("a cost ratio that is not positive")
    return center * _noise(spread.scale, rng, spread.dof) if spread.scale else center
