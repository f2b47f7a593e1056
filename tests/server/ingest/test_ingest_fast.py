"""The one-pass consistency check (``rules.violations``) reports what the rules report.

The rules as first written, one generator each, are the reference
(tests/server/ingest/consistency_reference.py); the single pass must return the same list of
violations (rules, paths, messages, order, truncation) on every submission: honest ones,
broken ones, with values right at each rule's bounds (the pass repeats the rules'
arithmetic), and with several configs and trials broken at once.
"""

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specschema.capability import submission_verdicts
from specschema.errors import PayloadSchemaError
from specschema.payload import parse_submission
from specserver.ingest import rulebook, rules
from tests.server.ingest import consistency_reference as reference
from tests.server.ingest.test_ingest_rules import CASES, ctx_for, fresh

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PROTOCOLS = [
    ("hardnumbers-m2", "0.12.8", False),
    ("ollama-draft", "0.30.1", True),
    ("ollama-draft", "0.30.1", False),
    ("ollama-draft", "0.29.0", False),
    ("ollama-draft", "weird-build", False),
]

def _reported(data: dict[str, Any]) -> list[rules.Violation] | None:
    """What ``violations`` reports, asserted equal to the reference's list; None when the
    schema refuses the data (a mutation it refuses never reaches the rules)."""
    try:
        submission = parse_submission(json.dumps(data).encode())
    except PayloadSchemaError:
        return None
    ctx = ctx_for(data)
    found = rules.violations(submission, ctx)
    assert found == reference.rule_violations(submission, ctx)
    return found


def _agree(data: dict[str, Any]) -> bool | None:
    """True when nothing is reported (and the reference reports nothing either)."""
    found = _reported(data)
    return None if found is None else found == []


def test_the_rules_are_reported_in_the_reference_order() -> None:
    assert rulebook.RULE_NAMES == tuple(rule.__name__ for rule in reference.RULES)
    assert tuple(rulebook.RULES) == rulebook.RULE_NAMES


def test_violations_reports_the_violation_itself() -> None:
    data = fresh(1)
    data["configs"][0]["trials"][2]["eval_count"] = 999
    found = _reported(data)
    assert found == [rules.Violation("eval_count_fits_num_predict",
                                      "configs.0.trials.2.eval_count",
                                      "eval_count 999 exceeds num_predict 200")]


def test_several_configs_broken_report_rule_by_rule() -> None:
    """Violations of every config, grouped by rule in ``RULES`` order (not config by config),
    and durations_coherent's warm-ups after all configs' trials."""
    data = fresh(2, "ollama-draft", engine_version="0.30.1", counters_seen=True)
    for config in data["configs"]:
        config["trials"][1].update(wall_s=0.001, ttft_s=None)
        config["warmups"] = [{"wall_s": 1.0, "load_duration_ns": 11, "total_duration_ns": 10}]
        config["speculation"]["requested"] = not config["speculation"]["requested"]
    data["configs"][2]["name"] = "draft_mystery"
    data["configs"][0]["trials"][0]["position"] += 1
    data["configs"][0]["trials"][3]["index"] = 0
    found = _reported(data)
    assert found is not None
    names = [v.rule for v in found]
    assert names == sorted(names, key=rulebook.RULE_NAMES.index)
    durations = [v.path for v in found if v.rule == "durations_coherent"]
    assert durations == ["configs.0.trials.1.wall_s", "configs.1.trials.1.wall_s",
                         "configs.2.trials.1.wall_s", "configs.0.warmups.0",
                         "configs.1.warmups.0", "configs.2.warmups.0"]
    schedule = [v.path for v in found if v.rule == "trials_fit_schedule"]
    assert schedule[:2] == ["configs.0.trials", "configs.0.trials.0.position"]
    assert {v.path for v in found if v.rule == "speculation_coherent"} == {
        f"configs.{ci}.speculation.requested" for ci in range(3)}


def test_more_than_the_limit_is_cut_at_the_limit() -> None:
    data = fresh(0, "hardnumbers-m2", engine_version="0.12.8")
    for config in data["configs"]:
        for trial in config["trials"]:
            trial.update(eval_count=999, wall_s=0.001, ttft_s=None)  # 15 trials, 30 violations
    found = _reported(data)
    assert found is not None
    assert len(found) == rulebook.MAX_VIOLATIONS
    assert [v.rule for v in found] == (["eval_count_fits_num_predict"] * 15
                                       + ["durations_coherent"] * 5)
    assert [v.path for v in found[15:]] == [f"configs.0.trials.{i}.wall_s" for i in range(5)]


# --- edges: a trial set right at one rule's bound, each way ------------------------------

EDGES: list[tuple[str, Callable[[dict[str, Any]], None]]] = []


def _edges(name: str, values: list[Any]) -> Callable[[Callable[[dict[str, Any], Any], None]],
                                                      None]:
    def register(fn: Callable[[dict[str, Any], Any], None]) -> None:
        for value in values:
            EDGES.append((f"{name}={value!r}", lambda d, v=value: fn(d, v)))
    return register


def _t(d: dict[str, Any]) -> dict[str, Any]:
    trial: dict[str, Any] = d["configs"][1]["trials"][2]
    return trial


def _set_eval_ns(t: dict[str, Any], eval_ns: int) -> None:
    """eval_duration_ns, with total and wall grown to hold it (only the rate rules see it)."""
    t["eval_duration_ns"] = eval_ns
    parts = t["load_duration_ns"] + (t["prompt_eval_duration_ns"] or 0) + eval_ns
    t["total_duration_ns"] = max(t["total_duration_ns"], parts)
    t["wall_s"] = max(t["wall_s"], t["total_duration_ns"] / 1e9 + 0.01)


@_edges("eval_count", [(c, r) for c in (198, 199, 200, 201) for r in ("length", "stop", None)])
def _eval_count(d: dict[str, Any], value: tuple[int, str | None]) -> None:
    _t(d)["eval_count"], _t(d)["done_reason"] = value


@_edges("done_reason", ["stop", "length", "unload", None])
def _done_reason(d: dict[str, Any], value: str | None) -> None:
    _t(d)["done_reason"] = value


@_edges("eval_ns_minus_total", [-1, 0, 1])
def _eval_vs_total(d: dict[str, Any], value: int) -> None:
    t = _t(d)
    t["load_duration_ns"], t["prompt_eval_duration_ns"] = 0, None
    t["eval_duration_ns"] = t["total_duration_ns"] + value


@_edges("parts_minus_allowed", [-1, 0, 1])
def _parts(d: dict[str, Any], value: int) -> None:
    t = _t(d)
    total = t["total_duration_ns"]
    slack = rulebook.DURATION_TOLERANCE_NS + int(total * rulebook.DURATION_TOLERANCE_FRACTION)
    t["prompt_eval_duration_ns"] = total + slack - t["eval_duration_ns"] - t["load_duration_ns"]
    t["prompt_eval_duration_ns"] += value


@_edges("wall_steps_from_floor", [-2, -1, 0, 1, 2])
def _wall(d: dict[str, Any], value: int) -> None:
    t = _t(d)
    wall = t["total_duration_ns"] / 1e9 * (1 - rulebook.DURATION_TOLERANCE_FRACTION)
    wall -= rulebook.WALL_TOLERANCE_S
    for _ in range(abs(value)):
        wall = math.nextafter(wall, math.copysign(math.inf, value))
    t["wall_s"] = wall


@_edges("ttft_steps_from_wall", [None, -1, 0, 1])
def _ttft(d: dict[str, Any], value: int | None) -> None:
    t = _t(d)
    t["ttft_s"] = None if value is None else (
        t["wall_s"] if value == 0 else math.nextafter(t["wall_s"], value * math.inf)
    )


@_edges("eval_count_ns", [(0, 1000), (0, 0), (1, 0), (15, 0), (200, 0)])
def _zero(d: dict[str, Any], value: tuple[int, int]) -> None:
    _t(d)["eval_count"], _t(d)["done_reason"] = value[0], "stop"
    _set_eval_ns(_t(d), value[1])


@_edges("rate_edge", [(c, e, n) for c in (15, 16, 17) for e in ("max", "min") for n in (-1, 0, 1)])
def _rate(d: dict[str, Any], value: tuple[int, str, int]) -> None:
    count, edge, step = value
    t = _t(d)
    t["eval_count"], t["done_reason"] = count, "stop"
    per_token = 100_000 if edge == "max" else 100_000_000_000  # 10,000 and 0.01 tok/s
    _set_eval_ns(t, count * per_token + step)


@_edges("created_at", [(e, s) for e in ("future", "past") for s in (-1, 0, 1)])
def _created(d: dict[str, Any], value: tuple[str, int]) -> None:
    edge = timedelta(minutes=5) if value[0] == "future" else -timedelta(days=30)
    when = NOW + edge + value[1] * timedelta(microseconds=1)
    d["created_at"] = when.isoformat().replace("+00:00", "Z")


@_edges("warmups", [(n, load) for n in (0, 1, 2, 3) for load in (None, 10, 11)])
def _warmups(d: dict[str, Any], value: tuple[int, int | None]) -> None:
    count, load = value
    d["configs"][0]["warmups"] = [
        {"wall_s": 1.0, "load_duration_ns": load, "total_duration_ns": 10}
    ] * count


@_edges("trials", ["reversed", "swap_index", "index_gap", "position", "drop", "incomplete"])
def _trials(d: dict[str, Any], value: str) -> None:
    trials = d["configs"][1]["trials"]
    if value == "reversed":
        trials.reverse()
    elif value == "swap_index":
        trials[0]["index"], trials[1]["index"] = trials[1]["index"], trials[0]["index"]
    elif value == "index_gap":
        trials[-1]["index"] += 1
    elif value == "position":
        trials[0]["position"] += 1
    elif value == "drop":
        trials.pop()
    else:
        trials.pop()
        d["complete"] = False


@_edges("options", ["int_for_float", "float_for_int", "bool_for_int", "false_for_zero",
                    "int_for_bool_less",
                    "extra", "missing", "request_field"])
def _options(d: dict[str, Any], value: str) -> None:
    options = d["configs"][0]["request_options"]
    if value == "int_for_float":
        options["temperature"] = int(options["temperature"])
    elif value == "float_for_int":
        options["seed"] = float(options["seed"])
    elif value == "bool_for_int":
        options["seed"] = True
    elif value == "false_for_zero":  # False == 0.0 in Python, not as JSON values
        options["temperature"] = False
    elif value == "int_for_bool_less":
        options["num_predict"] = 200.0
    elif value == "extra":
        options["mirostat"] = 0
    elif value == "missing":
        options.pop("top_k", None)
    else:
        d["configs"][0]["request_fields"]["keep_alive"] = "5m"


@_edges("configs", ["reversed", "duplicate", "drop", "drop_incomplete", "rename"])
def _configs(d: dict[str, Any], value: str) -> None:
    configs = d["configs"]
    if value == "reversed":
        configs.reverse()
    elif value == "duplicate":
        configs.append(json.loads(json.dumps(configs[1])))
    elif value.startswith("drop"):
        configs.pop()
        d["complete"] = value == "drop"
    else:
        configs[1]["name"] = "draft_mystery"


@_edges("speculation", [
    (k, v) for k, values in {
        "requested": [True, False],
        "mechanism": ["none", "draft_model_field", "draft_num_predict"],
        "engine_can_honor": [None, True, False],
        "observed": ["confirmed", "not_applied", "not_observed", "unknown"],
        "drafted_tokens": [None, 0, 100],
        "accepted_tokens": [None, 0, 100, 101],
        "counters_source": [None, "llama_server_log"],
    }.items() for v in values
])
def _speculation(d: dict[str, Any], value: tuple[str, Any]) -> None:
    d["configs"][-1]["speculation"][value[0]] = value[1]


@_edges("counters_on_config", [0, 1, 2])
def _counters(d: dict[str, Any], value: int) -> None:
    d["configs"][value]["speculation"].update(
        drafted_tokens=100, accepted_tokens=50, counters_source="llama_server_log"
    )


@_edges("head", [("role", "baseline"), ("role", "draft"), ("model", "llama3:8b"),
                 ("draft_model", None), ("draft_model", "other:1b")])
def _head(d: dict[str, Any], value: tuple[str, Any]) -> None:
    d["configs"][-1][value[0]] = value[1]


@_edges("engine_version", ["0.12.8", "0.29.9", "0.30.0", "x-build"])
def _engine(d: dict[str, Any], value: str) -> None:
    d["engine"]["version"] = value


@_edges("target", [None, "llama3:8b"])
def _target(d: dict[str, Any], value: str | None) -> None:
    d["protocol"]["parameters"] = {} if value is None else {"target": value}


def _honest_verdicts(d: dict[str, Any]) -> None:
    """Each config's observed set to what the one rule derives (when the schema takes it)."""
    try:
        submission = parse_submission(json.dumps(d).encode())
    except PayloadSchemaError:
        return
    for config, verdict in zip(d["configs"], submission_verdicts(submission), strict=True):
        config["speculation"]["observed"] = verdict


def _trial_counters(d: dict[str, Any], drafted: int, accepted: int, totals: bool) -> None:
    config = d["configs"][-1]
    for t in config["trials"]:
        t["counters"] = {"drafted": drafted, "accepted": accepted, "mean_accepted_len": None,
                         "source": "llama_server_log"}
    if totals:
        n = len(config["trials"])
        config["speculation"].update(drafted_tokens=drafted * n, accepted_tokens=accepted * n,
                                     counters_source="llama_server_log")


_MTP = {"source": "llama_server_log", "spec_type": "draft-mtp", "draft_n_max": 4,
        "draft_model": False, "draft_model_digest": None, "synthetic_flags": []}


# Wire v2: each edge moves the submission to schema_version 2 first.
@_edges("v2", ["plain", "mlx", "mlx_honest", "sums", "sums_honest", "no_totals", "over_drafted",
               "over_eval", "baseline_mtp", "baseline_mtp_honest", "synthetic_honest",
               "engine_api", "llama_server_api", "new_verdict"])
def _wire_v2(d: dict[str, Any], value: str) -> None:
    d["schema_version"] = 2
    if value.startswith("mlx"):
        d["engine"]["runtime"] = "mlx"
    elif value.startswith("sums"):
        _trial_counters(d, 40, 30, totals=True)
    elif value == "no_totals":
        _trial_counters(d, 40, 30, totals=False)
    elif value == "over_drafted":
        _trial_counters(d, 40, 41, totals=True)
    elif value == "over_eval":
        _trial_counters(d, 900, 899, totals=True)
    elif value.startswith("baseline_mtp"):
        d["configs"][0]["speculation"]["launches"] = [dict(_MTP)]
    elif value == "synthetic_honest":
        d["configs"][-1]["speculation"]["launches"] = [
            dict(_MTP, synthetic_flags=["--spec-synth-len"])]
    elif value in ("engine_api", "llama_server_api"):
        _trial_counters(d, 40, 30, totals=True)
        for t in d["configs"][-1]["trials"]:
            t["counters"]["source"] = "engine_api"
        d["configs"][-1]["speculation"]["counters_source"] = "engine_api"
        if value == "llama_server_api":
            d["engine"]["name"] = "llama-server"
    elif value == "new_verdict":
        d["configs"][-1]["speculation"]["observed"] = "cannot_compare"
    if value.endswith("_honest"):
        _honest_verdicts(d)


@pytest.mark.parametrize("setup", PROTOCOLS[:3], ids=["m2", "draft-counters", "draft"])
@pytest.mark.parametrize(("name", "edge"), EDGES, ids=[e[0] for e in EDGES])
def test_violations_equal_the_rules_at_each_edge(
    name: str, edge: Callable[[dict[str, Any]], None], setup: tuple[str, str, bool]
) -> None:
    protocol, version, counters = setup
    data = fresh(2, protocol, engine_version=version, counters_seen=counters)
    edge(data)
    _agree(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 7),
    st.sampled_from(PROTOCOLS),
    st.lists(st.sampled_from(EDGES), max_size=4),
)
def test_violations_equal_the_rules_for_combined_edges(
    seed: int, setup: tuple[str, str, bool], edges: list[tuple[str, Any]]
) -> None:
    protocol, version, counters = setup
    data = fresh(seed, protocol, engine_version=version, counters_seen=counters)
    for _name, edge in edges:
        try:
            edge(data)
        except (IndexError, KeyError, TypeError):
            continue  # an edge that an earlier one made impossible (a config or trial gone)
    event(f"consistent: {_agree(data)}")


# --- many places broken at once: any trial of any config ----------------------------------

TRIAL_VALUES: dict[str, list[Any]] = {
    "index": [0, 1, 5, 6, 7],
    "position": [0, 1, 17, 18],
    "eval_count": [0, 1, 15, 16, 198, 199, 200, 201, 999],
    "eval_duration_ns": [0, 1, 100_000, 10**9, 10**12],
    "total_duration_ns": [0, 1, 10**9, 10**12],
    "load_duration_ns": [0, 10**9, 10**12],
    "prompt_eval_duration_ns": [None, 0, 10**12],
    "wall_s": [0.0, 0.001, 1.0, 1000.0],
    "ttft_s": [None, 0.0, 1000.0],
    "done_reason": [None, "stop", "length", "unload"],
}


@st.composite
def trial_breaks(draw: st.DrawFn) -> tuple[int, int, str, Any]:
    field = draw(st.sampled_from(sorted(TRIAL_VALUES)))
    # trial -1: every trial of the config (so the limit on violations is reached often)
    return (draw(st.integers(0, 2)), draw(st.integers(-1, 5)), field,
            draw(st.sampled_from(TRIAL_VALUES[field])))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 7),
    st.sampled_from(PROTOCOLS),
    st.lists(trial_breaks(), max_size=30),
    st.lists(st.sampled_from(CASES), max_size=3),
)
def test_violations_equal_the_rules_with_many_places_broken(
    seed: int, setup: tuple[str, str, bool], breaks: list[tuple[int, int, str, Any]],
    cases: list[tuple[str, str, Any]],
) -> None:
    protocol, version, counters = setup
    data = fresh(seed, protocol, engine_version=version, counters_seen=counters)
    for ci, ti, field, value in breaks:
        trials = data["configs"][ci % len(data["configs"])]["trials"]
        for trial in trials if ti == -1 else [trials[ti % len(trials)]]:
            trial[field] = value
    for _name, _rule, breaker in cases:
        try:
            breaker(data)
        except (IndexError, KeyError, TypeError):
            continue
    found = _reported(data)
    event("schema refused" if found is None else
          f"violations: {min(len(found), rulebook.MAX_VIOLATIONS) // 5 * 5}+")


