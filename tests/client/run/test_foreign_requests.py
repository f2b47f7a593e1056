"""Another client using the same Ollama during a run: its requests show in the server log
(Ollama's access lines), the trials whose log window holds them lose their log counters
(never cross-attributed), and the run names them in a warning and in the result's note."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from specschema import Fingerprint, get_protocol
from specschema.capability import submission_counter_problems
from specserver.ingest import rules
from specsubmit.engines.ollama.client import OllamaClient
from specsubmit.engines.ollama.engine import OllamaEngine, OllamaLog
from specsubmit.run.runner import RunListener, RunSettings, run_protocol
from tests.fakeollama import FakeModel, FakeOllama

MTP = "qwen3.5:9b-mtp"


class Intruder(RunListener):
    """Sends one request of its own to Ollama while `config`'s trial `index` runs."""

    def __init__(self, url: str, config: str, index: int) -> None:
        self.url, self.config, self.index = url, config, index
        self.warnings: list[str] = []
        self.thread: threading.Thread | None = None

    def warning(self, message: str) -> None:
        self.warnings.append(message)

    def trial_started(self, position: int, total: int, config: str, index: int) -> None:
        if (config, index) == (self.config, self.index):
            self.thread = threading.Thread(target=self._send)
            self.thread.start()

    def _send(self) -> None:
        httpx.post(f"{self.url}/api/generate", timeout=30, json={
            "model": MTP, "prompt": "someone else's prompt", "stream": False,
            "options": {"num_predict": 40, "draft_num_predict": 8}})


def _run(tmp_path: Path, intrude: bool):  # type: ignore[no-untyped-def]
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "server.log"
    models = [FakeModel(MTP, mtp=True, acceptance=0.75, tokens_per_s=2000)]
    settings = RunSettings(protocol=get_protocol("ollama-draft"), target=MTP)
    with FakeOllama(version="0.33.1", models=models, log_path=log) as fake, \
            OllamaClient(fake.url, timeout_s=10) as client:
        # spec_8's first trial: the one after it is in the same block of 2 (the one after
        # that follows a warm-up, whose window is not counted)
        listener = Intruder(fake.url, "spec_8", 0 if intrude else -1)
        outcome = run_protocol(OllamaEngine(client, settings, OllamaLog(path=log)), settings,
                               fingerprint=Fingerprint(memory_gb=24), listener=listener)
        if listener.thread is not None:
            listener.thread.join(30)
    return outcome.submission, listener


def test_a_foreign_request_is_named_and_its_window_not_counted(tmp_path: Path) -> None:
    clean, _ = _run(tmp_path / "clean", intrude=False)
    sub, listener = _run(tmp_path / "shared", intrude=True)
    spec_8 = next(c for c in sub.configs if c.name == "spec_8")
    clean_8 = next(c for c in clean.configs if c.name == "spec_8")
    assert all(t.counters is not None for t in clean_8.trials)
    # The intruder's request lands in the window of the trial it overlapped (the first,
    # or on a slow machine the one after): that trial, and only it, loses its counters.
    dropped = [i for i, t in enumerate(spec_8.trials) if t.counters is None]
    assert len(dropped) == 1 and dropped[0] in (0, 1), dropped
    assert sum(t.counters is None for c in sub.configs if c.role == "draft"
               for t in c.trials) == 1
    named = f"spec_8 trial {dropped[0] + 1}"
    # The other trials' counters are exactly what a run alone reads; the totals are theirs.
    kept = [t.counters for t in spec_8.trials if t.counters is not None]
    assert kept == [t.counters for i, t in enumerate(clean_8.trials) if i != dropped[0]]
    assert spec_8.speculation.drafted_tokens == sum(c.drafted for c in kept)
    assert spec_8.speculation.observed == "confirmed"
    assert any(f"another client's requests reached Ollama during {named}" in w
               for w in listener.warnings)
    assert sub.note and f"another client's requests reached the engine during {named}" \
        in sub.note
    assert submission_counter_problems(sub) == []
    ctx = rules.RuleContext(get_protocol("ollama-draft"), datetime.now(UTC),
                             timedelta(days=30), timedelta(minutes=5))
    assert rules.violations(sub, ctx) == []
    assert clean.note is None or "another client" not in clean.note
