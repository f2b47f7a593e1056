"""The fast bootstrap CI is bit-identical to the direct definition it replaces."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specschema import stats
from tests.support.tiers import examples

rates = st.floats(min_value=0.0, max_value=500.0, allow_nan=False)


def _direct(num: list[float], den: list[float]) -> tuple[float, float]:
    return stats._bootstrap_ci_direct(
        num, den, stats.BOOTSTRAP_RESAMPLES, stats.BOOTSTRAP_SEED, stats.CONFIDENCE
    )


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(rates, min_size=2, max_size=20),
    st.lists(st.floats(min_value=0.1, max_value=500.0), min_size=2, max_size=20),
)
def test_fast_ci_equals_direct_definition(num: list[float], den: list[float]) -> None:
    estimate = stats.ratio_of_medians(num, den)
    assert (estimate.ci_low, estimate.ci_high) == _direct(num, den)


@settings(max_examples=examples(15), deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, 2.0, 2.0, 5.0]), min_size=3, max_size=6))
def test_fast_ci_equals_direct_with_ties_and_zeros(values: list[float]) -> None:
    den = [v + 1.0 if i == 0 else v for i, v in enumerate(values)]
    if stats.median(den) == 0:
        return
    estimate = stats.ratio_of_medians(values, den)
    assert (estimate.ci_low, estimate.ci_high) == _direct(values, den)


@pytest.mark.parametrize(("n_num", "n_den"), [(12, 18), (18, 12), (13, 14), (17, 17)])
def test_map_protocol_sizes_equal_the_direct_definition(n_num: int, n_den: int) -> None:
    """The map protocols' sizes (12 trials a draft config, 18 for the bracketed baseline)
    took the direct definition before (~60 ms a submission): ties and repeats included."""
    num = [float(i % 7 + 10) + i / 100 for i in range(n_num)]
    den = [float(i % 5 + 9) for i in range(n_den)]
    estimate = stats.ratio_of_medians(num, den)
    assert (estimate.ci_low, estimate.ci_high) == _direct(num, den)


def test_samples_past_the_masks_use_the_direct_definition() -> None:
    n = stats._FAST_MAX_N + 1
    num = [float(i % 7 + 10) for i in range(n)]
    den = [float(i % 5 + 9) for i in range(n - 1)]
    estimate = stats.ratio_of_medians(num, den)
    assert (estimate.ci_low, estimate.ci_high) == _direct(num, den)
