"""POST /v1/probes and GET /v1/predict through the app: a probe is taken like a submission
(its own envelope type, idempotent by id, refused in the one error shape), and a prediction
for one machine is made from other machines' acceptance and this machine's probes, with
the board's rules for counting contributors (the minimum, new keys on probation, lowered
by settings for a small deployment); verification probes over prefill ones; beside the
acceptance, each contributor's share of steps that drafted nothing (``crowd.plain``), per
kind of work, as llama-server counts them in a real result."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from specschema import Submission, parse_submission
from specschema.crowd import ALL_DOMAINS, inputs_from_json, median_vector
from specschema.envelope import PAYLOAD_TYPE, key_id_of
from specschema.forecast import cost_curve, forecast
from specschema.predict import plain_counts, plain_steps_per_round, predicted_speedup
from specschema.summary import by_domain, prompt_domains
from specserver.board import newkeys
from specserver.crowd import Asked, crowd_inputs
from specserver.store import tables
from tests.support.crowd import (
    DRAFT_BYTES,
    M2,
    M3_PRO,
    RADEON,
    RTX,
    cost_probe,
    draft_result,
    map_result,
    post_results,
    predicted_entry,
    signed_probe,
    target_of,
)
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, error_of, settings_for
from tests.support.signed import sign_dict, signer

TARGET = target_of(map_result(0, M2))
SMALL = {"new_key_probation_days": 0, "cohort_window_hours": 0}  # a small deployment
FIXTURE = Path(__file__).parents[2] / "fixtures" / "map_results" / "gemma-270m-llamacpp-map.json"


def _predict(served: Served, **query: Any) -> Any:
    return served.get("/v1/predict", params={"target": TARGET.digest, "chip": "Apple M2",
                                             **query})


@pytest.fixture()
def small(tmp_path: Path) -> Any:
    with Served(settings_for(tmp_path, **SMALL)) as served:
        yield served


def test_a_probe_is_stored_once_and_refused_in_the_one_shape(small: Served) -> None:
    probe = cost_probe(TARGET, M2)
    body = signed_probe(probe, key_seed=7)
    first = small.client.post("/v1/probes", content=body)
    assert first.status_code == 201, first.text
    assert first.json()["probe_id"] == str(probe.probe_id)
    assert first.json()["chip"] == "Apple M2"
    assert small.client.post("/v1/probes", content=body).status_code == 200
    other = signed_probe(cost_probe(TARGET, M2, step_s=0.03, probe_id=probe.probe_id), 7)
    assert error_of(small.client.post("/v1/probes", content=other))["code"] == \
        "submission_conflict"
    # a submission's envelope type is not a probe's: no signature crosses kinds
    crossed = signed_probe(probe, 7, payload_type=PAYLOAD_TYPE)
    refused = small.client.post("/v1/probes", content=crossed)
    assert refused.status_code == 400 and "payloadType" in error_of(refused)["message"]
    assert small.client.post("/v1/probes", content=b"{").status_code == 400
    assert small.counts()["probes"] == 1


@pytest.fixture(params=STORES)
def small_on_each_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    url = store_url_for(request.param, tmp_path, request)
    with Served(settings_for(tmp_path, database_url=url, **SMALL)) as served:
        yield served


def test_predict_answers_per_candidate_with_an_interval_and_measured_rows(
        small_on_each_store: Served) -> None:
    small = small_on_each_store
    post_results(small, [RTX, M3_PRO, RADEON, M2])
    small.client.post("/v1/probes", content=signed_probe(cost_probe(TARGET, M2), 9))
    response = _predict(small, memory_gb="24")
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["cost"]["source"] == "crowd" and answer["cost"]["contributors"] == 1
    overall = {c["candidate"]["spec_type"]: c for c in answer["candidates"]
               if c["domain"] == "all"}
    assert set(overall) == {"ngram-simple", "ngram-mod", "draft-mtp"}
    ngram = overall["ngram-simple"]
    assert ngram["contributors"] == 4 and ngram["why_not_predicted"] is None
    assert [r["depth"] for r in ngram["predictions"]] == [1, 2, 3, 4, 6, 8]
    assert all(r["low"] <= r["predicted"] <= r["high"] for r in ngram["predictions"])
    # measured on machines like this one: the M2's own result only
    assert [(m["chip"], m["contributors"]) for m in ngram["measured"]] == [("Apple M2", 1)]
    # per kind of work, from the results per domain of the protocol's prompt set, with
    # the M2's speedup per domain beside them
    code = next(c for c in answer["candidates"] if c["domain"] == "code_edit"
                and c["candidate"]["spec_type"] == "ngram-simple")
    assert code["contributors"] == 4 and code["predictions"]
    assert [(m["chip"], m["contributors"]) for m in code["measured"]] == [("Apple M2", 1)]
    assert code["measured"][0]["speedup"] != ngram["measured"][0]["speedup"]
    assert "draft layers" in overall["draft-mtp"]["why_not_predicted"]
    assert overall["draft-mtp"]["measured"][0]["chip"] == "Apple M2"
    assert answer["recommendation"].startswith("use ngram-")
    # an ETag, and 304 for a client that holds this answer
    again = _predict(small, memory_gb="24")
    assert again.content == response.content
    held = small.get("/v1/predict", params={"target": TARGET.digest, "chip": "Apple M2",
                                            "memory_gb": "24"},
                     headers={"If-None-Match": response.headers["ETag"]})
    assert held.status_code == 304 and held.content == b""
    # the inputs sent along give the same answer with the same cost (what a client does)
    inputs = inputs_from_json(answer["inputs"])
    again = forecast(inputs, inputs.cost, "crowd")
    assert again["candidates"] == answer["candidates"]
    assert again["recommendation"] == answer["recommendation"]


def test_a_pair_with_too_few_contributors_or_only_new_keys_is_refused(tmp_path: Path) -> None:
    with Served(settings_for(tmp_path)) as served:  # probation on, minimum 3
        post_results(served, [RTX, M3_PRO, RADEON])
        served.client.post("/v1/probes", content=signed_probe(cost_probe(TARGET, M2), 9))
        answer = _predict(served).json()
        entry = next(c for c in answer["candidates"] if c["domain"] == "all")
        assert entry["predictions"] == [] and entry["contributors"] == 1
        assert entry["new_keys"] == 3
        assert entry["why_not_predicted"] == (
            "needs acceptance from 3 contributors for this pair; has 1, the 3 keys still "
            "new counted as one: 2 more needed")
        assert answer["recommendation"].startswith("nothing can be predicted yet: needs")


def test_many_new_keys_probing_one_machine_are_one_cost_unit(tmp_path: Path) -> None:
    with Served(settings_for(tmp_path)) as served:  # probation on
        for key in range(5):  # five fresh keys, each claiming a slow machine
            body = signed_probe(cost_probe(TARGET, M2, step_s=0.5), 20 + key)
            assert served.client.post("/v1/probes", content=body).status_code == 201
        answer = _predict(served).json()
        assert answer["cost"]["contributors"] == 1
        assert len(answer["inputs"]["cost"]) == 1
        # banned keys' probes are not read
        with served.store.engine.begin() as conn:
            for key in range(5):
                conn.execute(tables.bans.insert().values(
                    key_id=key_id_of(bytes(signer(20 + key).verify_key)), reason="test",
                    banned_at=datetime(2026, 1, 1)))
        assert _predict(served).json()["cost"] is None


def test_without_a_probe_of_this_machine_nothing_is_predicted(small: Served) -> None:
    post_results(small, [RTX, M3_PRO, RADEON])
    small.client.post("/v1/probes", content=signed_probe(cost_probe(TARGET, RTX), 9))
    answer = _predict(small).json()
    assert answer["cost"] is None
    assert all("no cost curve" in c["why_not_predicted"] for c in answer["candidates"])
    # the RTX's probe answers for the RTX
    rtx = _predict(small, chip="NVIDIA GeForce RTX 4090").json()
    assert rtx["cost"]["contributors"] == 1


@pytest.mark.parametrize(("query", "status", "code"), [
    ({"chip": None}, 422, "missing_parameter"),
    ({"colour": "red"}, 422, "unknown_parameter"),
    ({"engine": "vllm"}, 422, "unknown_engine"),
    ({"domain": "poetry"}, 422, "unknown_domain"),
    ({"memory_gb": "lots"}, 422, "bad_parameter"),
    ({"target": "no-such-model"}, 404, "not_found"),
])
def test_bad_queries_get_the_one_error_shape(small: Served, query: dict[str, Any],
                                             status: int, code: str) -> None:
    given = {"target": TARGET.digest, "chip": "Apple M2", **query}
    response = small.get("/v1/predict", params={k: v for k, v in given.items()
                                                if v is not None})
    assert response.status_code == status, response.text
    assert error_of(response)["code"] == code


def test_a_target_name_stands_for_its_one_file(small: Served) -> None:
    post_results(small, [RTX])
    by_name = _predict(small, target=TARGET.name).json()
    assert by_name["target"] == {"digest": TARGET.digest, "name": TARGET.name}


def test_the_routes_are_documented(small: Served) -> None:
    spec = json.loads(small.get("/openapi.json").text)
    predict = spec["paths"]["/v1/predict"]["get"]
    assert {p["name"] for p in predict["parameters"]} == {"target", "chip", "memory_gb",
                                                          "engine", "domain"}
    assert {"404", "422"} <= set(predict["responses"])
    assert "post" in spec["paths"]["/v1/probes"]


def test_a_key_newer_than_the_kept_standing_counts_as_new(small: Served) -> None:
    from specserver.board import newkeys
    from specserver.crowd import Asked, crowd_inputs, standing_of

    post_results(small, [RTX, M3_PRO, RADEON])
    on = newkeys.CohortRules.of(7.0, 0.0, 0)
    with small.store.engine.connect() as conn:
        full = standing_of(conn, newkeys.CohortRules.of(0.0, 0.0, 0))
        older = min(full.cohort_of)  # as if the standing was read before the other two
        kept = newkeys.Standing({older: older}, frozenset(), {})
        inputs = crowd_inputs(conn, Asked(TARGET.digest, "Apple M2", "llama-server"), on, 3,
                              kept)
        profile = next(p for p in inputs.profiles if p.domain == "all")
        assert (len(profile.units), profile.new_keys) == (2, 2)
        off = crowd_inputs(conn, Asked(TARGET.digest, "Apple M2", "llama-server"),
                           newkeys.CohortRules.of(0.0, 0.0, 0), 3, kept)
        assert next(p for p in off.profiles if p.domain == "all").new_keys == 0


def test_the_standing_is_kept_while_the_data_holds_or_for_the_refresh_time() -> None:
    from specserver.board import newkeys
    from specserver.http.predict import _Answers

    now = [100.0]
    answers = _Answers(fresh_s=1.0, clock=lambda: now[0])
    standing = newkeys.Standing({}, frozenset(), {})
    answers.keep_standing("v1", standing)
    assert answers.standing_at("v1") is standing
    assert answers.standing_at("v2") is standing  # written since, within the refresh time
    now[0] += 1.5
    assert answers.standing_at("v2") is None and answers.standing_at("v1") is standing


def test_verification_probes_are_preferred_and_the_answer_names_the_kind(
        small_on_each_store: Served) -> None:
    small = small_on_each_store
    post_results(small, [RTX, M3_PRO, RADEON])
    # a prefill probe reads a round low: alone, it is the cost curve, and said so
    old = cost_probe(TARGET, M2, step_s=0.02, per_token_s=0.001, version=1)
    assert small.client.post("/v1/probes", content=signed_probe(old, 9)).status_code == 201
    answer = _predict(small).json()
    assert answer["cost"]["measured"] == "prefill" and answer["cost"]["contributors"] == 1
    assert answer["inputs"]["cost_measured"] == "prefill"
    assert answer["cost"]["seconds"]["16"] == pytest.approx(0.02 + 0.001 * 15)
    # with a verification probe of this machine, from another key, only that one counts
    new = cost_probe(TARGET, M2, step_s=0.02, per_token_s=0.004, version=2)
    assert small.client.post("/v1/probes", content=signed_probe(new, 10)).status_code == 201
    answer = _predict(small).json()
    assert answer["cost"]["measured"] == "verification"
    assert answer["cost"]["contributors"] == 1
    assert answer["cost"]["seconds"]["16"] == pytest.approx(0.02 + 0.004 * 15)
    inputs = inputs_from_json(answer["inputs"])
    assert inputs.cost_measured == "verification"
    assert forecast(inputs, inputs.cost, "crowd", measured=inputs.cost_measured)["cost"] == \
        answer["cost"]


def _with_plain_steps(seed: int, machine: dict[str, object]) -> Submission:
    """A map result whose trials returned a different number of tokens per prompt (so
    the steps that drafted nothing differ per kind of work) and per contributor."""
    sub = map_result(seed, machine)
    configs = []
    for config in sub.configs:
        # a request that stopped by itself before the limit
        trials = [t.model_copy(update={"eval_count": 66 + 4 * (t.index % 6) + 3 * seed,
                                       "done_reason": "stop"})
                  if t.counters is not None else t for t in config.trials]
        configs.append(config.model_copy(update={"trials": trials}))
    return sub.model_copy(update={"configs": configs})


def _share(sub: Submission, config_name: str, domain: str) -> float:
    """The reference: plain steps over decoded tokens, trial by trial."""
    config = next(c for c in sub.configs if c.name == config_name)
    domains = prompt_domains(sub)
    assert domains is not None
    trials = config.trials if domain == ALL_DOMAINS else by_domain(config.trials,
                                                                   domains)[domain]
    plain = decoded = 0
    for t in trials:
        assert t.counters is not None and t.counters.rounds is not None
        steps, tokens = plain_counts(t.eval_count, t.counters.accepted, t.counters.rounds)
        plain, decoded = plain + steps, decoded + tokens
    return plain / decoded


def test_each_contributor_brings_its_share_of_plain_steps_per_kind_of_work(
        small_on_each_store: Served) -> None:
    small = small_on_each_store
    subs = [_with_plain_steps(seed, m) for seed, m in enumerate((RTX, M3_PRO, RADEON))]
    for seed, sub in enumerate(subs):
        body = sign_dict(json.loads(sub.model_dump_json()), seed)
        response = small.client.post("/v1/submissions", content=body,
                                     peer=(f"198.51.{100 + seed}.7", 40000))
        assert response.status_code == 201, response.text
    with small.store.engine.connect() as conn:
        inputs = crowd_inputs(conn, Asked(TARGET.digest, "Apple M2", "llama-server"),
                              newkeys.CohortRules.of(0.0, 0.0, 0), 3)
    checked = 0
    for profile in inputs.profiles:
        config = {"ngram-simple": "ngram_simple_m8", "ngram-mod": "ngram_mod_16",
                  "draft-mtp": "mtp_n3"}[str(profile.candidate.spec_type)]
        expected = sorted(_share(sub, config, profile.domain) for sub in subs)
        assert list(profile.plain) == pytest.approx(expected)
        checked += 1
    assert checked == 3 * 7  # three candidates, every trial and six kinds of work
    # the kinds of work differ (the test would not tell a domain from another otherwise)
    ngram = {p.domain: p.plain for p in inputs.profiles
             if p.candidate.spec_type == "ngram-simple"}
    assert len({v for k, v in ngram.items() if k != ALL_DOMAINS}) == 6


def test_the_real_gemma_result_counts_as_llama_server_counted_it() -> None:
    """llama-server's n_decoded counts the prefill's token, each round's accepted tokens
    plus the target's own, and one per plain step: nothing in a real result goes below
    zero, and a lookup that found nothing shows as plain steps."""
    sub = parse_submission(FIXTURE.read_bytes())
    config = next(c for c in sub.configs if c.name == "ngram_simple_m8")
    first = config.trials[0]
    assert first.counters is not None and first.counters.rounds is not None
    # eval_count 96 = 1 (prefill) + 83 accepted + 11 rounds + 1 plain step
    assert (first.eval_count, first.counters.accepted, first.counters.rounds) == (96, 83, 11)
    assert plain_counts(96, 83, 11) == (1, 95)
    for config in sub.configs:
        for trial in config.trials:
            if trial.counters is None or trial.counters.rounds is None:
                continue
            raw = trial.eval_count - 1 - trial.counters.accepted - trial.counters.rounds
            assert raw >= 0, (config.name, trial.index)


def test_a_draft_never_probed_here_is_costed_from_its_size_then_from_its_probe(
        small_on_each_store: Served) -> None:
    small = small_on_each_store
    subs = [draft_result(seed, m) for seed, m in enumerate((RTX, M3_PRO, RADEON))]
    for seed, sub in enumerate(subs):
        response = small.client.post("/v1/submissions",
                                     content=sign_dict(json.loads(sub.model_dump_json()), seed),
                                     peer=(f"198.51.{100 + seed}.7", 40000))
        assert response.status_code == 201, response.text
    target = next(m for m in subs[0].models if m.name == "qwen3:14b")
    draft = next(m for m in subs[0].models if m.name == "qwen3:0.6b")
    assert target.size_bytes is not None and target.digest is not None
    small.client.post("/v1/probes", content=signed_probe(cost_probe(target, M2), 9))

    def entry() -> dict[str, Any]:
        assert target.digest is not None
        return predicted_entry(small, target.digest)

    sized = entry()
    assert sized["why_not_predicted"] is None and sized["draft_cost"] == "size"
    inputs = sized["inputs"]
    # by hand: the draft's step is the target's step scaled by their sizes
    profile = next(p for p in inputs.profiles if p.domain == "all"
                   and p.candidate.draft == "qwen3:0.6b" and p.candidate.depth == 8)
    curve = cost_curve(inputs.cost)
    vector = median_vector(profile.units)
    t_d = curve.at(1) * DRAFT_BYTES / target.size_bytes
    assert (inputs.target_bytes, profile.draft_bytes) == (target.size_bytes, DRAFT_BYTES)
    share = sorted(profile.plain)[1]
    # each contributor's rounds drafted 64 tokens over 16, 20 and 24 rounds (a round checks
    # what it drafted, not its depth): the median's
    assert profile.drafted_per_round == pytest.approx((64 / 24, 64 / 20, 64 / 16))
    drafted = 64 / 20
    row = next(r for r in sized["predictions"] if r["depth"] == 8)
    assert row["predicted"] == pytest.approx(predicted_speedup(
        vector, 8, curve, t_d, plain_steps_per_round(share, vector, 8), drafted), abs=1e-4)
    # once the draft is probed on this chip, its own step is used
    slow = cost_probe(draft, M2, step_s=0.015)
    assert small.client.post("/v1/probes", content=signed_probe(slow, 11)).status_code == 201
    probed = entry()
    assert probed["draft_cost"] == "probed"
    row = next(r for r in probed["predictions"] if r["depth"] == 8)
    assert row["predicted"] == pytest.approx(predicted_speedup(
        vector, 8, curve, 0.015, plain_steps_per_round(share, vector, 8), drafted), abs=1e-4)
