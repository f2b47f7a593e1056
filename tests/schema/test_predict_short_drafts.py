"""A round checks what it drafted (specschema.predict's "Short drafts"): a lookup that
drafts fewer tokens than its depth is priced at the batch it checked, at each depth from
what the runs' rounds drafted at theirs, in the model, in the drafting cost read off a
run, and in the forecast."""

from __future__ import annotations

import pytest

from specschema.crowd import CrowdInputs, Profile, median_vector
from specschema.forecast import cost_curve, forecast
from specschema.predict import (
    drafted_at,
    expected_tokens,
    implied_draft_seconds,
    predicted_speedup,
)
from tests.support.crowd_inputs import CPU, GOOD, NGRAM


def test_a_depth_drafts_at_most_itself_and_what_the_run_drafted() -> None:
    # rounds at depth 8 drafted 7.3 tokens on average
    assert drafted_at(8, 8, 7.3) == pytest.approx(7.3)
    assert drafted_at(5, 8, 7.3) == 5.0  # a shallower round: its whole depth, no more
    assert drafted_at(5, 8, 4.5) == 4.5  # nor more than the deeper rounds drafted
    assert drafted_at(12, 8, 7.3) == pytest.approx(11.3)  # above: the shortfall carried
    assert drafted_at(3, 3, 9.0) == 3.0  # a count above the depth is held to it
    with pytest.raises(ValueError):
        drafted_at(0, 8, 7.3)
    with pytest.raises(ValueError):
        drafted_at(3, 8, -1.0)


def test_a_round_is_priced_at_the_batch_it_checked() -> None:
    curve = cost_curve((CPU,))
    vector = GOOD[0]
    # 7.5 drafted: a batch of 8.5 tokens, between the probed 8 and 9
    by_hand = curve.at(1) * expected_tokens(vector, 8) / (
        (curve.at(8) + curve.at(9)) / 2)
    assert predicted_speedup(vector, 8, curve, 0.0, 0.0, 7.5) == pytest.approx(by_hand)
    whole = predicted_speedup(vector, 8, curve)
    assert predicted_speedup(vector, 8, curve, 0.0, 0.0, 8.0) == whole
    assert predicted_speedup(vector, 8, curve, 0.0, 0.0, 7.5) > whole
    # a draft model makes as many passes as it drafted, and the cost read off a run
    # solves for the same
    measured = predicted_speedup(vector, 8, curve, 0.004, 0.2, 6.0)
    assert measured > predicted_speedup(vector, 8, curve, 0.004, 0.2)
    assert implied_draft_seconds(measured, vector, 8, curve, 0.2, 6.0) == pytest.approx(0.004)


def test_the_forecast_prices_each_depth_at_what_the_runs_drafted() -> None:
    def crowd(profile: Profile) -> CrowdInputs:
        return CrowdInputs("a" * 64, "target", "Apple M2", 24, "llama-server", 3,
                           (profile,), (CPU,), 1)

    def rows(profile: Profile) -> dict[int, float]:
        entry = forecast(crowd(profile), (CPU,), "crowd")["candidates"][0]
        return {r["depth"]: r["predicted"] for r in entry["predictions"]}

    whole = rows(Profile(NGRAM, "all", GOOD))
    short = rows(Profile(NGRAM, "all", GOOD, drafted_per_round=(7.0, 7.4, 7.2)))
    curve, vector = cost_curve((CPU,)), median_vector(GOOD)
    for depth, value in short.items():
        size = min(float(depth), 7.2)  # the median of what the runs' rounds drafted
        assert value == pytest.approx(predicted_speedup(vector, depth, curve, 0.0, 0.0, size),
                                      abs=1e-4)
        # below 7.2 a round drafts its whole depth: the same as before
        assert (value > whole[depth]) is (depth > 7.2)
