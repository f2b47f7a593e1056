"""Wire format v2: a superset that still reads, stores and re-serializes v1 exactly."""

import hashlib
import json
from pathlib import Path

import pytest

from specschema import (
    Launch,
    PayloadSchemaError,
    TrialCounters,
    parse_submission,
    submission_bytes,
    submission_verdicts,
)
from specschema.examples import example_submission

DATA = Path(__file__).parent / "data"
SCHEMAS = Path(__file__).resolve().parents[2] / "schema" / "jsonschema"
# The published v1 JSON Schema is frozen: v2 is a new file, v1 is never regenerated.
V1_SCHEMA_SHA256 = "3e1d5d93fc843c17bf42e68f50d38b098bfb56addc80e291bd183d7fda53e115"


def test_v1_schema_file_is_frozen() -> None:
    data = (SCHEMAS / "submission.v1.schema.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == V1_SCHEMA_SHA256
    assert (SCHEMAS / "submission.v2.schema.json").exists()


def test_a_stored_v1_payload_parses_and_keeps_its_bytes() -> None:
    raw = (DATA / "submission.v1.json").read_bytes()  # written before v2 (see .provenance)
    submission = parse_submission(raw)
    assert submission.schema_version == 1
    assert submission_bytes(submission) == raw
    # The v1 verdicts are what the v2 rule derives from v1 evidence.
    assert submission_verdicts(submission) == [c.speculation.observed for c in
                                               submission.configs]


def _v1() -> dict:  # type: ignore[type-arg]
    return json.loads((DATA / "submission.v1.json").read_bytes())


def _v2(**changes: object) -> dict:  # type: ignore[type-arg]
    data = _v1()
    data["schema_version"] = 2
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["engine"].update(name="llama-server"),
        lambda d: d["engine"].update(runtime="mlx"),
        lambda d: d["engine"].update(build="b10488"),
        lambda d: d.update(engine_log="not_given"),
        lambda d: d["models"][0].update(format="gguf"),
        lambda d: d["configs"][1]["speculation"].update(observed="baseline_speculated"),
        lambda d: d["configs"][1]["speculation"].update(observed="incompatible"),
        lambda d: d["configs"][1]["speculation"].update(refusal="llama.cpp refuses it"),
        lambda d: d["configs"][1]["speculation"].update(diverged_at=82),
        lambda d: d["configs"][1]["trials"][0].update(diverged_at=82),
        lambda d: d["configs"][1]["speculation"].update(counters_source="engine_api"),
        lambda d: d["configs"][1]["speculation"].update(mean_accepted_len=2.5),
        lambda d: d["configs"][1]["speculation"].update(launches=[{"source": "engine_command"}]),
        lambda d: d["configs"][1]["trials"][0].update(
            counters={"drafted": 4, "accepted": 3, "source": "llama_server_log"}),
    ],
)
def test_v1_refuses_what_only_v2_has(mutate: object) -> None:
    data = _v1()
    mutate(data)  # type: ignore[operator]
    with pytest.raises(PayloadSchemaError, match="send schema_version 2"):
        parse_submission(json.dumps(data).encode())
    data["schema_version"] = 2  # the same content is a valid v2 submission
    assert parse_submission(json.dumps(data).encode()).schema_version == 2


def test_unknown_versions_are_refused() -> None:
    for version in (0, 3, "2"):
        with pytest.raises(PayloadSchemaError):
            parse_submission(json.dumps(_v2(schema_version=version)).encode())


def test_v2_round_trip_carries_the_new_fields() -> None:
    submission = example_submission("ollama-draft", seed=2, engine_version="0.34.1",
                                    target="gemma4:mtp", counters_seen=True,
                                    schema_version=2, runtime="ggml")
    again = parse_submission(submission_bytes(submission))
    assert again == submission
    spec4 = again.configs[1]
    assert spec4.trials[0].counters is not None
    assert spec4.trials[0].counters.source == "llama_server_log"
    assert spec4.speculation.drafted_tokens == sum(
        t.counters.drafted for t in spec4.trials if t.counters)
    assert again.engine.runtime == "ggml"


@pytest.mark.parametrize("flag", ["a b", "x" * 49, "<script>", ""])
def test_launch_flags_are_names_not_text(flag: str) -> None:
    assert Launch(source="llama_server_log", synthetic_flags=["--spec-synth-len"])
    with pytest.raises(ValueError):
        Launch(source="llama_server_log", synthetic_flags=[flag])


def test_a_draft_model_is_a_digest_never_a_path() -> None:
    with pytest.raises(ValueError):
        Launch(source="llama_server_log", draft_model=True,
               draft_model_digest="/home/me/.ollama/models/blobs/sha256-ab")
    with pytest.raises(ValueError):
        TrialCounters(drafted=-1, accepted=0, source="mlx_log")
