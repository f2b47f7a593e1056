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
from collections.abc import Sequence
from dataclasses import dataclass

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0x5BEC_BE4C
CONFIDENCE = 0.95
_MASK64 = (1 << 64) - 1


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
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
    rng = _SplitMix64(seed)
    ratios: list[float] = []
    for _ in range(resamples):
        num = _resample_median(numerator, rng)
        den = _resample_median(denominator, rng)
        if den > 0:
            ratios.append(num / den)
    alpha = (1.0 - confidence) / 2.0
    return RatioEstimate(ratio, percentile(ratios, alpha), percentile(ratios, 1.0 - alpha))
