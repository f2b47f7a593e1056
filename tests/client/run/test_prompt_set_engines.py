"""The prompt-set protocols of Ollama (ollama-map) and LM Studio (lmstudio-map) against
their fakes: each trial sends its own prompt, every block covers the six kinds of work,
counters come from where each engine reports them, and the server's checks accept the
result (the llama-server one: tests/client/engines/llama_server/test_speculation_map.py)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nacl.signing

from specschema import Fingerprint, Submission, get_protocol
from specschema.breakdown import domain_results
from specschema.envelope import envelope_bytes, sign_envelope
from specschema.payload import submission_bytes
from specserver.ingest.checks import check_submission
from specsubmit.engines.base import RunListener, RunSettings
from specsubmit.engines.lmstudio.adapter import LMStudioOptions
from specsubmit.engines.ollama.client import OllamaClient
from specsubmit.engines.ollama.engine import OllamaEngine, OllamaLog
from specsubmit.engines.registry import adapter
from specsubmit.run.runner import run_protocol
from tests.fakelmstudio import FakeLMStudio
from tests.fakeollama import FakeModel, FakeOllama

MACHINE = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24, unified_memory=True)
MTP = "qwen3.5:9b-mtp"


def _accepted_by_server(sub: Submission) -> None:
    key = nacl.signing.SigningKey(b"\x0b" * 32)
    body = envelope_bytes(sign_envelope(submission_bytes(sub), key))
    check_submission(body, now=datetime.now(UTC), max_age=timedelta(days=30),
                     max_future_skew=timedelta(minutes=5))


def _prompts_in_order(protocol_id: str, sent: list[str]) -> None:
    """Every block of 6 requests after its warm-up answers the six prompts once."""
    protocol = get_protocol(protocol_id)
    texts = [p.text for p in protocol.prompts or ()]
    assert len(texts) == 6 and len(sent) == 7 * 7  # 7 blocks: a warm-up and 6 trials each
    for start in range(0, len(sent), 7):
        assert sent[start] == texts[0]  # the warm-up
        assert sorted(sent[start + 1:start + 7]) == sorted(texts)


def test_ollama_map_sends_each_trial_its_prompt_and_reads_the_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    models = [FakeModel(MTP, mtp=True, acceptance=0.75, tokens_per_s=800)]
    protocol = get_protocol("ollama-map")
    settings = RunSettings(protocol=protocol, target=MTP)
    with FakeOllama(version="0.33.1", models=models, log_path=log) as fake, \
            OllamaClient(fake.url, timeout_s=10) as client:
        # settle 5 ms: the fake writes its log lines before it answers (test_runner's _run)
        outcome = run_protocol(OllamaEngine(client, settings, OllamaLog(path=log, settle_s=0.005)),
                               settings, fingerprint=MACHINE, listener=RunListener(),
                               stop=threading.Event())
        sent = [b["prompt"] for _, p, b in fake.requests if p == "/api/generate"]
    sub = outcome.submission
    assert sub.complete and outcome.log_read is True
    _prompts_in_order("ollama-map", sent)
    assert [c.speculation.observed for c in sub.configs] == ["not_applied", "confirmed",
                                                              "confirmed"]
    assert [r.domain for r in domain_results(sub, sub.configs[1])] == list(protocol.domains)
    _accepted_by_server(sub)


def test_lmstudio_map_sends_each_trial_its_prompt_with_counters_from_the_api() -> None:
    protocol = get_protocol("lmstudio-map")
    settings = RunSettings(protocol=protocol)
    with FakeLMStudio() as fake:
        with adapter("lmstudio").open(settings, LMStudioOptions(url=fake.url,
                                                              timeout_s=10)) as engine:
            outcome = run_protocol(engine, settings, fingerprint=MACHINE,
                                   listener=RunListener(), stop=threading.Event())
        sent = [b["messages"][0]["content"] for _, p, b in fake.requests
                if p == "/api/v0/chat/completions"]
    sub = outcome.submission
    assert sub.complete and outcome.error is None
    _prompts_in_order("lmstudio-map", sent)
    assert [c.speculation.observed for c in sub.configs] == ["not_applied", "confirmed",
                                                              "confirmed"]
    results = domain_results(sub, sub.configs[1])
    assert len(results) == 6 and all(r.acceptance is not None for r in results)
    # LM Studio says nothing of rounds: none are claimed
    assert all(t.counters is None or t.counters.rounds is None for t in sub.configs[1].trials)
    _accepted_by_server(sub)
