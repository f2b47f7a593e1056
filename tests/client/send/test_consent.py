"""The consent screen shows every field a submission sends, and names the engine that ran."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from specschema import Gpu, Launch, Submission
from specschema.engines import descriptor
from specschema.examples import example_submission
from specsubmit.send.consent import consent_lines

KEY = "ab" * 32
SERVER = "https://specbench.example"


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, f"{path}.{index}")
    else:
        yield path, value


def shown(submission: Submission) -> tuple[str, list[str]]:
    """The screen's text, and the sent values it does not show (trials and warm-ups are
    described by what they hold; booleans, floats and timestamps are worded, not printed)."""
    text = "\n".join(consent_lines(submission, SERVER, KEY))
    missing = []
    for path, value in leaves(submission.model_dump(mode="json")):
        if ".trials." in path or ".warmups." in path or path == "created_at":
            continue
        if value is None or isinstance(value, bool | float):
            continue
        if path == "engine.name":  # shown as the engine's label
            value = descriptor(value).label
        if str(value) not in text:
            missing.append(f"{path}={value!r}")
    return text, missing


def llama_server_result() -> Submission:
    sub = example_submission("llamacpp-draft", engine_version="b6123", schema_version=2,
                             counters_seen=True, runtime="ggml")
    fingerprint = sub.fingerprint.model_copy(update={"gpus": [
        Gpu(name_raw="NVIDIA GeForce RTX 4090 Laptop", name="NVIDIA GeForce RTX 4090",
            vendor="nvidia", memory_bytes=16 * 1024**3, driver="550.54.14")]})
    configs = [c.model_copy(update={"speculation": c.speculation.model_copy(update={
        "launches": [Launch(source="engine_command", spec_type="draft-simple", draft_n_max=8,
                            draft_model=True, draft_model_digest="cd" * 32)]})})
        if c.role == "draft" else c for c in sub.configs]
    return sub.model_copy(update={
        "engine": sub.engine.model_copy(update={"name": "llama-server",
                                                "build": "0.5.0-dev (build 1, commit 0c1e570)"}),
        "fingerprint": fingerprint, "configs": configs,
        "note": "stopped early: llama-server failed (EngineDied) after 7 of 30 trials"})


def test_every_field_sent_is_on_the_screen() -> None:
    for submission in (example_submission(seed=3), llama_server_result(),
                       example_submission("ollama-draft", schema_version=2, counters_seen=True,
                                          engine_version="0.34.1", target="m:9b",
                                          runtime="ggml")):
        _, missing = shown(submission)
        assert missing == []


def test_the_note_build_gpu_driver_digests_sizes_and_launches_are_shown() -> None:
    sub = llama_server_result()
    text, _ = shown(sub)
    assert f"  note      {sub.note}" in text
    assert "build '0.5.0-dev (build 1, commit 0c1e570)'" in text
    assert "raw 'NVIDIA GeForce RTX 4090 Laptop'" in text and "driver 550.54.14" in text
    for model in sub.models:
        assert f"{model.size_bytes} bytes, sha256 {model.digest}" in text
    assert ("engine start: engine_command (started by the client), --spec-type draft-simple, "
            f"n-max 8, a draft model, draft sha256 {'cd' * 32}") in text


def test_a_llama_server_result_is_never_called_ollama() -> None:
    text, _ = shown(llama_server_result())
    assert "  engine    llama-server b6123, build" in text
    assert "Ollama" not in text
    ollama_text, _ = shown(example_submission(seed=3, engine_version="0.12.8"))
    assert "  engine    Ollama 0.12.8" in ollama_text
