"""specschema.stats.robust_scores: modified z-scores over the MAD (Iglewicz and Hoaglin)."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from specschema.stats import OUTLIER_SCORE, median_absolute_deviation, robust_scores


def test_a_far_value_scores_beyond_the_threshold_and_the_rest_do_not() -> None:
    values = [1.05, 1.08, 1.10, 1.12, 1.15, 3.0]
    scores = robust_scores(values)
    # median 1.11, deviations .06 .03 .01 .01 .04 1.89, MAD (.03 + .04) / 2 = .035
    assert median_absolute_deviation(values) == pytest.approx(0.035)
    assert scores[-1] == pytest.approx(0.6745 * 1.89 / 0.035)
    assert [abs(s) > OUTLIER_SCORE for s in scores] == [False] * 5 + [True]
    assert scores[0] < 0 < scores[-1]  # signed: below and above the median


def test_the_mean_deviation_stands_in_when_most_values_are_equal() -> None:
    values = [1.1, 1.1, 1.1, 1.1, 2.0]  # MAD 0
    assert median_absolute_deviation(values) == 0
    scores = robust_scores(values)
    assert scores[:4] == [0.0] * 4
    assert scores[4] == pytest.approx(0.7979 * 0.9 / (0.9 / 5))
    assert robust_scores([1.2, 1.2, 1.2]) == [0.0, 0.0, 0.0]
    assert robust_scores([]) == []


@given(st.lists(st.floats(0.01, 100, allow_nan=False), min_size=3, max_size=40),
       st.floats(0.01, 100), st.floats(0.1, 10))
def test_scores_do_not_depend_on_location_or_scale(
        values: list[float], shift: float, scale: float) -> None:
    """A robust score is a z-score: moving or stretching every value leaves it as it was.
    Values that differ only at rounding level are left out: a shift rounds such a
    difference to 0 or to a few ulps, and a MAD of a few ulps is no scale to keep."""
    assume(all(a == b or abs(a - b) > 1e-4 for a in values for b in values))
    moved = robust_scores([v * scale + shift for v in values])
    for a, b in zip(robust_scores(values), moved, strict=True):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-6)


def test_a_spread_of_one_ulp_is_no_spread() -> None:
    """Two ratios an ulp apart are equal: before, a MAD of 2e-16 scored the others 1.2e16."""
    values = [1.0, 1.0, 1.0000000000000002, 5.0, 5.0]
    assert robust_scores(values) == pytest.approx(robust_scores([1.0, 1.0, 1.0, 5.0, 5.0]))
    assert max(robust_scores(values)) < 3


def test_the_mad_is_the_textbook_one() -> None:
    values = [2.0, 4.0, 4.0, 5.0, 9.0, 11.0]
    centre = statistics.median(values)
    assert median_absolute_deviation(values) == statistics.median(abs(v - centre) for v in values)
