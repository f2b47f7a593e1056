"""Shared statistics against values computed by hand."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specschema import stats


def test_median_odd_and_even() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_mean_stdev_cv_by_hand() -> None:
    values = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    assert stats.mean(values) == 5.0
    # sum of squared deviations = 32, n - 1 = 7
    assert stats.sample_stdev(values) == pytest.approx(math.sqrt(32 / 7))
    assert stats.coefficient_of_variation(values) == pytest.approx(math.sqrt(32 / 7) / 5)


def test_stdev_needs_two_values() -> None:
    assert stats.sample_stdev([1.0]) is None
    assert stats.coefficient_of_variation([1.0]) is None


def test_percentile_linear_interpolation() -> None:
    assert stats.percentile([1.0, 2.0, 3.0, 4.0], 0.25) == 1.75
    assert stats.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert stats.percentile([10.0], 0.9) == 10.0


def test_decode_tps_is_ollamas_formula() -> None:
    assert stats.decode_tps(200, 50_000_000_000) == 4.0
    assert stats.decode_tps(18, 52_479_709) == pytest.approx(342.99, abs=0.01)
    assert stats.decode_tps(10, 0) is None


def test_ratio_ci_by_hand_from_order_statistics() -> None:
    # The numerator is constant 2; the bootstrap median of [1, 2, 4] is 1, 2 or 4, and
    # P(median == 1) = P(median == 4) = 7/27 > 2.5 %, so the 95 % interval is [2/4, 2/1].
    estimate = stats.ratio_of_medians([2.0, 2.0, 2.0], [1.0, 2.0, 4.0])
    assert estimate.ratio == 1.0
    assert estimate.ci_low == 0.5
    assert estimate.ci_high == 2.0


def test_ratio_ci_constant_samples_collapse() -> None:
    estimate = stats.ratio_of_medians([3.0] * 5, [4.0] * 5)
    assert (estimate.ratio, estimate.ci_low, estimate.ci_high) == (0.75, 0.75, 0.75)


def test_ratio_ci_is_reproducible_and_seeded() -> None:
    num = [3.8, 3.9, 3.7, 4.1, 3.6]
    den = [4.0, 4.2, 3.9, 4.0, 4.1]
    first = stats.ratio_of_medians(num, den)
    assert first == stats.ratio_of_medians(num, den)
    other_seed = stats.ratio_of_medians(num, den, seed=1)
    assert other_seed.ratio == first.ratio


def test_ratio_without_spread_information() -> None:
    estimate = stats.ratio_of_medians([2.0], [1.0, 3.0])
    assert estimate.ratio == 1.0
    assert estimate.ci_low is None and estimate.ci_high is None
    with pytest.raises(ValueError):
        stats.ratio_of_medians([1.0], [0.0])


@given(
    st.lists(st.floats(0.1, 1000), min_size=2, max_size=9),
    st.lists(st.floats(0.1, 1000), min_size=2, max_size=9),
)
def test_ratio_ci_brackets_plausible_range(num: list[float], den: list[float]) -> None:
    estimate = stats.ratio_of_medians(num, den, resamples=200)
    assert estimate.ci_low is not None and estimate.ci_high is not None
    assert estimate.ci_low <= estimate.ci_high
    assert min(num) / max(den) - 1e-9 <= estimate.ci_low
    assert estimate.ci_high <= max(num) / min(den) + 1e-9
