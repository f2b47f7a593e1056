"""What a user would measure (specschema.predict_measured) and what a drafted token costs
(specschema.predict.drafting_factor), alone and in the forecast: a measurement's spread
widens the interval and leaves the point, more spread widens it more; a draft whose
drafted tokens were measured slower than its plain step predicts lower, once as many
contributors tell it as the acceptance needs."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from specschema.crowd import (
    CostUnit,
    CrowdInputs,
    Profile,
    inputs_from_json,
    inputs_json,
)
from specschema.forecast import cost_curve, forecast
from specschema.predict import (
    CostCurve,
    drafting_factor,
    implied_draft_seconds,
    plain_steps_per_round,
    predicted_speedup,
)
from specschema.predict_measured import (
    log_variance,
    measured_interval,
    measured_spread,
    moments_variance,
)
from tests.support.crowd_inputs import CPU, DRAFT, GOOD, NGRAM

DRAFT_STEP = (CostUnit({1: (0.002, 0.002)}),)


def crowd(*profiles: Profile) -> CrowdInputs:
    return CrowdInputs("a" * 64, "target", "Apple M2", 24, "llama-server", 3, profiles,
                       (CPU,), 1)


def rows_of(profile: Profile) -> dict[int, dict[str, float]]:
    answer = forecast(crowd(profile), (CPU,), "crowd")
    return {r["depth"]: r for r in answer["candidates"][0]["predictions"]}


def test_the_spread_of_a_ratio_of_means_by_hand() -> None:
    # rates 10 and 20 tok/s: logs differ by ln 2, variance ln(2)^2 / 2
    assert log_variance([10.0, 20.0]) == pytest.approx(math.log(2) ** 2 / 2)
    assert log_variance([7.0]) == 0.0
    # the sums a database makes give the same variance
    logs = [math.log(v) for v in (9.0, 11.0, 14.0, 10.5)]
    assert moments_variance(4, sum(logs), sum(x * x for x in logs)) == pytest.approx(
        statistics.variance(logs))
    assert moments_variance(1, 2.0, 4.0) == 0.0
    # sqrt(0.08 / 2 + 0.03 / 3) = sqrt(0.05)
    assert measured_spread(0.08, 2, 0.03, 3) == pytest.approx(math.sqrt(0.05))
    # more spread on either side widens it; more trials narrow it
    assert measured_spread(0.16, 2, 0.03, 3) > measured_spread(0.08, 2, 0.03, 3)
    assert measured_spread(0.08, 2, 0.06, 3) > measured_spread(0.08, 2, 0.03, 3)
    assert measured_spread(0.08, 8, 0.03, 12) < measured_spread(0.08, 2, 0.03, 3)
    with pytest.raises(ValueError):
        measured_spread(0.1, 0, 0.1, 3)


def test_a_measured_interval_widens_with_the_spread_and_keeps_its_level() -> None:
    draws = [1.5 + 0.001 * i for i in range(200)]
    plain = measured_interval(draws, 0.0, 0.9, random.Random(1))
    assert plain == pytest.approx((1.5 + 0.001 * 9.95, 1.5 + 0.001 * 189.05))
    narrow = measured_interval(draws, 0.05, 0.9, random.Random(1))
    wide = measured_interval(draws, 0.3, 0.9, random.Random(1))
    assert wide[0] < narrow[0] < plain[0] and plain[1] < narrow[1] < wide[1]
    # a log-normal spread of 0.3 alone: about 1.6 ^ +-1 around the draws' middle
    assert wide[1] / wide[0] > math.exp(2 * 1.645 * 0.3) * 0.85
    with pytest.raises(ValueError):
        measured_interval([], 0.1, 0.9, random.Random(1))


def test_the_forecast_interval_holds_what_a_run_would_measure_the_point_does_not_move() -> None:
    bare = rows_of(Profile(NGRAM, "all", GOOD))
    noisy = rows_of(Profile(NGRAM, "all", GOOD, spread=(0.1, 0.2, 0.15)))
    noisier = rows_of(Profile(NGRAM, "all", GOOD, spread=(0.3, 0.4, 0.35)))
    for depth, row in bare.items():
        assert noisy[depth]["predicted"] == row["predicted"] == noisier[depth]["predicted"]
        assert noisy[depth]["low"] < row["low"] and noisy[depth]["high"] > row["high"]
        assert noisier[depth]["low"] < noisy[depth]["low"]
        assert noisier[depth]["high"] > noisy[depth]["high"]
    answer = forecast(crowd(Profile(NGRAM, "all", GOOD, spread=(0.1, 0.2, 0.15))), (CPU,),
                      "crowd")
    assert answer["candidates"][0]["measurement_spread"] == pytest.approx(0.15)


def test_the_drafted_token_cost_is_the_model_solved_for_it() -> None:
    curve = cost_curve((CPU,))
    vector = GOOD[0][:4]
    plain = plain_steps_per_round(0.1, vector, 4)
    measured = predicted_speedup(vector, 4, curve, 0.005, plain)
    assert implied_draft_seconds(measured, vector, 4, curve, plain) == pytest.approx(0.005)
    # 0.005 s a drafted token where the draft's plain step is 0.002 s: 2.5 steps
    assert drafting_factor(measured, vector, 4, curve, 0.002, plain) == pytest.approx(2.5)
    # a run measured faster than even a free drafter allows counts as one step, not less
    fast = predicted_speedup(vector, 4, curve, 0.0, plain) * 1.2
    assert implied_draft_seconds(fast, vector, 4, curve, plain) < 0
    assert drafting_factor(fast, vector, 4, curve, 0.002, plain) == 1.0
    with pytest.raises(ValueError):
        drafting_factor(measured, vector, 4, curve, 0.0, plain)
    with pytest.raises(ValueError):
        implied_draft_seconds(0.0, vector, 4, CostCurve({1: 1.0}))


def test_a_draft_whose_drafted_tokens_were_measured_slower_predicts_lower() -> None:
    plain = rows_of(Profile(DRAFT, "all", GOOD, draft_cost=DRAFT_STEP))
    slower = rows_of(Profile(DRAFT, "all", GOOD, draft_cost=DRAFT_STEP,
                             drafting=(1.5, 2.0, 2.5)))
    slowest = rows_of(Profile(DRAFT, "all", GOOD, draft_cost=DRAFT_STEP,
                              drafting=(3.0, 3.5, 4.0)))
    curve = cost_curve((CPU,))
    vector = tuple(statistics.median(c) for c in zip(*GOOD, strict=True))
    for depth, row in plain.items():
        assert slowest[depth]["predicted"] < slower[depth]["predicted"] < row["predicted"]
        # the point pays the median contributor's drafting cost: 2 plain steps a token
        assert slower[depth]["predicted"] == pytest.approx(
            predicted_speedup(vector, depth, curve, 0.002 * 2.0), abs=1e-4)
        assert slower[depth]["low"] <= slower[depth]["predicted"] <= slower[depth]["high"]
    answer = forecast(crowd(Profile(DRAFT, "all", GOOD, draft_cost=DRAFT_STEP,
                                    drafting=(1.5, 2.0, 2.5))), (CPU,), "crowd")
    assert answer["candidates"][0]["drafting_steps"] == pytest.approx(2.0)
    # from fewer contributor units than the acceptance needs (3 here), the step alone
    few = rows_of(Profile(DRAFT, "all", GOOD, draft_cost=DRAFT_STEP, drafting=(3.0, 4.0)))
    assert few == plain
    # a candidate without a draft model has no drafting cost to report
    lookup = forecast(crowd(Profile(NGRAM, "all", GOOD)), (CPU,), "crowd")
    assert lookup["candidates"][0]["drafting_steps"] is None


def test_the_spread_and_drafting_travel_in_the_inputs_json() -> None:
    inputs = crowd(Profile(DRAFT, "all", GOOD, draft_cost=DRAFT_STEP, spread=(0.2, 0.3),
                           drafting=(1.7, 2.2)), Profile(NGRAM, "chat", GOOD))
    again = inputs_from_json(json.loads(json.dumps(inputs_json(inputs))))
    assert again == inputs
    assert forecast(again, again.cost, "crowd") == forecast(inputs, inputs.cost, "crowd")
