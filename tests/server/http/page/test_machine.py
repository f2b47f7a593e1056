"""The first screen's candidates (http/page/machine.py), from board groups: one candidate per
config on the chosen machine, measured ones best first, and only a confirmed group ever
read as a measured speedup."""

from __future__ import annotations

from typing import Any

import pytest

from specserver.board.aggregate import GroupAggregate
from specserver.http.page import machine

TARGET = {"target_model": "qwen3:14b", "target_digest": None, "target_quant": None}
MACHINE = {"chip": {"chip": "Apple M3 Pro"}, "memory_gb": {"memory_gb": 36}}


def _group(config: str, verdict: str | None, median: float | None, *, contributors: int = 3,
           few: bool = False, domain: str | None = None, **extra: Any) -> GroupAggregate:
    key: dict[str, dict[str, Any]] = {
        "protocol": {"protocol_id": "ollama-draft", "protocol_version": 1,
                     "protocol_sha256": "ab" * 32},
        "target": TARGET,
        "draft": {"config_name": config, "draft_model": None, "draft_digest": None,
                  "draft_quant": None, "mechanism": "draft_num_predict"},
        "engine": {"engine": "ollama"}, **MACHINE}
    if verdict is not None:
        key["verdict"] = {"verdict": verdict}
    if domain is not None:
        key["domain"] = {"domain": domain}
    low = None if median is None else median - 0.1
    high = None if median is None else median + 0.1
    return GroupAggregate(key=key, submissions=contributors, contributors=contributors,
                          median_speedup=median, p25_speedup=None if few else low,
                          p75_speedup=None if few else high, min_speedup=low,
                          max_speedup=high, median_speedup_wall=None,
                          median_baseline_tps=20.0, few_results=few,
                          verdicts={verdict or "not_applied": contributors}, **extra)


def test_measured_candidates_come_best_first_and_the_rest_after() -> None:
    found = machine.candidates(
        [_group("spec_8", "confirmed", 1.25), _group("spec_4", "confirmed", 1.6)],
        [_group("spec_2", "not_observed", 1.9)],
        [_group("draft_a", None, 0.98)])
    assert [c.draft for c in found] == ["spec_4", "spec_8", "draft_a", "spec_2"]
    best = found[0].measured
    assert best is not None and best.median == 1.6 and best.outcome == "faster"
    assert (best.low, best.high) == pytest.approx((1.5, 1.7))
    # What is not a measured speedup keeps its ratio and says what it is, nothing more.
    assert found[3].measured is None
    assert [(s.ratio, s.what) for s in found[3].seen] == [(1.9, "not observed")]
    assert [(s.ratio, s.what) for s in found[2].seen] == [(0.98, "noise")]
    assert all(c.predicted.speedup is None and c.predicted.why == "no prediction yet"
               for c in found)


def test_a_config_seen_confirmed_and_unverified_is_one_candidate() -> None:
    found = machine.candidates([_group("spec_4", "confirmed", 1.4)],
                               [_group("spec_4", "unstable", 2.0)], [])
    assert len(found) == 1
    assert found[0].measured is not None and found[0].measured.median == 1.4
    assert [(s.ratio, s.what) for s in found[0].seen] == [(2.0, "unstable")]


def test_few_results_have_no_interval_and_a_slowdown_reads_slower() -> None:
    few = machine.candidates([_group("spec_4", "confirmed", 1.3, contributors=1, few=True)],
                             [], [])[0].measured
    assert few is not None and few.low is None and few.high is None
    slow = machine.candidates([_group("spec_4", "confirmed", 0.4)], [], [])[0].measured
    assert slow is not None and (slow.outcome, slow.words) == ("slower", "slower")
    assert slow.bar == 0.4 / machine.BAR_TOP
    # A spread that includes 1.00x: it speculated, and the board cannot tell which way.
    even = machine.candidates([_group("spec_4", "confirmed", 1.02)], [], [])[0].measured
    assert even is not None and (even.outcome, even.words) == (
        "unclear", "speculated; speedup not resolved")
    long = machine.candidates([_group("spec_4", "confirmed", 9.0)], [], [])[0].measured
    assert long is not None and long.bar == 1.0  # a bar is cut at its top, never longer


def test_per_kind_of_work_from_a_board_split_by_domain() -> None:
    found = machine.candidates(
        [_group("spec_4", "confirmed", 1.4)], [], [],
        [_group("spec_4", "confirmed", 2.1, domain="code_edit"),
         _group("spec_4", "confirmed", 1.1, domain="chat"),
         _group("spec_4", "confirmed", 1.4, domain="unspecified"),  # no prompt set: no column
         _group("spec_9", "confirmed", 3.0, domain="chat")])  # no candidate of its own
    assert {d: m.median for d, m in found[0].by_domain.items()} == {
        "code_edit": 2.1, "chat": 1.1, "unspecified": 1.4}
    assert len(found) == 1
    # Columns in the domain table's order, labelled as it labels them.
    assert machine.domains_of(found) == [("code_edit", "code edit"), ("chat", "chat")]


def test_a_prediction_is_whatever_the_predictor_gives() -> None:
    def predict(candidate: machine.Candidate) -> machine.Predicted:
        return machine.Predicted(1.3, 1.2, 1.4, "") if candidate.draft == "spec_4" else (
            machine.Predicted(why="no acceptance measured for this pair"))

    found = machine.candidates([_group("spec_4", "confirmed", 1.4),
                                _group("spec_8", "confirmed", 1.2)], [], [], predict=predict)
    assert (found[0].predicted.speedup, found[0].predicted.low) == (1.3, 1.2)
    assert found[1].predicted.why == "no acceptance measured for this pair"


def test_the_machine_menus_and_what_is_left_to_choose() -> None:
    labels = {"protocol": "Protocol", "target": "Target model", "chip": "Chip",
              "memory_gb": "Memory (GB)", "engine": "Engine", "os": "OS"}
    values = {"chip": ["Apple M2"], "memory_gb": [24], "target": ["qwen3:14b"]}
    chosen = {"chip": "Apple M9 (rare)"}
    mine, others = machine.menus(labels, values, chosen.get, 20)
    assert [m.name for m in mine] == ["chip", "memory_gb", "engine", "target"]
    assert [m.name for m in others] == ["protocol", "os"]
    assert mine[0].options == ["Apple M2", "Apple M9 (rare)"]  # a value chosen by URL stays
    assert machine.missing(chosen.get, labels) == ["Target model"]
    assert machine.missing({"chip": "x", "target": "y"}.get, labels) == []
