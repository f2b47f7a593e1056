"""Wire models: strict, bounded, and 'not detected' distinct from 0 or ''."""

import json
import statistics
from datetime import UTC, datetime

import pytest

from specschema import (
    Fingerprint,
    PayloadParseError,
    PayloadSchemaError,
    parse_submission,
    submission_bytes,
    summarize,
)
from specschema.examples import example_submission
from specschema.protocol_files import get_protocol


def _payload(**changes: object) -> dict:  # type: ignore[type-arg]
    data = json.loads(submission_bytes(example_submission(seed=3)))
    data.update(changes)
    return data


def test_round_trip_is_identity() -> None:
    submission = example_submission(seed=5)
    assert parse_submission(submission_bytes(submission)) == submission


def test_not_detected_is_null_and_distinct_from_zero_and_empty() -> None:
    fingerprint = Fingerprint()
    assert fingerprint.memory_bytes is None and fingerprint.chip is None
    with pytest.raises(ValueError):
        Fingerprint(chip="")
    with pytest.raises(ValueError):
        Fingerprint(memory_bytes=0)


@pytest.mark.parametrize(
    "change, path",
    [
        ({"surprise": 1}, "surprise"),
        ({"schema_version": 3}, "schema_version"),
        ({"submission_id": "not-a-uuid"}, "submission_id"),
        ({"created_at": "2026-01-01T00:00:00"}, "created_at"),
        ({"created_at": "2026-01-01T00:00:00+02:00"}, "created_at"),
        ({"complete": "yes"}, "complete"),
        ({"note": "x" * 501}, "note"),
        ({"configs": []}, "configs"),
    ],
)
def test_schema_errors_name_the_path(change: dict, path: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(PayloadSchemaError) as info:
        parse_submission(json.dumps(_payload(**change)).encode())
    assert any(d["path"].startswith(path) for d in info.value.details)


def test_nested_paths_and_types() -> None:
    data = _payload()
    data["configs"][0]["trials"][0]["eval_duration_ns"] = -5
    data["configs"][0]["trials"][1]["eval_count"] = "200"
    with pytest.raises(PayloadSchemaError) as info:
        parse_submission(json.dumps(data).encode())
    paths = {d["path"] for d in info.value.details}
    assert "configs.0.trials.0.eval_duration_ns" in paths
    assert "configs.0.trials.1.eval_count" in paths


def test_strict_json_runs_before_schema() -> None:
    raw = submission_bytes(example_submission(seed=1))
    with pytest.raises(PayloadParseError, match="duplicate key"):
        parse_submission(raw[:-1] + b',"complete":true}')


def test_summary_computed_from_trials() -> None:
    submission = example_submission(
        "ollama-draft",
        engine_version="0.33.0",
        draft_speedups={"spec_4": 1.5, "spec_8": 2.0},
        counters_seen=True,
        created_at=datetime(2026, 11, 30, tzinfo=UTC),
    )
    by_name = {s.name: s for s in summarize(submission)}
    base = by_name["spec_off"]
    trials = get_protocol("ollama-draft").trials_for("spec_off")
    assert base.speedup_tps is None and base.trials == trials
    spec8 = by_name["spec_8"]
    assert spec8.observed == "confirmed"
    assert spec8.speedup_tps is not None and 1.7 < spec8.speedup_tps < 2.3
    assert spec8.speedup_tps_ci_low is not None and spec8.speedup_tps_ci_high is not None
    assert spec8.speedup_tps_ci_low <= spec8.speedup_tps <= spec8.speedup_tps_ci_high
    # Hand check of one median: decode tok/s per trial, then the median.
    rates = sorted(
        t.eval_count / t.eval_duration_ns * 1e9 for t in submission.configs[0].trials
    )
    assert base.median_tps == statistics.median(rates)
