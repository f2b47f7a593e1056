"""The model's own miss in the interval (specschema.predict_measured.model_error): the
contributors' misses on their own machines set the noise a user's run has beside the
prediction, with Student's t for how few they are; the measured spread stays its floor,
and the point does not move."""

from __future__ import annotations

import math
import random

import pytest

from specschema.crowd import CrowdInputs, Profile, inputs_from_json, inputs_json
from specschema.forecast import forecast, miss
from specschema.predict_measured import measured_interval, model_error
from tests.support.crowd_inputs import CPU, GOOD, NGRAM


def crowd(*profiles: Profile) -> CrowdInputs:
    return CrowdInputs("a" * 64, "target", "Apple M2", 24, "llama-server", 3, profiles,
                       (CPU,), 1)


def entry_of(profile: Profile) -> dict[str, object]:
    found: dict[str, object] = forecast(crowd(profile), (CPU,), "crowd")["candidates"][0]
    return found


def rows_of(profile: Profile) -> dict[int, dict[str, float]]:
    rows = entry_of(profile)["predictions"]
    assert isinstance(rows, list)
    return {r["depth"]: r for r in rows}


def test_the_miss_is_the_root_mean_square_of_the_contributors_misses() -> None:
    # sqrt((0.06^2 + 0.05^2 + 0.04^2) / 3)
    found = model_error([0.06, -0.05, -0.04], 0.02)
    assert found.scale == pytest.approx(math.sqrt((0.0036 + 0.0025 + 0.0016) / 3))
    assert found.dof == 3
    # a run's own noise is never taken as less than it was measured to be
    assert model_error([0.01, -0.01], 0.03).scale == 0.03
    # no miss known: the measured spread, taken as exact (normal)
    assert model_error([], 0.03) == model_error((), 0.03)
    assert model_error([], 0.03).dof is None and model_error([], 0.03).scale == 0.03
    with pytest.raises(ValueError):
        model_error([0.1], -0.01)


def test_few_misses_widen_the_interval_more_than_many() -> None:
    draws = [2.0] * 200
    normal = measured_interval(draws, 0.05, 0.9, random.Random(3))
    many = measured_interval(draws, 0.05, 0.9, random.Random(3), dof=60)
    few = measured_interval(draws, 0.05, 0.9, random.Random(3), dof=2)
    # about exp(+-1.645 * 0.05) with a normal; Student's t with 2 dof reaches +-2.92 sd
    assert normal[1] / normal[0] == pytest.approx(math.exp(2 * 1.645 * 0.05), rel=0.06)
    assert many[1] / many[0] == pytest.approx(normal[1] / normal[0], rel=0.06)
    assert few[1] / few[0] > math.exp(2 * 2.3 * 0.05)
    with pytest.raises(ValueError):
        measured_interval(draws, 0.05, 0.9, random.Random(3), dof=0)


def test_the_forecast_widens_by_the_miss_and_keeps_its_point() -> None:
    spread = (0.01, 0.01, 0.01)
    bare = Profile(NGRAM, "all", GOOD, spread=spread)
    missed = Profile(NGRAM, "all", GOOD, spread=spread, residual=(-0.05, 0.06, -0.04))
    plain, wide = rows_of(bare), rows_of(missed)
    for depth, row in plain.items():
        assert wide[depth]["predicted"] == row["predicted"]
        assert wide[depth]["low"] < row["low"] and wide[depth]["high"] > row["high"]
        # the misses' 5 % on three contributors: wider than a normal 5 % would be
        assert wide[depth]["high"] / wide[depth]["low"] > math.exp(2 * 1.645 * 0.05)
    assert entry_of(missed)["model_error"] == {"log_sd": pytest.approx(
        math.sqrt((0.0025 + 0.0036 + 0.0016) / 3), abs=1e-4),
                                               "contributors": 3}
    assert entry_of(bare)["model_error"] is None
    assert miss(bare).scale == 0.01 and miss(missed).dof == 3


def test_fewer_misses_than_the_minimum_of_contributors_leave_the_interval_alone() -> None:
    spread = (0.01, 0.01, 0.01)
    bare = rows_of(Profile(NGRAM, "all", GOOD, spread=spread))
    two = Profile(NGRAM, "all", GOOD, spread=spread, residual=(-0.3, 0.4))
    assert rows_of(two) == bare  # the crowd's minimum is 3 here
    assert entry_of(two)["model_error"] is None
    assert model_error([0.3, 0.4], 0.01, at_least=3).dof is None
    assert model_error([0.3, 0.4], 0.01, at_least=2).dof == 2


def test_a_single_miss_far_off_widens_without_overflowing() -> None:
    # Student's t with one degree of freedom reaches far: no draw may overflow
    low, high = measured_interval([2.0] * 200, 30.0, 0.9, random.Random(0), dof=1)
    assert 0 < low < 2.0 < high < math.inf


def test_the_misses_travel_with_the_inputs() -> None:
    missed = Profile(NGRAM, "all", GOOD, residual=(-0.05, 0.06, -0.04))
    again = inputs_from_json(inputs_json(crowd(missed)))
    assert again.profiles[0].residual == (-0.05, 0.06, -0.04)
    # inputs from a server that did not send them: none known
    data = inputs_json(crowd(missed))
    del data["profiles"][0]["residual"]
    assert inputs_from_json(data).profiles[0].residual == ()
