"""The server judges a run's stability by the client's rule (specschema.stability): a timed
run with a steady drift is confirmed on both sides, and a verdict the rule does not give
is refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from specschema import Submission, submission_verdicts
from specschema.examples import example_submission
from specschema.payload import parse_submission, submission_bytes
from specschema.protocol_files import all_protocols
from specserver.ingest import rules

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LLAMA_V3 = next(p for p in all_protocols() if (p.id, p.version) == ("llamacpp-draft", 3))


def _drifting(times: bool) -> dict[str, Any]:
    """A run whose machine slowed by 60 % from first trial to last, with or without times."""
    sub = example_submission(LLAMA_V3, seed=5, engine_version="b1", schema_version=2,
                             runtime="ggml", counters_seen=True, blocks=True, drift=0.6,
                             created_at=NOW - timedelta(hours=1),
                             draft_speedups={"draft_qwen3_0.6b_n8": 2.0})
    data: dict[str, Any] = json.loads(submission_bytes(sub))
    if times:
        clock = 0.0
        for trial in sorted((t for c in data["configs"] for t in c["trials"]),
                            key=lambda t: t["position"]):
            trial["started_s"], trial["load_1m"] = round(clock, 3), 1.5
            clock += trial["wall_s"]
    return data


def _broken(data: dict[str, Any]) -> set[str]:
    submission = parse_submission(json.dumps(data).encode())
    ctx = rules.RuleContext(LLAMA_V3, NOW, timedelta(days=30), timedelta(minutes=5))
    return {v.rule for v in rules.violations(submission, ctx)}


def _claim(data: dict[str, Any], submission: Submission) -> dict[str, Any]:
    for config, verdict in zip(data["configs"], submission_verdicts(submission), strict=True):
        config["speculation"]["observed"] = verdict
    return data


def test_a_steady_drift_is_unstable_untimed_and_confirmed_timed_on_the_server_too() -> None:
    untimed = _drifting(times=False)
    assert {c["speculation"]["observed"] for c in untimed["configs"][1:]} >= {"unstable"}
    assert _broken(untimed) == set()
    timed = _drifting(times=True)  # still claiming the older rule's unstable
    assert "speculation_coherent" in _broken(timed)
    claimed = _claim(timed, parse_submission(json.dumps(timed).encode()))
    assert {c["speculation"]["observed"] for c in claimed["configs"][1:]} - {"incompatible"} == {
        "confirmed"}
    assert _broken(claimed) == set()
