"""The engine descriptors: what each engine's versions can honour, and its words."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specschema import Engine, engine_can_honor
from specschema.conclusion import capability_reason, verdict_help
from specschema.engines import ENGINES, descriptor
from specschema.evidence import version_known


@pytest.mark.parametrize(("mechanism", "version", "engine", "expected"), [
    ("none", "0.1.0", "ollama", True),
    ("draft_model_field", "0.34.1", "ollama", False),
    ("draft_num_predict", "0.29.9", "ollama", False),
    ("draft_num_predict", "0.30.0", "ollama", True),
    ("draft_num_predict", "dev", "ollama", None),
    ("server_launch", "b6123", "llama-server", True),
    ("draft_num_predict", "b6123", "llama-server", False),  # no such option there
    ("draft_model_field", "b6123", "llama-server", False),
])
def test_what_each_engine_can_honor(mechanism: str, version: str, engine: str,
                                    expected: bool | None) -> None:
    assert engine_can_honor(mechanism, version, engine) is expected  # type: ignore[arg-type]


def test_a_v1_submission_is_ollama() -> None:
    assert engine_can_honor("draft_num_predict", "0.30.0") is True
    assert descriptor(None).label == "Ollama"


def test_the_reasons_name_the_engine_and_its_version() -> None:
    assert capability_reason("draft_num_predict", "0.12.8") == (
        "options.draft_num_predict needs Ollama 0.30.0 or later (this is 0.12.8)")
    assert capability_reason("draft_model_field", "b6123", "llama-server") == (
        "llama-server ignores per-request speculative fields")
    assert "Ollama" not in capability_reason("server_launch", "b6123", "llama-server")


def test_the_wire_accepts_exactly_the_described_engines() -> None:
    for name in ENGINES:
        assert Engine(name=name, version="1.0.0").name == name
    with pytest.raises(ValidationError, match="unknown engine 'vllm'"):
        Engine(name="vllm", version="1.0.0")
    schema = Engine.model_json_schema()["properties"]["name"]
    assert schema["enum"] == list(ENGINES)


def test_build_numbers_are_versions_only_where_the_engine_uses_them() -> None:
    assert version_known("llama-server", "b6123") and not version_known("ollama", "b6123")


def test_every_descriptor_words_its_counters_and_what_to_do() -> None:
    for engine in ENGINES.values():
        assert engine.label and engine.no_counters and engine.no_counters_todo
        for source, words in engine.counter_sources.items():
            assert engine.counters_from(source) == words
        meaning, todo = verdict_help("not_observed", engine.name)
        assert meaning and todo == engine.no_counters_todo
