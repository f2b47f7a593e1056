"""LM Studio, the third engine, against its documented API (tests/fakelmstudio): a run,
its counters and verdicts, what the server makes of it, and the errors a contributor sees."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from specschema import Fingerprint, Protocol, Submission, get_protocol, summarize
from specschema.envelope import envelope_bytes, sign_envelope
from specschema.evidence import submission_evidence
from specschema.payload import parse_submission, submission_bytes
from specserver.ingest.checks import check_submission
from specsubmit.engines.base import RunListener, RunSettings
from specsubmit.engines.lmstudio.adapter import LMStudioOptions
from specsubmit.engines.registry import adapter, engine_options
from specsubmit.errors import EngineModelMissing, EngineUnreachable, UsageError
from specsubmit.run.report import conclusion, summary_table
from specsubmit.run.runner import run_protocol
from tests.client.cli.test_run_cli import _one_error_line, specsubmit
from tests.fakelmstudio import FakeLMModel, FakeLMStudio, default_lm_models
from tests.support.ports import free_port

MACHINE = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24, unified_memory=True)
PROTOCOL = get_protocol("lmstudio-draft")


class Recorder(RunListener):
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)


def run(fake: FakeLMStudio, listener: RunListener | None = None,
        protocol: Protocol = PROTOCOL) -> Submission:
    settings = RunSettings(protocol=protocol)
    with adapter("lmstudio").open(settings, LMStudioOptions(url=fake.url, timeout_s=10)) as engine:
        outcome = run_protocol(engine, settings, fingerprint=MACHINE,
                               listener=listener or Recorder(), stop=threading.Event())
    assert outcome.error is None, outcome.error
    return outcome.submission


def server_checked(sub: Submission):  # type: ignore[no-untyped-def]
    key = nacl.signing.SigningKey(b"\x09" * 32)
    body = envelope_bytes(sign_envelope(submission_bytes(sub), key))
    return check_submission(body, now=datetime.now(UTC), max_age=timedelta(days=30),
                            max_future_skew=timedelta(minutes=5))


@pytest.fixture(scope="module")
def default_run() -> tuple[Submission, list[dict[str, Any]]]:
    """One run against the default fake and its chat requests, for the tests that only read
    them (the fake sleeps its generation time: about 4 s a run). run_protocol keeps no
    state of its own: the CLI's checkpoints and files are not involved."""
    with FakeLMStudio() as fake:
        sub = run(fake)
        chats = [b for m, p, b in fake.requests if p == "/api/v0/chat/completions"]
    return sub, chats


def test_a_protocols_warm_up_tokens_reach_lm_studio_and_the_trials_keep_their_own() -> None:
    # No shipped LM Studio protocol sets warmup_tokens yet; a copy of one that does
    protocol = PROTOCOL.model_copy(update={"warmup_tokens": 5})
    with FakeLMStudio() as fake:
        sub = run(fake, protocol=protocol)
        asked = [b["max_tokens"] for m, p, b in fake.requests
                 if p == "/api/v0/chat/completions"]
    warmups = sum(len(c.warmups) for c in sub.configs)
    trials = sum(len(c.trials) for c in sub.configs)
    limit = PROTOCOL.options.num_predict
    assert warmups > 0 and sorted(asked) == [5] * warmups + [limit] * trials


def test_a_draft_model_run_is_confirmed_by_the_counters_in_each_response(
        default_run: tuple[Submission, list[dict[str, Any]]]) -> None:
    sub, chats = default_run
    # Bracketed, blocks of 2 trials, each after its own warm-up (a switch of draft model
    # loads it): 13 blocks of 3 requests. The baseline's send no draft_model at all, each
    # draft config its own, as a top-level field.
    assert sub.complete and len(chats) == 13 * 3
    small, large = "qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct"
    blocks = [{b.get("draft_model") for b in chats[i:i + 3]} for i in range(0, 39, 3)]
    assert blocks == [{None}, {small}, {large}, {None}, {large}, {small}] * 2 + [{None}]
    assert all("draft_model" not in b for i in range(0, 39, 9) for b in chats[i:i + 3])
    by_model = {(b["model"], b.get("draft_model")) for b in chats}
    assert by_model == {("qwen2.5-14b-instruct", None),
                        ("qwen2.5-14b-instruct", "qwen2.5-0.5b-instruct"),
                        ("qwen2.5-14b-instruct", "qwen2.5-1.5b-instruct")}
    body = chats[0]
    assert (body["max_tokens"], body["temperature"], body["seed"], body["top_k"],
            body["stream"]) == (200, 0.0, 42, 40, False)
    assert "num_ctx" not in body and "context_length" not in body  # a load setting there
    assert [c.speculation.observed for c in sub.configs] == [
        "not_applied", "confirmed", "confirmed"]
    draft = sub.configs[1]
    # stats.total_draft_tokens_count / accepted_draft_tokens_count: 50 rounds of 4, 3 kept
    assert {(t.counters.drafted, t.counters.accepted, t.counters.source)
            for t in draft.trials if t.counters} == {(200, 150, "engine_api")}
    assert (draft.speculation.drafted_tokens, draft.speculation.accepted_tokens) == (1600, 1200)
    assert draft.speculation.engine_can_honor is None  # no app version: the counters decide
    assert draft.speculation.models_loaded == ["qwen2.5-0.5b-instruct", "qwen2.5-14b-instruct"]
    assert all(c.speculation.outputs_match_baseline for c in sub.configs[1:])
    # The version is the runtime's (runtime.version), its name the build.
    assert (sub.engine.name, sub.engine.version, sub.engine.build, sub.engine.runtime) == (
        "lmstudio", "1.3.0", "llama.cpp-mac-arm64-apple-metal-advsimd", "ggml")
    target = next(m for m in sub.models if m.name == "qwen2.5-14b-instruct")
    assert (target.size_bytes, target.quantization, target.parameter_size, target.family,
            target.format, target.digest) == (8_990_000_000, "Q4_K_M", "14B", "qwen2", "gguf",
                                              None)


def test_the_words_name_lm_studio_and_its_api(
        default_run: tuple[Submission, list[dict[str, Any]]]) -> None:
    sub, _ = default_run
    text = conclusion(sub)
    assert ("draft_qwen2.5_0.5b speculated (counters from LM Studio's own API "
            "(stats.total_draft_tokens_count, accepted_draft_tokens_count)) and ran") in text
    assert "Ollama" not in text and "server log" not in text
    assert summary_table(sub, summarize(sub)).title == "lmstudio-draft v2 on LM Studio 1.3.0"


def test_the_server_accepts_the_result_with_api_evidence(
        default_run: tuple[Submission, list[dict[str, Any]]]) -> None:
    sub, _ = default_run
    checked = server_checked(sub)
    speedups = {s.name: s.speedup_tps for s in checked.summaries}
    levels = [e.level for e in submission_evidence(checked.submission, speedups)]
    assert levels == ["none", "engine_api", "engine_api"]
    assert speedups["draft_qwen2.5_0.5b"] is not None and speedups["draft_qwen2.5_0.5b"] > 2


def test_an_lm_studio_that_ignores_draft_model_is_never_a_speedup() -> None:
    with FakeLMStudio(honours_draft_model=False) as fake:  # before 0.3.10
        sub = run(fake)
    assert [c.speculation.observed for c in sub.configs] == ["not_applied", "unknown",
                                                             "unknown"]
    text = conclusion(sub)
    assert ("draft_qwen2.5_0.5b could not be checked: LM Studio documents the draft_model "
            "field from 0.3.10, but its API does not report the app's version (runtime "
            "1.3.0)") in text
    server_checked(sub)  # a consistent result: stored, off the speedup board


def test_a_draft_set_in_the_app_makes_the_baseline_speculate() -> None:
    with FakeLMStudio(sidebar_draft="qwen2.5-0.5b-instruct") as fake:
        sub = run(fake)
    assert {c.speculation.observed for c in sub.configs} == {"baseline_speculated"}
    assert sub.configs[0].speculation.drafted_tokens == 2000  # 10 baseline trials of 200
    assert ("what to do: clear the draft model chosen for the target in LM Studio's app"
            in conclusion(sub))
    server_checked(sub)


def test_a_missing_model_names_the_lms_command_that_downloads_it() -> None:
    models = [m for m in default_lm_models() if m.key != "qwen2.5-1.5b-instruct"]
    with FakeLMStudio(models=models) as fake, pytest.raises(EngineModelMissing) as found:
        run(fake)
    assert found.value.message == ("model 'qwen2.5-1.5b-instruct' is not in LM Studio — "
                                   "download it with `lms get qwen2.5-1.5b-instruct`")


def test_no_server_names_lms_server_start() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    settings = RunSettings(protocol=PROTOCOL)
    with adapter("lmstudio").open(settings, LMStudioOptions(url=url, timeout_s=5)) as engine, \
            pytest.raises(EngineUnreachable, match="start its server with `lms server start`"):
        engine.preflight(MACHINE, RunListener())


def test_a_model_loaded_with_another_context_is_a_warning() -> None:
    models = default_lm_models()
    models[0] = FakeLMModel("qwen2.5-14b-instruct", loaded_context=32768)
    recorder = Recorder()
    with FakeLMStudio(models=models) as fake:
        run(fake, recorder)
    assert ("qwen2.5-14b-instruct is loaded with a context of 32768 tokens, the protocol's is "
            "4096: reload it with `lms load qwen2.5-14b-instruct --context-length 4096`"
            ) in recorder.warnings


def test_its_options_go_to_it_alone() -> None:
    with pytest.raises(UsageError, match="--engine-url needs --engine lmstudio"):
        engine_options(adapter("ollama"), {"--engine-url": "http://127.0.0.1:1234"})
    with pytest.raises(UsageError, match="is not an http"):
        engine_options(adapter("lmstudio"), {"--engine-url": "ftp://x"})


def test_specsubmit_run_engine_lmstudio(tmp_path: Path, specsubmit_home: Path) -> None:
    with FakeLMStudio() as fake:
        result = specsubmit(tmp_path, "run", "--engine", "lmstudio", "--engine-url", fake.url,
                            "--protocol", "lmstudio-draft", "--no-submit", "--json")
    assert result.returncode == 0, result.stderr
    sub = parse_submission(result.stdout.strip().encode())
    assert sub.engine.name == "lmstudio" and json.loads(result.stdout)["engine"]["build"]
    assert "on LM Studio 1.3.0" in result.stderr
    with FakeLMStudio() as fake:
        result = specsubmit(tmp_path, "run", "--engine", "lmstudio", "--engine-url", fake.url,
                            "--llama-threads", "2")
    assert result.returncode == 2
    assert _one_error_line(result) == ("specsubmit: error: --llama-threads needs --engine "
                                       "llama-server")
