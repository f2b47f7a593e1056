"""The consistency rules (pure): each one refuses what it names, and honest data passes."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from specschema.payload import parse_submission
from specschema.protocol_files import get_protocol
from specserver.ingest import checks, rules
from tests.support.signed import payload_dict

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def ctx_for(data: dict[str, Any]) -> rules.RuleContext:
    return rules.RuleContext(get_protocol(data["protocol"]["id"]), NOW, timedelta(days=30),
                              timedelta(minutes=5))


def rules_broken(data: dict[str, Any]) -> set[str]:
    submission = parse_submission(json.dumps(data).encode())
    return {v.rule for v in rules.violations(submission, ctx_for(data))}


def fresh(seed: int = 0, protocol: str = "hardnumbers-m2", **kwargs: Any) -> dict[str, Any]:
    return payload_dict(seed, protocol, created_at=NOW - timedelta(hours=1), **kwargs)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("protocol", "version", "counters"), [
    ("hardnumbers-m2", "0.12.8", False),
    ("ollama-draft", "0.30.1", True),
    ("ollama-draft", "0.30.1", False),
    ("ollama-draft", "0.29.0", False),
    ("ollama-draft", "weird-build", False),
])
def test_honest_examples_pass_every_rule(seed: int, protocol: str, version: str,
                                         counters: bool) -> None:
    data = fresh(seed, protocol, engine_version=version, counters_seen=counters)
    assert rules_broken(data) == set()


def _first_trial(data: dict[str, Any], config: int = 0, trial: int = 0) -> dict[str, Any]:
    result: dict[str, Any] = data["configs"][config]["trials"][trial]
    return result


CASES: list[tuple[str, str, Any]] = []


def case(rule: str):  # type: ignore[no-untyped-def]
    def register(fn):  # type: ignore[no-untyped-def]
        CASES.append((fn.__name__, rule, fn))
        return fn
    return register


@case("configs_match_protocol")
def unknown_config(d: dict[str, Any]) -> None:
    d["configs"][1]["name"] = "draft_mystery"


@case("configs_match_protocol")
def options_differ(d: dict[str, Any]) -> None:
    d["configs"][0]["request_options"]["temperature"] = 0.7


@case("configs_match_protocol")
def option_bool_for_number(d: dict[str, Any]) -> None:
    d["configs"][0]["request_options"]["seed"] = True


@case("configs_match_protocol")
def wrong_model(d: dict[str, Any]) -> None:
    d["configs"][0]["model"] = "llama3:8b"


@case("configs_match_protocol")
def complete_but_config_missing(d: dict[str, Any]) -> None:
    d["configs"].pop()


@case("trials_fit_schedule")
def too_few_trials_when_complete(d: dict[str, Any]) -> None:
    d["configs"][0]["trials"].pop()


@case("trials_fit_schedule")
def duplicate_trial_index(d: dict[str, Any]) -> None:
    d["configs"][0]["trials"][1]["index"] = 0


@case("trials_fit_schedule")
def wrong_schedule_position(d: dict[str, Any]) -> None:
    d["configs"][0]["trials"][0]["position"] = 7


@case("eval_count_fits_num_predict")
def eval_count_over_num_predict(d: dict[str, Any]) -> None:
    _first_trial(d)["eval_count"] = 201


@case("eval_count_fits_num_predict")
def length_without_reaching_the_limit(d: dict[str, Any]) -> None:
    t = _first_trial(d)
    t["eval_count"] = 120
    t["eval_duration_ns"] = t["eval_duration_ns"] * 120 // 200


@case("eval_count_fits_num_predict")
def unknown_done_reason(d: dict[str, Any]) -> None:
    _first_trial(d)["done_reason"] = "unload"


@case("durations_coherent")
def eval_longer_than_total(d: dict[str, Any]) -> None:
    t = _first_trial(d)
    t["eval_duration_ns"] = t["total_duration_ns"] + 1


@case("durations_coherent")
def parts_exceed_total(d: dict[str, Any]) -> None:
    t = _first_trial(d)
    t["load_duration_ns"] = t["total_duration_ns"] // 2
    t["prompt_eval_duration_ns"] = t["total_duration_ns"] // 2


@case("durations_coherent")
def wall_shorter_than_total(d: dict[str, Any]) -> None:
    t = _first_trial(d)
    t["wall_s"] = t["total_duration_ns"] / 1e9 / 2


@case("durations_coherent")
def ttft_after_the_end(d: dict[str, Any]) -> None:
    t = _first_trial(d)
    t["ttft_s"] = t["wall_s"] + 1


@case("decode_rate_plausible")
def impossibly_fast(d: dict[str, Any]) -> None:
    t = _first_trial(d)
    t["eval_duration_ns"] = 1_000_000  # 200 tokens in 1 ms = 200,000 tok/s


@case("decode_rate_plausible")
def nothing_decoded(d: dict[str, Any]) -> None:
    t = _first_trial(d)
    t["eval_count"] = 0
    t["done_reason"] = "stop"


@case("created_at_recent")
def from_the_future(d: dict[str, Any]) -> None:
    d["created_at"] = (NOW + timedelta(minutes=6)).isoformat().replace("+00:00", "Z")


@case("created_at_recent")
def too_old(d: dict[str, Any]) -> None:
    d["created_at"] = (NOW - timedelta(days=31)).isoformat().replace("+00:00", "Z")


@case("speculation_coherent")
def draft_model_field_claims_confirmed(d: dict[str, Any]) -> None:
    s = d["configs"][1]["speculation"]
    s.update(observed="confirmed", drafted_tokens=100, accepted_tokens=80,
             counters_source="llama_server_log")


@case("speculation_coherent")
def engine_can_honor_lies(d: dict[str, Any]) -> None:
    d["configs"][1]["speculation"]["engine_can_honor"] = True


@case("speculation_coherent")
def baseline_requests_speculation(d: dict[str, Any]) -> None:
    d["configs"][0]["speculation"]["requested"] = True


@case("names_printable")
def chip_with_zero_width_space(d: dict[str, Any]) -> None:
    d["fingerprint"]["chip"] = "Apple\u200b M2"


@case("names_printable")
def chip_with_cyrillic_a(d: dict[str, Any]) -> None:
    d["fingerprint"]["chip"] = "\u0410pple M2"


@case("names_printable")
def chip_wholly_in_lookalikes(d: dict[str, Any]) -> None:
    d["fingerprint"]["chip"] = "\u0410\u0440\u0440\u04cf\u0435 \u041c2"


@case("names_printable")
def backend_with_line_feed(d: dict[str, Any]) -> None:
    d["engine"]["backend"] = "100% GPU\n"


@case("names_printable")
def note_with_rtl_override(d: dict[str, Any]) -> None:
    d["note"] = "ok \u202e"


@case("submission_id_not_reserved")
def signed_id_in_the_import_namespace(d: dict[str, Any]) -> None:
    d["submission_id"] = "6f1a3c0e-1d2b-5c4d-8e9f-0a1b2c3d4e5f"  # version 5


@pytest.mark.parametrize(("name", "rule", "breaker"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_refuses_what_it_names(name: str, rule: str, breaker: Any) -> None:
    data = fresh(3)
    assert rules_broken(data) == set()
    breaker(data)
    assert rule in rules_broken(data), name


def test_confirmed_needs_counters_and_accepted_not_above_drafted() -> None:
    data = fresh(1, "ollama-draft", engine_version="0.30.1", counters_seen=True)
    data["configs"][1]["speculation"]["accepted_tokens"] = 5000
    assert rules_broken(data) == {"speculation_coherent"}
    data = fresh(1, "ollama-draft", engine_version="0.30.1", counters_seen=True)
    data["configs"][1]["speculation"]["counters_source"] = None
    assert "speculation_coherent" in rules_broken(data)


def test_old_engine_cannot_confirm_draft_num_predict() -> None:
    data = fresh(1, "ollama-draft", engine_version="0.30.1", counters_seen=True)
    data["engine"]["version"] = "0.29.9"  # draft_num_predict exists from 0.30.0
    assert rules_broken(data) == {"speculation_coherent"}


def test_incomplete_submission_may_stop_early_but_not_invent_trials() -> None:
    data = fresh(2)
    data["complete"] = False
    data["configs"].pop()
    data["configs"][1]["trials"] = data["configs"][1]["trials"][:2]
    assert rules_broken(data) == set()
    data["configs"][1]["trials"][1]["index"] = 4
    assert rules_broken(data) == {"trials_fit_schedule"}


def test_target_parameter_is_required_for_a_protocol_without_target() -> None:
    data = fresh(0, "ollama-draft", engine_version="0.30.1")
    data["protocol"]["parameters"] = {}
    assert "configs_match_protocol" in rules_broken(data)


def test_small_clock_differences_are_tolerated() -> None:
    data = fresh(4)
    t = _first_trial(data)
    t["wall_s"] = t["total_duration_ns"] / 1e9 - 0.01  # 10 ms short: client/engine clocks
    data["created_at"] = (NOW + timedelta(minutes=4)).isoformat().replace("+00:00", "Z")
    assert rules_broken(data) == set()


def test_check_consistency_names_the_rule_and_lists_all() -> None:
    data = fresh(5)
    _first_trial(data)["eval_count"] = 999
    _first_trial(data, 1)["wall_s"] = 0.001
    submission = parse_submission(json.dumps(data).encode())
    with pytest.raises(checks.ConsistencyError) as caught:
        checks.check_consistency(submission, ctx_for(data))
    assert caught.value.message.startswith("eval_count_fits_num_predict: configs.0.trials.0")
    rules = {d["rule"] for d in caught.value.details}
    assert {"eval_count_fits_num_predict", "durations_coherent"} <= rules
