"""GET /v1/predict's interval and drafting cost from the crowd's own runs: each row's
measured spread, as its stored trials give it (``crowd.spread``, the logs summed by the
store on either dialect), and what a drafted token cost in a run whose machine probed both
the target and the draft (``crowd.drafting``): runs measured slower than the draft's plain
step predict lower everywhere, once as many contributors tell it as the acceptance needs;
and how far the model missed on each contributor's own machine (``crowd.residuals``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from specschema import Submission
from specschema.crowd import Profile, cost_unit, median_vector
from specschema.forecast import cost_curve
from specschema.predict import plain_counts, plain_steps_per_round, predicted_speedup
from specschema.predict_measured import log_variance, measured_spread
from specserver.board import newkeys
from specserver.crowd import Asked, crowd_inputs
from tests.support.crowd import (
    M2,
    M3_PRO,
    RADEON,
    RTX,
    SHAPES,
    cost_probe,
    draft_result,
    map_result,
    predicted_entry,
    signed_probe,
    target_of,
)
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for
from tests.support.signed import sign_dict

SMALL = {"new_key_probation_days": 0, "cohort_window_hours": 0}  # a small deployment
CONFIG = "draft_qwen3_0.6b_n8"


@pytest.fixture(params=STORES)
def small_on_each_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    url = store_url_for(request.param, tmp_path, request)
    with Served(settings_for(tmp_path, database_url=url, **SMALL)) as served:
        yield served


def _post(served: Served) -> list[Submission]:
    subs = [draft_result(seed, m) for seed, m in enumerate((RTX, M3_PRO, RADEON))]
    for seed, sub in enumerate(subs):
        response = served.client.post("/v1/submissions",
                                      content=sign_dict(json.loads(sub.model_dump_json()), seed),
                                      peer=(f"198.51.{100 + seed}.7", 40000))
        assert response.status_code == 201, response.text
    return subs


def _spread(sub: Submission, config: str) -> float:
    """By hand from the result: the log-sd of its speedup over its trials' rates (one
    prompt: llamacpp-draft has no prompt set)."""
    def rates(name: str) -> list[float]:
        found = next(c for c in sub.configs if c.name == name)
        return [t.eval_count / t.eval_duration_ns for t in found.trials]
    mine, base = rates(config), rates(next(c.name for c in sub.configs
                                           if c.role == "baseline"))
    return measured_spread(log_variance(mine), len(mine), log_variance(base), len(base))


def test_each_contributor_brings_the_spread_of_its_measured_speedup(
        small_on_each_store: Served) -> None:
    subs = _post(small_on_each_store)
    target = next(m for m in subs[0].models if m.name == "qwen3:14b")
    with small_on_each_store.store.engine.connect() as conn:
        inputs = crowd_inputs(conn, Asked(target.digest or "", "Apple M2", "llama-server"),
                              newkeys.CohortRules.of(0, 0, 0), 3)
    profile = next(p for p in inputs.profiles if p.candidate.depth == 8
                   and p.candidate.draft == "qwen3:0.6b" and p.domain == "all")
    assert list(profile.spread) == pytest.approx(sorted(_spread(s, CONFIG) for s in subs))
    assert all(s > 0 for s in profile.spread)
    # no probes of the draft and target on the rows' machines: drafting unknown
    assert profile.drafting == ()


def test_a_run_that_measured_drafting_slower_lowers_the_prediction(
        small_on_each_store: Served) -> None:
    small = small_on_each_store
    subs = _post(small)
    target = next(m for m in subs[0].models if m.name == "qwen3:14b")
    draft = next(m for m in subs[0].models if m.name == "qwen3:0.6b")
    assert target.digest is not None
    # the asker's machine: the target and the draft probed there
    for seed, probe in ((9, cost_probe(target, M2)), (10, cost_probe(draft, M2,
                                                                      step_s=0.002))):
        assert small.client.post("/v1/probes",
                                 content=signed_probe(probe, seed)).status_code == 201

    def entry() -> dict[str, Any]:
        assert target.digest is not None
        return predicted_entry(small, target.digest)

    before = entry()
    assert before["drafting_steps"] == 1.0 and before["measurement_spread"] > 0
    old = {r["depth"]: r["predicted"] for r in before["predictions"]}
    # each contributor (key seed = its result's) probes its own machine: checking is cheap
    # there and its draft's step tiny, yet its run measured no speedup: drafting cost more
    for seed, machine in enumerate((RTX, M3_PRO, RADEON)):
        for probe in (cost_probe(target, machine, step_s=0.02, per_token_s=0.0001),
                      cost_probe(draft, machine, step_s=0.0005 * (seed + 1))):
            assert small.client.post("/v1/probes",
                                     content=signed_probe(probe, seed)).status_code == 201
        found = entry()
        profile = next(p for p in found["inputs"].profiles if p.domain == "all"
                       and p.candidate.draft == "qwen3:0.6b" and p.candidate.depth == 8)
        assert len(profile.drafting) == seed + 1 and min(profile.drafting) > 1.0
        if seed < 2:  # fewer than the minimum of 3 contributors: the draft's step alone
            assert found["drafting_steps"] == 1.0
            assert {r["depth"]: r["predicted"] for r in found["predictions"]} == old
    after = found
    factor = sorted(profile.drafting)[1]
    assert after["drafting_steps"] == pytest.approx(factor, abs=1e-4)
    for row in after["predictions"]:
        assert row["predicted"] < old[row["depth"]]
    # by hand: the point pays the draft's step on this chip times the median cost
    inputs = after["inputs"]
    curve, vector = cost_curve(inputs.cost), median_vector(profile.units)
    share = sorted(profile.plain)[1]
    row = next(r for r in after["predictions"] if r["depth"] == 8)
    drafted = sorted(profile.drafted_per_round)[1]  # what a round drafted, the median's
    assert row["predicted"] == pytest.approx(predicted_speedup(
        vector, 8, curve, 0.002 * factor, plain_steps_per_round(share, vector, 8), drafted),
        abs=1e-4)


def test_each_contributor_brings_the_models_miss_on_its_own_machine(
        small_on_each_store: Served) -> None:
    """Three n-gram results of one shape (seeds 0, 4, 8) on three machines; as each key
    probes its own machine, its run's log(measured / predicted from its own counts and its
    own curve) joins the profile, computed here by hand from the result and the probe."""
    small = small_on_each_store
    machines = (RTX, M3_PRO, RADEON)
    subs = [map_result(seed, m) for seed, m in zip((0, 4, 8), machines, strict=True)]
    for key, sub in enumerate(subs):
        response = small.client.post("/v1/submissions", content=sign_dict(
            json.loads(sub.model_dump_json()), key), peer=(f"198.51.{100 + key}.7", 40000))
        assert response.status_code == 201, response.text
    target = target_of(subs[0])
    assert target.digest is not None

    def profile(chip: str) -> Profile:
        with small.store.engine.connect() as conn:
            inputs = crowd_inputs(conn, Asked(target.digest or "", chip, "llama-server"),
                                  newkeys.CohortRules.of(0, 0, 0), 3)
        return next(p for p in inputs.profiles if p.domain == "all"
                    and p.candidate.spec_type == "ngram-simple")

    assert profile("Apple M2").residual == ()
    expected = []
    for key, (sub, machine) in enumerate(zip(subs, machines, strict=True)):
        probe = cost_probe(target, machine, per_token_s=0.002 * (key + 1))
        assert small.client.post("/v1/probes",
                                 content=signed_probe(probe, key)).status_code == 201
        found = profile(str(machine["chip"]))
        assert len(found.residual) == key + 1  # each key against its own machine only
        config = next(c for c in sub.configs if c.name == "ngram_simple_m8")
        depth = found.candidate.depth
        assert depth is not None
        rounds, positions = SHAPES[0]
        rates = [p / r for p, r in zip(positions, [rounds, *positions[:-1]], strict=False)]
        plain, decoded = plain_counts(sum(t.eval_count for t in config.trials),
                                      48 * len(config.trials), rounds * len(config.trials),
                                      len(config.trials))
        curve = cost_curve([cost_unit(probe)])
        # 64 tokens drafted a trial over its rounds: a round checks what it drafted
        predicted = predicted_speedup(rates, depth, curve, 0.0, plain_steps_per_round(
            plain / decoded, rates, depth), 64 / rounds)
        expected.append(math.log(found.measured[0].speedup / predicted))
        assert list(found.residual) == pytest.approx(sorted(expected), abs=1e-9)
    # dearer rounds on the third machine: it measured more than its curve allows
    assert expected[2] > expected[0]
    entry = small.get("/v1/predict", params={"target": target.digest,
                                             "chip": "Apple M2"}).json()
    ngram = next(c for c in entry["candidates"] if c["domain"] == "all"
                 and c["candidate"]["spec_type"] == "ngram-simple")
    assert ngram["model_error"]["contributors"] == 3
    assert ngram["model_error"]["log_sd"] == pytest.approx(
        max(math.sqrt(sum(r * r for r in expected) / 3), ngram["measurement_spread"]),
        abs=1e-4)
