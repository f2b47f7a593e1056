"""The early-stop rule in a run, against the fake llama-server: a draft that accepts none
of what it drafts runs the first round only, the run says so, and the server's rules hold
the result to it."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specschema import Fingerprint, Submission, Trial, get_protocol
from specserver.ingest import rules
from specsubmit.engines.base import RunListener
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.run.plan import Measured, decide, plan_lines
from specsubmit.run.runner import RunSettings, run_protocol
from tests.client.engines.llama_server.fake_llama_server import write_fake_binary
from tests.support.realengine.ollama_store import add_model
from tests.support.realengine.tiny_gguf import TinyModel, write_model

DRAFT = get_protocol("llamacpp-draft")
TWO = "draft_qwen3_0.6b_n3,draft_qwen3_1.7b_n8"
BLIND = "draft_qwen3_1.7b_n8"  # its draft accepts nothing: the fake's ``blind``
MACHINE = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24)
SMALL = TinyModel(layers=1, embd=64, ff=128, heads=2, seed=5)


class Seen(RunListener):
    def __init__(self) -> None:
        self.stopped: list[tuple[str, int]] = []
        self.totals: set[int] = set()

    def stopped_early(self, config: str, drafted: int) -> None:
        self.stopped.append((config, drafted))

    def trial_started(self, position: int, total: int, config: str, index: int) -> None:
        self.totals.add(total)

    def trial_finished(self, position: int, total: int, config: str, trial: Trial) -> None:
        pass


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, blind: bool
         ) -> tuple[Submission, Seen, list[Measured]]:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", write_model(tmp_path / "t.gguf", SMALL))
    add_model(folder, "qwen3:0.6b", write_model(tmp_path / "d.gguf", SMALL.truncated(1)))
    other = write_model(tmp_path / "e.gguf", TinyModel(layers=1, embd=64, ff=128, heads=2,
                                                       seed=6))
    add_model(folder, "qwen3:1.7b", other)
    if blind:
        digest = hashlib.sha256(other.read_bytes()).hexdigest()[:12]
        monkeypatch.setenv("FAKE_LLAMA_DRAFTS", f"{digest}=blind")
    parameters = {"configs": TWO}
    settings = RunSettings(protocol=DRAFT.for_run(parameters), parameters=parameters)
    seen, plans = Seen(), []

    def planner(measured: Measured) -> int | None:
        plans.append(measured)
        return None

    with LlamaServerEngine(settings, binary=write_fake_binary(tmp_path / "bin"),
                           models_dir=folder, startup_timeout_s=60, threads=1) as engine:
        outcome = run_protocol(engine, settings, fingerprint=MACHINE, listener=seen,
                               planner=planner)
    return outcome.submission, seen, plans


def _violations(submission: Submission) -> list[rules.Violation]:
    ctx = rules.RuleContext(DRAFT, datetime.now(UTC), timedelta(days=30), timedelta(minutes=5))
    return rules.violations(submission, ctx)


def test_a_draft_that_accepts_nothing_runs_the_first_round_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub, seen, plans = _run(tmp_path, monkeypatch, blind=True)
    # the revision already counts it out of the second round (its first block: 400 drafted)
    assert plans[1].stopping == (BLIND,)
    assert plans[0].stopping == ()
    revised = plan_lines(decide(plans[1], budget_s=None, elapsed_s=1.0), datetime(2026, 1, 1))
    assert ("  stop after the first round by the protocol's rule, none of their drafted "
            f"tokens accepted so far: {BLIND}") in revised
    # stopped at the end of the first round, with its four trials' drafted tokens
    assert seen.stopped == [(BLIND, 800)]
    assert sub.complete and sub.protocol.parameters == {"configs": TWO, "stopped": BLIND}
    trials = {c.name: len(c.trials) for c in sub.configs}
    assert trials == {"no_draft": 10, "draft_qwen3_0.6b_n3": 8, BLIND: 4}
    assert max(t.position for c in sub.configs for t in c.trials) == 21  # 22 of 26 trials
    assert seen.totals == {26, 22}  # the progress counts the shorter run once stopped
    assert _violations(sub) == []


def test_the_server_holds_the_stopped_configs_to_the_rule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub, seen, _ = _run(tmp_path, monkeypatch, blind=True)
    claims = {**sub.protocol.parameters}
    # a run that kept the stopped config's later blocks to itself: the schedule no longer
    # fits (the full run's positions), and the rule names it
    hidden = sub.model_copy(update={"protocol": sub.protocol.model_copy(update={
        "parameters": {"configs": TWO}})})
    found = _violations(hidden)
    assert any(v.path == "protocol.parameters.stopped" and
               "stops draft_qwen3_1.7b_n8, not none" in v.message for v in found)
    # a run that says it stopped a draft which accepted tokens
    both = sub.model_copy(update={"protocol": sub.protocol.model_copy(update={
        "parameters": {**claims, "stopped": TWO}})})
    assert any(v.path == "protocol.parameters.stopped" and
               v.message.endswith(f"not {TWO.replace(',', ', ')}") for v in _violations(both))


def test_a_draft_that_accepts_tokens_runs_every_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub, seen, plans = _run(tmp_path, monkeypatch, blind=False)
    assert seen.stopped == [] and plans[1].stopping == ()
    assert sub.protocol.parameters == {"configs": TWO}
    assert {c.name: len(c.trials) for c in sub.configs} == {
        "no_draft": 10, "draft_qwen3_0.6b_n3": 8, BLIND: 8}
    assert _violations(sub) == []
    # claiming a stop the rule does not make is refused
    claimed = sub.model_copy(update={"protocol": sub.protocol.model_copy(update={
        "parameters": {"configs": TWO, "stopped": BLIND}})})
    assert any(v.path == "protocol.parameters.stopped" for v in _violations(claimed))
