"""A machine none of the contributors' came from (specschema.predict_measured's
``new_machine_draw``): a cost ratio each contributor unit read on its own machine, a draft
model's pass in its plain steps, is drawn for the asker's machine as one more reading
would fall (their median moved by Student's t at their spread), not as their median's
bootstrap; in the forecast the point stays, the interval takes the spread."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from specschema.crowd import CostUnit, CrowdInputs, Profile
from specschema.forecast import drafting_draw, forecast
from specschema.predict_measured import new_machine_draw, new_machine_spread
from tests.support.crowd_inputs import CPU, DRAFT, GOOD

DRAFT_STEP = (CostUnit({1: (0.002, 0.002)}),)
# the 95th percentile of Student's t with 4 degrees of freedom
T4_95 = 2.1318


def test_one_more_reading_falls_where_the_prediction_interval_says() -> None:
    values = (1.0, 1.1, 1.3, 1.6, 2.2)
    logs = [math.log(v) for v in values]
    s = statistics.stdev(logs)
    rng = random.Random(7)
    spread = new_machine_spread(values)
    assert spread.dof == 4
    draws = sorted(math.log(new_machine_draw(1.3, spread, rng) / 1.3) for _ in range(40_000))
    # the central 90 %: +-t(4) s sqrt(1 + 1/5) around the centre
    half = T4_95 * s * math.sqrt(1.2)
    assert draws[int(0.05 * len(draws))] == pytest.approx(-half, rel=0.05)
    assert draws[int(0.95 * len(draws))] == pytest.approx(half, rel=0.05)
    # a wider crowd spreads the draws wider; fewer than two readings: no spread known
    first, second = random.Random(1), random.Random(1)
    narrow = [new_machine_draw(1.05, new_machine_spread((1.0, 1.05, 1.1)), first)
              for _ in range(200)]
    wide = [new_machine_draw(1.05, new_machine_spread((1.0, 1.05, 2.0)), second)
            for _ in range(200)]
    assert statistics.pstdev(wide) > 3 * statistics.pstdev(narrow) > 0
    assert new_machine_draw(1.4, new_machine_spread((1.4,)), random.Random(1)) == 1.4
    with pytest.raises(ValueError):
        new_machine_spread((1.0, 0.0))


def test_a_drawn_drafting_cost_is_never_below_one_step() -> None:
    rng, known = random.Random(3), (1.0, 1.0, 2.3)
    draws = [drafting_draw(1.0, new_machine_spread(known), rng) for _ in range(2000)]
    assert min(draws) == 1.0 and max(draws) > 2.3


def test_machines_that_draft_at_different_costs_widen_the_interval_not_move_the_point(
        ) -> None:
    def rows(drafting: tuple[float, ...]) -> dict[int, dict[str, float]]:
        crowd = CrowdInputs("a" * 64, "target", "Apple M2", 24, "llama-server", 3,
                            (Profile(DRAFT, "all", GOOD, draft_cost=DRAFT_STEP,
                                     drafting=drafting),), (CPU,), 1)
        entry = forecast(crowd, (CPU,), "crowd")["candidates"][0]
        return {r["depth"]: r for r in entry["predictions"]}

    agree, differ = rows((1.3, 1.35, 1.4)), rows((1.0, 1.35, 2.3))  # one median, 1.35
    for depth, row in agree.items():
        assert differ[depth]["predicted"] == row["predicted"]
        # a dearer machine than the median is possible: the low end reaches further down
        assert differ[depth]["low"] < row["low"] <= row["predicted"] <= row["high"]
