"""specschema.evidence: the levels and the speedup bound, as pure functions.

The llama-server numbers are real: ``completion-draft-truncated.json`` (tests/fixtures/
llama_server, captured by tests/support/realengine/capture.py: greedy, n_predict 64,
--spec-draft-n-max 8) reports predicted_n 64, draft_n 141, draft_n_accepted 44.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from specschema.evidence import (
    BOUND_SLACK,
    CORROBORATED,
    LEVELS,
    TrialCounts,
    evidence_level,
    rank,
    speedup_bound,
    submission_evidence,
    version_known,
)
from specschema.examples import example_submission
from specschema.summary import summarize
from tests.support.realengine.fixture_files import verbatim

TIMINGS = json.loads(verbatim("completion-draft-truncated.json"))["timings"]
N_MAX = 8  # the capture's --spec-draft-n-max


def api_trials(count: int = 5) -> list[TrialCounts]:
    return [TrialCounts(TIMINGS["predicted_n"], TIMINGS["draft_n"], TIMINGS["draft_n_accepted"],
                        None, "engine_api") for _ in range(count)]


def level(**changes: Any) -> str:
    trials = changes.pop("trials", api_trials())
    values: dict[str, Any] = {
        "wire_version": 2, "engine_name": "llama-server", "engine_version": "0.5.0-dev",
        "engine_log": None, "source": "engine_api", "mean_accepted_len": None,
        "trials": trials, "n_max": N_MAX, "speedup_tps": 1.5,
        "drafted": sum(t.drafted or 0 for t in trials),
        "accepted": sum(t.accepted or 0 for t in trials),
    }
    values.update(changes)
    return evidence_level(**values).level


def test_the_real_llama_server_counters_bound_the_speedup() -> None:
    # 64 generated with 44 accepted: at least 20 target passes; 141 drafted at most 8 per
    # pass: at least 17.6. So at most 64 / 20 = 3.2x.
    bound = speedup_bound(api_trials(), drafted_total=705, accepted_total=220, n_max=N_MAX,
                          mean_len=None)
    assert bound == pytest.approx(64 / 20)
    assert level(speedup_tps=3.2 * BOUND_SLACK * 0.99) == "engine_api"
    assert level(speedup_tps=3.2 * BOUND_SLACK * 1.01) == "implausible"


def test_api_counters_rank_above_log_counters_above_none() -> None:
    api = level()
    logged = level(engine_name="ollama", engine_version="0.34.1", engine_log="read",
                   source="llama_server_log",
                   trials=[TrialCounts(t.eval_count, t.drafted, t.accepted, None,
                                       "llama_server_log") for t in api_trials()])
    nothing = level(source=None, drafted=None, accepted=None,
                    trials=[TrialCounts(64) for _ in range(5)])
    assert (api, logged, nothing) == ("engine_api", "log", "none")
    assert rank(api) > rank(logged) > rank("reported") > rank(nothing)
    assert CORROBORATED == {"engine_api", "log"} and LEVELS[0] == "engine_api"


def test_three_x_at_ten_percent_acceptance_is_implausible() -> None:
    # 200 generated per trial, 10 % of 1,000 drafted accepted with draft_num_predict 4:
    # 1,000 drafted need 250 passes (more than 200 tokens allow), so even 1x is a stretch.
    trials = [TrialCounts(200, 1000, 100, None, "llama_server_log") for _ in range(5)]
    common = {"engine_name": "ollama", "engine_version": "0.34.1", "engine_log": "read",
              "source": "llama_server_log", "trials": trials}
    assert level(**common, n_max=4, speedup_tps=3.0) == "implausible"
    # Without n_max the bound is still 200 / (200 - 100) = 2x: 3x is implausible.
    assert level(**common, n_max=None, speedup_tps=3.0) == "implausible"
    # An honest 10 %: 200 drafted, 20 accepted, a 1.05x speedup is explained.
    honest = [TrialCounts(200, 200, 20, None, "llama_server_log") for _ in range(5)]
    assert level(**{**common, "trials": honest}, n_max=4, speedup_tps=1.05) == "log"


def test_the_mean_accepted_length_caps_the_bound() -> None:
    trials = [TrialCounts(200, 240, 180, 0.5, "engine_api") for _ in range(5)]
    assert speedup_bound(trials, drafted_total=1200, accepted_total=900, n_max=4,
                         mean_len=None) == pytest.approx(1.5)  # 1 + 0.5 accepted per round
    assert level(trials=trials, speedup_tps=2.5) == "implausible"


def test_drafting_more_than_n_max_per_token_is_implausible() -> None:
    trials = [TrialCounts(64, 64 * 9, 10, None, "engine_api") for _ in range(5)]
    assert level(trials=trials, speedup_tps=1.0) == "implausible"


@pytest.mark.parametrize("version", ["-2+3", "x", "latest", ".1"])
def test_an_unparseable_version_never_corroborates(version: str) -> None:
    assert not version_known("ollama", version)
    assert level(engine_name="ollama", engine_version=version, engine_log="read",
                 source="llama_server_log",
                 trials=[TrialCounts(64, 141, 44, None, "llama_server_log")] * 5) == "reported"
    assert level(engine_version=version) == "reported"


def test_llama_cpp_build_numbers_are_versions_of_llama_server_only() -> None:
    assert version_known("llama-server", "6123") and version_known("llama-server", "b6123")
    assert not version_known("ollama", "6123")
    assert level(engine_version="b6123") == "engine_api"


@pytest.mark.parametrize("changes", [
    {"engine_log": "not_given"},  # counters from a log the client says it did not read
    {"engine_log": "unreadable"},
    {"engine_log": None},  # v2: null means the engine's API, not a log
], ids=["not_given", "unreadable", "null"])
def test_log_counters_without_a_read_log_are_only_reported(changes: dict[str, Any]) -> None:
    trials = [TrialCounts(64, 141, 44, None, "llama_server_log")] * 5
    assert level(engine_name="ollama", engine_version="0.34.1", source="llama_server_log",
                 trials=trials, **changes) == "reported"


def test_totals_without_trial_counters_are_only_reported_in_v2() -> None:
    bare = [TrialCounts(64) for _ in range(5)]
    common = {"engine_name": "ollama", "engine_version": "0.30.1", "source": "llama_server_log",
              "trials": bare, "drafted": 705, "accepted": 220}
    assert level(**common, wire_version=2, engine_log="read") == "reported"
    assert level(**common, wire_version=1, engine_log=None) == "log"  # v1 has only totals


def test_trial_counters_that_do_not_add_up_are_implausible() -> None:
    assert level(drafted=706) == "implausible"
    assert level(accepted=221) == "implausible"
    assert level(source="engine_api", trials=[TrialCounts(64, 141, 44, None,
                                                          "llama_server_log")] * 5) == "reported"


def test_submission_evidence_matches_the_example_generator() -> None:
    sub = example_submission("ollama-draft", seed=3, engine_version="0.34.1", target="gemma4:mtp",
                             counters_seen=True, schema_version=2, runtime="ggml")
    speedups = {m.name: m.speedup_tps for m in summarize(sub)}
    levels = [e.level for e in submission_evidence(sub, speedups)]
    assert levels == ["none", "log", "log"]
    # The same counters with a 5x speedup: more than 240 drafted / 180 accepted explain.
    fast = example_submission("ollama-draft", seed=3, engine_version="0.34.1",
                              target="gemma4:mtp", counters_seen=True, schema_version=2,
                              runtime="ggml", draft_speedups={"spec_4": 5.0})
    speedups = {m.name: m.speedup_tps for m in summarize(fast)}
    assert [e.level for e in submission_evidence(fast, speedups)][1] == "implausible"
