"""Refused drafts on the real llama-server (the pinned build): the client's rule says what
the engine does, pair for pair, and a run with a refused draft completes every other config.

- ``test_the_rule_agrees_with_the_engine``: for each draft variant, written by the project's
  tiny writer (a retexted vocabulary tail as between Qwen2.5 and Qwen3, another EOS id with
  and without add-EOS, another vocab order, an exact truncation), the real server's
  ``/slots`` ``speculative`` and its ``timings.draft_n`` are what
  ``compatibility.vocab_mismatch`` predicts.
- ``test_a_refusal_at_start_is_incompatible``: with the client's rule switched off, the
  engine's own refusal (its log, ``/slots``) still makes that config incompatible and the
  run goes on.
- ``test_specsubmit_run_with_a_refused_draft``: ``specsubmit run`` end to end, one draft a
  retexted tail: exit 0, the others measured, the refused one named with its reason.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specschema import Fingerprint, get_protocol
from specschema.payload import parse_submission
from specsubmit.engines.llama_server import compatibility
from specsubmit.engines.llama_server import engine as engine_module
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.engines.llama_server.gguf_header import read_header
from specsubmit.run.runner import RunListener, RunSettings, run_protocol
from tests.support.realengine.ollama_store import add_model
from tests.support.realengine.server import completion_body, running_server
from tests.support.realengine.tiny_gguf import ModelSet, model_set_specs, write_model

pytestmark = pytest.mark.realengine

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory, tiny_model_set: ModelSet
             ) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gguf-variants")
    truncated = model_set_specs()["draft_truncated"]
    return {
        "truncated": tiny_model_set.draft_truncated,
        "incompatible": tiny_model_set.draft_incompatible,
        "retext4": write_model(folder / "retext4.gguf",
                               dataclasses.replace(truncated, retext_tail=4)),
        "retext1": write_model(folder / "retext1.gguf",
                               dataclasses.replace(truncated, retext_tail=1)),
        "other_eos": write_model(folder / "other_eos.gguf",
                                 dataclasses.replace(truncated, eos_id=0)),
        "other_eos_added": write_model(folder / "other_eos_added.gguf",
                                       dataclasses.replace(truncated, eos_id=0, add_eos=True)),
    }


@pytest.mark.parametrize("variant", ["truncated", "incompatible", "retext4", "retext1",
                                     "other_eos", "other_eos_added"])
def test_the_rule_agrees_with_the_engine(variant: str, tmp_path: Path, llama_server_bin: Path,
                                         tiny_model_set: ModelSet,
                                         variants: dict[str, Path]) -> None:
    draft = variants[variant]
    why = compatibility.vocab_mismatch(read_header(tiny_model_set.target), read_header(draft))
    expected = {"truncated": None, "other_eos": None}
    assert (why is None) == (variant in expected), why
    with running_server(llama_server_bin, tiny_model_set.target, tmp_path / "server.log",
                        draft=draft) as server:
        slots = server.get("/slots")
        timings = server.post("/completion", completion_body(n_predict=16))["timings"]
        log = server.log_text()
    speculating = why is None
    assert {slot["speculative"] for slot in slots} == {speculating}
    assert ("draft_n" in timings) == speculating
    assert ("the target and draft vocabs are not compatible" in log) == (not speculating)
    if variant == "other_eos":
        # Another EOS id, neither model appends EOS: llama.cpp drafts with it (a stricter
        # client used to refuse this pair).
        assert timings["draft_n"] > 0 and timings["draft_n_accepted"] > 0
    if variant == "other_eos_added":
        assert "draft model eos tokens must match target model" in log


class _Recorder(RunListener):
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)


def test_a_refusal_at_start_is_incompatible(tmp_path: Path, llama_server_bin: Path,
                                            tiny_model_set: ModelSet, variants: dict[str, Path],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # One draft config in a cut-down protocol: the truncated draft and a retexted one.
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", tiny_model_set.target)
    add_model(folder, "qwen3:0.6b", tiny_model_set.draft_truncated)
    add_model(folder, "qwen3:1.7b", variants["retext4"])
    for name in ("qwen2.5:0.5b", "qwen2.5:1.5b"):
        add_model(folder, name, tiny_model_set.draft_truncated)
    protocol = get_protocol("llamacpp-draft")
    protocol = protocol.model_copy(update={
        "options": protocol.options.model_copy(update={"num_predict": 24})})
    # The client's own check off: only what the engine says after its start remains.
    monkeypatch.setattr(engine_module, "vocab_mismatch", lambda target, draft: None)
    settings = RunSettings(protocol=protocol)
    recorder = _Recorder()
    with LlamaServerEngine(settings, binary=llama_server_bin, models_dir=folder,
                           threads=1) as engine:
        outcome = run_protocol(engine, settings, fingerprint=Fingerprint(memory_gb=8),
                               listener=recorder)
    sub = outcome.submission
    assert sub.complete and outcome.error is None
    by_name = {c.name: c for c in sub.configs}
    refused = by_name["draft_qwen3_1.7b_n8"]
    assert refused.speculation.observed == "incompatible" and refused.trials == []
    assert refused.speculation.refusal == (
        "llama-server started without speculation: it refused qwen3:1.7b as a draft for "
        "qwen3:14b (the target and draft vocabs are not compatible; failed to initialize "
        "speculative decoding context: draft model vocab type must match target model to use "
        "speculation)")
    others = [c for c in sub.configs if c.name != refused.name]
    assert all(len(c.trials) == protocol.trials_for(c.name) for c in others)
    assert {c.speculation.observed for c in others if c.role == "draft"} <= {"confirmed",
                                                                              "unstable"}
    assert all(c.speculation.drafted_tokens for c in others if c.role == "draft")
    assert any("draft_qwen3_1.7b_n8: llama-server refused the draft" in w
               for w in recorder.warnings)


def test_specsubmit_run_with_a_refused_draft(tmp_path: Path, llama_server_bin: Path,
                                             tiny_model_set: ModelSet,
                                             variants: dict[str, Path]) -> None:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", tiny_model_set.target)
    add_model(folder, "qwen3:0.6b", tiny_model_set.draft_truncated)
    add_model(folder, "qwen3:1.7b", tiny_model_set.draft_identical)
    add_model(folder, "qwen2.5:0.5b", tiny_model_set.draft_unrelated)
    add_model(folder, "qwen2.5:1.5b", variants["retext4"])  # as Qwen2.5 is to Qwen3
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPECSUBMIT_", "OLLAMA_", "LLAMA_ARG_"))}
    env.update(HOME=str(tmp_path / "home"), SPECSUBMIT_HOME=str(tmp_path / "state"),
               SPECSUBMIT_LOCKS=str(tmp_path / "locks"),
               COLUMNS="160")
    output = tmp_path / "result.json"
    result = subprocess.run(
        [SCRIPT, "run", "--engine", "llama-server", "--protocol", "llamacpp-draft",
         "--ollama-models", str(folder), "--llama-threads", "1", "--llama-server",
         str(llama_server_bin), "--no-submit", "--output", str(output)],
        capture_output=True, text=True, timeout=1800, env=env, check=False,
        stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    sub = parse_submission(output.read_bytes())
    assert sub.complete
    observed = {c.name: c.speculation.observed for c in sub.configs}
    assert observed["draft_qwen2.5_1.5b_n8"] == "incompatible"
    # (unstable when the loaded machine's baseline blocks disagree: a verdict of the
    # measurement, not of the draft; either way each ran and speculated)
    assert {v for k, v in observed.items() if k not in ("no_draft", "draft_qwen2.5_1.5b_n8")
            } <= {"confirmed", "unstable"}
    assert all(c.speculation.drafted_tokens for c in sub.configs
               if c.role == "draft" and c.name != "draft_qwen2.5_1.5b_n8")
    refused = next(c for c in sub.configs if c.name == "draft_qwen2.5_1.5b_n8")
    assert refused.trials == [] and "<|retext_0|>" in (refused.speculation.refusal or "")
    run = get_protocol("llamacpp-draft").for_run(sub.protocol.parameters)
    assert all(len(c.trials) == run.trials_for(c.name) for c in sub.configs
               if c is not refused)
    # --llama-threads 1, recorded in every launch of the result.
    assert {launch.threads for c in sub.configs for launch in c.speculation.launches} == {1}
    words = " ".join(result.stdout.split())
    assert "draft_qwen2.5_1.5b_n8 was not run: llama.cpp refuses qwen2.5:1.5b" in words
    assert "on llama-server 0.5.0-dev" in words
    assert "recorded as incompatible" in result.stderr


def test_the_engine_returns_the_generated_token_ids(tmp_path: Path, llama_server_bin: Path,
                                                    tiny_model_set: ModelSet) -> None:
    """The streamed /completion with return_tokens (what the engine adapter sends) gives
    one id per generated token, drafted or not, and the same ids with and without a draft
    that is an identical copy."""
    from specsubmit.engines.llama_server.api import LlamaServerApi

    body = {**completion_body(n_predict=32), "stream": True, "return_tokens": True}
    found = {}
    for name, draft in (("plain", None), ("identical", tiny_model_set.draft_identical)):
        with running_server(llama_server_bin, tiny_model_set.target, tmp_path / f"{name}.log",
                            draft=draft) as server:
            api = LlamaServerApi(server.base_url, timeout_s=120)
            try:
                gen = api.completion(body)
            finally:
                api.close()
        assert gen.token_ids is not None and len(gen.token_ids) == gen.eval_count == 32
        found[name] = gen
    assert found["identical"].draft_n and found["plain"].draft_n is None
    assert found["plain"].token_ids == found["identical"].token_ids
