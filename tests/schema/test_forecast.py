"""The crowd's inputs and the forecast from them (specschema.crowd, specschema.forecast):
how voices are counted, what is refused and why, the interval, and that the inputs make
the same answer after a JSON round trip (what a client predicting again relies on)."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import replace

import pytest

from specschema.crowd import (
    Candidate,
    CostUnit,
    CrowdInputs,
    Measured,
    Profile,
    contributor_units,
    inputs_from_json,
    inputs_json,
    median_vector,
)
from specschema.forecast import cost_curve, forecast, recommendation
from specschema.predict import CostCurve, plain_steps_per_round, predicted_speedup
from tests.support.crowd_inputs import CPU, DRAFT, GOOD, NGRAM

# A machine where checking is nearly free.
GPU = CostUnit({1: (0.010, 0.010), 2: (0.0102,), 4: (0.0104,), 8: (0.0108,), 9: (0.0109,)})


def inputs(*profiles: Profile, cost: tuple[CostUnit, ...] = (CPU,), minimum: int = 3
           ) -> CrowdInputs:
    return CrowdInputs("a" * 64, "target", "Apple M2", 24, "llama-server", minimum,
                       profiles, cost, len(cost))


def test_voices_are_counted_as_the_board_counts_them() -> None:
    by_key = {"k1": (0.9, 0.5), "k2": (0.7, 0.3), "k3": (0.1, 0.1), "n1": (0.2, 0.0),
              "n2": (0.4, 0.2), "n3": (0.3,)}
    # k1 and k2 are one cohort; n1..n3 are new (n3 unknown to any cohort)
    cohort_of = {"k1": "k1", "k2": "k1", "k3": "k3", "n1": "n1", "n2": "n2"}
    units, new_keys = contributor_units(by_key, cohort_of, {"n1", "n2"}, unknown_is_new=True)
    assert new_keys == 3
    assert units == tuple(sorted([(0.8, 0.4), (0.1, 0.1), (0.3, 0.1)]))
    # without probation every cohort is a voice; an unknown key is its own cohort
    units, new_keys = contributor_units(by_key, cohort_of, set())
    assert new_keys == 0 and len(units) == 5
    assert median_vector([(1.0, 0.5), (0.0,), (0.5, 0.1)]) == (0.5, 0.3)


def test_the_median_per_position_counts_only_the_vectors_that_reach_it() -> None:
    # read a column at a time with the short vectors' places filled: the fill must never
    # enter a median, whatever the lengths (odd and even counts, equal, empty)
    rng = random.Random(7)
    for _ in range(400):
        vectors = [tuple(rng.random() for _ in range(rng.randint(0, 5)))
                   for _ in range(rng.randint(0, 7))]
        expected = []
        for i in range(max((len(v) for v in vectors), default=0)):
            column = sorted(v[i] for v in vectors if len(v) > i)
            expected.append(statistics.median(column))
        assert median_vector(vectors) == pytest.approx(tuple(expected), abs=0, rel=1e-15)
    assert median_vector([(0.2, 0.9), (0.4,), (0.6,), ()]) == (0.4, 0.9)
    assert median_vector([]) == () and median_vector([(), ()]) == ()


def test_a_pair_below_the_minimum_is_refused_with_what_is_missing() -> None:
    few = Profile(NGRAM, "all", GOOD[:1], new_keys=4)
    answer = forecast(inputs(few), (CPU,), "crowd")
    entry = answer["candidates"][0]
    assert entry["predictions"] == []
    assert "needs acceptance from 3 contributors" in entry["why_not_predicted"]
    assert "has 1, the 4 keys still new counted as one: 2 more needed" in \
        entry["why_not_predicted"]
    assert answer["recommendation"].startswith("nothing can be predicted yet: needs")
    # a maintainer's lower minimum lets it through
    assert forecast(inputs(few, minimum=1), (CPU,), "crowd")["candidates"][0]["predictions"]


def test_adaptive_engines_and_unprobed_drafts_are_not_predicted() -> None:
    adaptive = Candidate("ollama", "draft_num_predict", None, None, adaptive=True)
    measured = (Measured("Apple M2", 24, None, 1.4, 3),)
    answer = forecast(inputs(Profile(adaptive, "all", GOOD, measured=measured),
                             Profile(DRAFT, "all", GOOD)), (CPU,), "crowd")
    first, second = answer["candidates"]
    assert first["predictions"] == [] and "picks its depth" in first["why_not_predicted"]
    assert first["measured"] == [measured[0].json()]
    assert second["predictions"] == [] and "never probed on this chip" in \
        second["why_not_predicted"]
    ollama = Candidate("ollama", "draft_num_predict", None, 4)
    entry = forecast(inputs(Profile(ollama, "all", (), measured=measured)), (CPU,),
                     "crowd")["candidates"][0]
    assert entry["predictions"] == [] and entry["measured"] == [measured[0].json()]
    assert entry["why_not_predicted"].startswith("no run of it recorded acceptance per")
    mtp = Candidate("llama-server", "server_launch", "draft-mtp", 3)
    entry = forecast(inputs(Profile(mtp, "all", GOOD)), (CPU,), "crowd")["candidates"][0]
    assert entry["predictions"] == [] and "draft layers" in entry["why_not_predicted"]
    no_cost = forecast(inputs(Profile(NGRAM, "all", GOOD), cost=()), (), "crowd")
    assert no_cost["cost"] is None
    assert "no cost curve" in no_cost["candidates"][0]["why_not_predicted"]


def test_the_point_is_the_model_over_the_medians_and_the_interval_holds_it() -> None:
    answer = forecast(inputs(Profile(NGRAM, "all", GOOD)), (CPU,), "crowd")
    rows = {r["depth"]: r for r in answer["candidates"][0]["predictions"]}
    assert sorted(rows) == [1, 2, 3, 4, 6, 8]
    expected = predicted_speedup(median_vector(GOOD), 8, cost_curve((CPU,)))
    assert rows[8]["predicted"] == pytest.approx(expected, abs=1e-4)
    for row in rows.values():
        assert row["low"] <= row["predicted"] <= row["high"]
    assert rows[8]["high"] - rows[8]["low"] > 0.01  # three contributors do not agree exactly
    # the same acceptance pays more where checking is cheap: the machine decides
    gpu = forecast(inputs(Profile(NGRAM, "all", GOOD), cost=(GPU,)), (GPU,), "crowd")
    assert gpu["candidates"][0]["predictions"][-1]["predicted"] > rows[8]["predicted"] * 1.5
    assert answer["recommendation"].startswith("use ngram-simple at depth ")


def test_a_draft_model_pays_its_probed_step() -> None:
    slow_draft = (CostUnit({1: (0.008, 0.008)}),)
    profile = Profile(DRAFT, "all", GOOD, draft_cost=slow_draft)
    answer = forecast(inputs(profile, cost=(GPU,)), (GPU,), "crowd")
    rows = {r["depth"]: r for r in answer["candidates"][0]["predictions"]}
    curve = cost_curve((GPU,))
    assert rows[4]["predicted"] == pytest.approx(
        predicted_speedup(median_vector(GOOD), 4, curve, 0.008), abs=1e-4)
    assert rows[4]["predicted"] < 1.0  # a draft almost as slow as the target
    # each round runs the draft once more than it drafts (over the checked batch): at
    # depth 1 that doubles its cost, so depth 2 reads best, E[N] 2.665 tokens for three
    # passes of 8 ms and a check of 10.3 ms: 0.78x of the 10 ms step
    assert rows[2]["predicted"] == pytest.approx(0.010 * 2.665 / (3 * 0.008 + 0.0103),
                                                 abs=1e-3)
    assert answer["recommendation"].startswith("leave speculation off: the best predicted is "
                                               "draft-simple with small at depth 2, 0.78x")


def test_steps_that_draft_nothing_are_paid_and_grow_with_depth_by_hand() -> None:
    # f = 0.2 of the decoded tokens came from plain steps; acceptance 1 at both positions:
    # at depth 2 a round yields E[N] = 3 tokens, so p = 0.2 * 3 / 0.8 = 0.75 plain steps a
    # round. Four rounds and three plain steps: 12 + 3 tokens, 3 / 15 = 0.2 of them plain.
    # With T_t(1) = 1 s and T_t(3) = 2 s they take 4 * 2 + 3 * 1 = 11 s where plain
    # decoding takes 15 s: S = 15 / 11.
    assert plain_steps_per_round(0.2, (1.0, 1.0), 2) == pytest.approx(0.75)
    flat = CostCurve({1: 1.0, 3: 2.0})
    assert predicted_speedup((1.0, 1.0), 2, flat, 0.0, 0.75) == pytest.approx(15 / 11)
    # at depth 1 the same share is fewer plain steps a round (E[N] = 2: p = 0.5)
    assert plain_steps_per_round(0.2, (1.0, 1.0), 1) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="share of plain steps"):
        plain_steps_per_round(1.0, (1.0,), 1)
    # in the forecast: the median of the contributors' shares, at each depth
    shares = (0.05, 0.1, 0.3)
    answer = forecast(inputs(Profile(NGRAM, "all", GOOD, plain=shares)), (CPU,), "crowd")
    rows = {r["depth"]: r for r in answer["candidates"][0]["predictions"]}
    curve, vector = cost_curve((CPU,)), median_vector(GOOD)
    for depth in (1, 4, 8):
        p = plain_steps_per_round(0.1, vector, depth)
        assert rows[depth]["predicted"] == pytest.approx(
            predicted_speedup(vector, depth, curve, 0.0, p), abs=1e-4)
        assert rows[depth]["low"] <= rows[depth]["predicted"] <= rows[depth]["high"]
    without = forecast(inputs(Profile(NGRAM, "all", GOOD)), (CPU,), "crowd")
    assert rows[8]["predicted"] < without["candidates"][0]["predictions"][-1]["predicted"]


def test_an_unprobed_draft_is_costed_from_the_sizes_with_the_curve_in_use() -> None:
    profile = Profile(DRAFT, "all", GOOD, draft_bytes=250)
    unsized = forecast(inputs(profile), (CPU,), "crowd")["candidates"][0]
    assert unsized["predictions"] == [] and "no result reported its size" in \
        unsized["why_not_predicted"]
    sized = replace(inputs(profile), target_bytes=1000)
    for cost in ((CPU,), (GPU,)):  # the crowd's curve, or the asker's own probe
        entry = forecast(sized, cost, "crowd")["candidates"][0]
        assert entry["draft_cost"] == "size" and entry["why_not_predicted"] is None
        curve = cost_curve(cost)
        row = next(r for r in entry["predictions"] if r["depth"] == 4)
        # T_d = T_t(1) * 250 / 1000, from the curve predicted with
        assert row["predicted"] == pytest.approx(predicted_speedup(
            median_vector(GOOD), 4, curve, curve.at(1) * 0.25), abs=1e-4)
        assert row["low"] <= row["predicted"] <= row["high"]
    probed = Profile(DRAFT, "all", GOOD, draft_cost=(CostUnit({1: (0.001,)}),),
                     draft_bytes=250)
    entry = forecast(replace(inputs(probed), target_bytes=1000), (CPU,), "crowd")
    assert entry["candidates"][0]["draft_cost"] == "probed"


def test_the_answer_is_the_same_from_the_inputs_sent_as_json() -> None:
    crowd = replace(inputs(Profile(NGRAM, "all", GOOD, new_keys=0,
                           measured=(Measured("Apple M2", 24, 8, 1.3, 2),)),
                   Profile(NGRAM, "code_edit", GOOD[1:] + GOOD[:1]),
                   Profile(DRAFT, "all", GOOD, draft_cost=(CostUnit({1: (0.001,)}),)),
                   Profile(NGRAM, "chat", GOOD, plain=(0.05, 0.1, 0.2)),
                   Profile(DRAFT, "chat", GOOD, draft_bytes=250),
                   cost=(CPU, GPU)), cost_measured="verification", target_bytes=1000)
    again = inputs_from_json(json.loads(json.dumps(inputs_json(crowd))))
    assert again == crowd
    assert forecast(again, again.cost, "crowd") == forecast(crowd, crowd.cost, "crowd")
    only = forecast(crowd, crowd.cost, "crowd", domain="code_edit")
    assert {c["domain"] for c in only["candidates"]} == {"all", "code_edit"}
    assert "for code_edit" in only["recommendation"]


def test_the_cost_curve_is_the_median_of_the_units_medians_each_size_its_own() -> None:
    dip = CostUnit({1: (0.01,), 2: (0.03,), 4: (0.02,)})
    curve = cost_curve((dip, CostUnit({1: (0.03,), 2: (0.05,), 4: (0.05,)})))
    assert curve.seconds == pytest.approx({1: 0.02, 2: 0.04, 4: 0.035})


def test_a_cheaper_even_round_is_kept_not_pooled_with_its_dearer_neighbour() -> None:
    # the advisor bench's m3, first run (bench/data/advise-20261206-212201.json): its
    # probe's samples (s) of a plain step and of rounds checking 2-6 tokens; 3 and 5 cost
    # more than 4 and 6 in every round of it
    m3 = CostUnit({1: (0.039, 0.038, 0.038, 0.037, 0.037, 0.039),
                   2: (0.054, 0.052, 0.054), 3: (0.088, 0.083, 0.086),
                   4: (0.073, 0.074, 0.076), 5: (0.106, 0.106, 0.110),
                   6: (0.094, 0.096, 0.101)})
    curve = cost_curve((m3,))
    assert curve.at(4) == pytest.approx(0.074) and curve.at(6) == pytest.approx(0.096)
    # depth 3 checks 4 tokens: lookup accepting everything yields 4 tokens a round for
    # 74 ms, 2.05x a 38 ms step; pooled with the 3-token round (80 ms) it read 1.90x
    assert predicted_speedup([1.0] * 3, 3, curve) == pytest.approx(4 * 0.038 / 0.074)
    pooled = CostCurve({1: 0.038, 4: (0.086 + 0.074) / 2})
    assert predicted_speedup([1.0] * 3, 3, pooled) == pytest.approx(1.9, abs=0.01)


def test_recommendation_reads_the_rows() -> None:
    rows = [{"domain": "all", "candidate": {"kind": "ngram-mod"}, "why_not_predicted": None,
             "predictions": [{"depth": 4, "predicted": 1.3, "low": 0.9, "high": 1.6}]}]
    assert recommendation(rows, "all") == ("use ngram-mod at depth 4: predicted 1.30x "
                                           "(0.90-1.60); it may also slow this machine down "
                                           "(the interval reaches 0.90x)")


def test_a_large_crowd_is_resampled_in_bounded_draws() -> None:
    many = tuple(tuple(max(0.0, a - 0.001 * i) for a in GOOD[i % 3]) for i in range(150))
    rows = forecast(inputs(Profile(NGRAM, "all", many)), (CPU,), "crowd")["candidates"][0][
        "predictions"]
    assert all(r["low"] <= r["predicted"] <= r["high"] for r in rows)
    assert rows[-1]["high"] - rows[-1]["low"] < 0.5
