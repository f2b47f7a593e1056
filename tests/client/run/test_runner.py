"""The runner in-process against the fake Ollama: preflight, trials, evidence, result."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from specschema import Fingerprint, Protocol, find_protocol, get_protocol, summarize
from specschema.payload import parse_submission, submission_bytes
from specsubmit.engines.ollama.client import OllamaClient
from specsubmit.engines.ollama.engine import OllamaEngine, OllamaLog
from specsubmit.errors import (
    ModelMissing,
    OllamaLogMissing,
    OllamaStreamError,
    SpecSubmitError,
    UsageError,
)
from specsubmit.local.results import load_result, results_dir, save_result
from specsubmit.run.evidence import outputs_match_baseline
from specsubmit.run.report import conclusion, verdict_label
from specsubmit.run.runner import RunListener, RunSettings, run_protocol
from tests.fakeollama import FakeModel, FakeOllama, default_models

MACHINE = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24, unified_memory=True)
MTP = "qwen3.5:9b-mtp"


class Recorder(RunListener):
    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.finished: list[tuple[int, str]] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)

    def trial_finished(self, position, total, config, trial) -> None:  # type: ignore[no-untyped-def]
        self.finished.append((position, config))


# ollama-draft v1 (interleaved: a switch at every trial), still loadable by its identity
OLLAMA_DRAFT_V1 = find_protocol(
    "ollama-draft", 1, "722ee9e1c54c00d296d7ab1c130438e1b432952326e8b15e4a1e89c463c27924")


def _run(fake: FakeOllama, protocol: str | Protocol | None = "hardnumbers-m2", *,
         fingerprint=MACHINE, stop: threading.Event | None = None,
         listener: RunListener | None = None, **kw):
    assert protocol is not None
    chosen = protocol if isinstance(protocol, Protocol) else get_protocol(protocol)
    # Ollama's log settings are its adapter's (OllamaLog), the rest the run's
    # Most runs here are about something other than the log: they run as with --no-log
    # (a missing log is a warning); the refusal without it is tested on its own.
    # The fake writes a request's log lines before it answers (unless ``log_delay_s``), so
    # the quiet-log wait after each request finds nothing to wait for: 5 ms of it, not the
    # CLI's 50 ms (which cost these runs 2-5 s each, ~100 requests, in sleep alone).
    log = OllamaLog(path=kw.pop("log_path", None), command=kw.pop("log_command", None),
                    settle_s=kw.pop("log_settle_s", 0.005),
                    accept_missing=kw.pop("no_log", True))
    settings = RunSettings(protocol=chosen, **kw)
    with OllamaClient(fake.url, timeout_s=10) as client:
        return run_protocol(OllamaEngine(client, settings, log), settings,
                            fingerprint=fingerprint,
                            listener=listener or Recorder(), stop=stop)


def test_hardnumbers_run_marks_both_drafts_not_applied(tmp_path: Path) -> None:
    recorder = Recorder()
    with FakeOllama(version="0.12.8", log_path=tmp_path / "server.log") as fake:
        outcome = _run(fake, listener=recorder, log_path=tmp_path / "server.log")
        generate_bodies = [b for m, p, b in fake.requests if p == "/api/generate"]
    sub = outcome.submission
    assert sub.complete and outcome.error is None and not outcome.interrupted
    assert sub.engine.version == "0.12.8" and sub.engine.backend == "100% GPU"
    protocol = get_protocol("hardnumbers-m2")
    assert sub.protocol.sha256 == protocol.sha256 and sub.protocol.parameters == {}
    assert [c.speculation.observed for c in sub.configs] == ["not_applied"] * 3
    assert [c.speculation.engine_can_honor for c in sub.configs] == [True, False, False]
    assert [c.speculation.outputs_match_baseline for c in sub.configs] == [None, True, True]
    # warm-ups first (one per config), then the 15 trials in the protocol's order
    assert len(generate_bodies) == 3 + 15
    trial_bodies = generate_bodies[3:]
    for (name, _index), body in zip(protocol.schedule(), trial_bodies, strict=True):
        config = protocol.config(name)
        assert body["options"] == protocol.request_options(config)
        assert body["keep_alive"] == "30m" and body["stream"] is True
        assert body.get("draft_model") == config.draft_model
    for config in sub.configs:
        assert config.request_options == protocol.request_options(protocol.config(config.name))
        assert config.request_fields == ({"draft_model": config.draft_model}
                                         if config.draft_model else {})
        assert [t.index for t in config.trials] == [0, 1, 2, 3, 4]
        assert len(config.warmups) == 1
        assert config.speculation.models_loaded == ["qwen3:14b"]
    assert [p for p, _ in recorder.finished] == list(range(15))
    positions = sorted(t.position for c in sub.configs for t in c.trials)
    assert positions == list(range(15))
    assert {m.name for m in sub.models} == {"qwen3:14b", "qwen2.5:0.5b", "qwen2.5:1.5b"}
    target = next(m for m in sub.models if m.name == "qwen3:14b")
    assert target.digest and target.quantization == "Q4_K_M" and target.family == "qwen3"
    assert any("draft_model request field" in w for w in recorder.warnings)
    # the wire bytes round-trip, and they never carry the address Ollama was reached at
    wire = submission_bytes(sub)
    assert parse_submission(wire) == sub
    assert b"127.0.0.1" not in wire and str(fake.port).encode() not in wire
    text = conclusion(sub)
    assert "run-to-run noise" in text
    for word in ("faster", "slower", "speedup", "slowdown"):
        assert word not in text.lower()
    assert all(verdict_label(sub, s) == "not applied (noise)" for s in summarize(sub)[1:])


def test_trial_measurements(tmp_path: Path) -> None:
    with FakeOllama() as fake:
        sub = _run(fake).submission
    for trial in (t for c in sub.configs for t in c.trials):
        assert trial.eval_count == 200 and trial.done_reason == "length"
        assert trial.wall_s >= trial.total_duration_ns / 1e9
        assert trial.ttft_s is not None and trial.ttft_s < trial.wall_s
        assert trial.output_chars > 0 and len(trial.output_sha256) == 64
        assert trial.cold is False


def test_a_protocols_warm_up_tokens_reach_ollama_and_the_trials_keep_their_own() -> None:
    # No shipped Ollama protocol sets warmup_tokens yet; a copy of one that does
    protocol = get_protocol("hardnumbers-m2").model_copy(update={"warmup_tokens": 7})
    with FakeOllama() as fake:
        sub = _run(fake, protocol).submission
        asked = [body["options"]["num_predict"] for _, path, body in fake.requests
                 if path == "/api/generate"]
    warmups = sum(len(c.warmups) for c in sub.configs)
    trials = sum(len(c.trials) for c in sub.configs)
    assert warmups > 0 and sorted(asked) == [7] * warmups + [200] * trials
    assert all(t.eval_count == 200 for c in sub.configs for t in c.trials)


def test_ollama_draft_confirmed_with_acceptance_counts_from_the_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    models = [FakeModel(MTP, mtp=True, acceptance=0.75, tokens_per_s=3000)]
    with FakeOllama(version="0.33.1", models=models, log_path=log) as fake:
        outcome = _run(fake, "ollama-draft", target=MTP, log_path=log)
    sub = outcome.submission
    trials = get_protocol("ollama-draft").trials_per_config
    assert outcome.log_read is True
    assert sub.protocol.parameters == {"target": MTP}
    by_name = {c.name: c for c in sub.configs}
    assert by_name["spec_off"].speculation.observed == "not_applied"  # the baseline requests none
    assert by_name["spec_off"].speculation.drafted_tokens is None
    for name, dnp in (("spec_4", 4), ("spec_8", 8)):
        evidence = by_name[name].speculation
        assert evidence.observed == "confirmed" and evidence.counters_source == "llama_server_log"
        # trials of 200 tokens; per trial ceil(200 / (1 + 0.75 * dnp)) iterations
        iterations = -(-200 // (1 + 0.75 * dnp))
        assert evidence.drafted_tokens == trials * int(iterations) * dnp
        assert evidence.accepted_tokens == trials * (200 - int(iterations))
        assert evidence.outputs_match_baseline is True
        assert by_name[name].request_options["draft_num_predict"] == dnp
    summaries = {s.name: s for s in summarize(sub)}
    assert summaries["spec_4"].speedup_tps and summaries["spec_4"].speedup_tps > 1.5
    assert "faster than the baseline" in conclusion(sub)


@pytest.mark.parametrize("settle_s", [0.15, 0.0])
def test_late_log_lines_are_still_attributed_to_their_request(
    tmp_path: Path, settle_s: float, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "server.log"
    with FakeOllama(version="0.33.1", models=[FakeModel(MTP, mtp=True)], log_path=log,
                    log_delay_s=0.03) as fake:
        # The client's own quiet-log wait runs as is (its real sleeps, its size checks), but
        # each of its sleeps also lasts until the fake's 30 ms timer has written its line:
        # under load that timer once ran later than the 0.15 s window and the test failed.
        # Without a wait (settle 0) nothing is waited for, as before.
        from specsubmit.engines.ollama import engine, serverlog

        def sleep_until_written(seconds: float) -> None:
            time.sleep(seconds)
            assert fake.wait_for_late_lines(10.0), "a late log line was never written"

        def settle(path: Path, quiet_s: float, max_s: float = 0.5) -> None:
            serverlog.wait_for_quiet_log(path, quiet_s, max_s, sleep=sleep_until_written)

        monkeypatch.setattr(engine, "wait_for_quiet_log", settle)
        sub = _run(fake, OLLAMA_DRAFT_V1, target=MTP, log_path=log,
                   log_settle_s=settle_s).submission
    drafted = {c.name: c.speculation.drafted_tokens for c in sub.configs if c.role == "draft"}
    exact = {"spec_4": 5 * 50 * 4, "spec_8": 5 * 29 * 8}  # 5 trials x iterations x depth
    # without waiting for the log, interleaved configs swap each other's late lines
    assert (drafted == exact) is (settle_s > 0), drafted


def test_ollama_draft_mlx_counters(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    models = [FakeModel(MTP, mtp=True, format="safetensors")]
    with FakeOllama(version="0.33.1", models=models, log_path=log) as fake:
        sub = _run(fake, "ollama-draft", target=MTP, log_path=log).submission
    assert {c.speculation.counters_source for c in sub.configs if c.role == "draft"} == {"mlx_log"}


def test_speculation_the_config_did_not_ask_for_is_flagged(tmp_path: Path) -> None:
    # hardnumbers-m2 on 0.33 with an MTP target: Ollama speculates in every config (the
    # option defaults to 4) although the protocol's drafts are ignored.
    log = tmp_path / "server.log"
    recorder = Recorder()
    with FakeOllama(version="0.33.1", models=[FakeModel(MTP, mtp=True)], log_path=log) as fake:
        sub = _run(fake, target=MTP, listener=recorder, log_path=log).submission
    # Wire v2: the baseline's own counters make every comparison invalid.
    assert [c.speculation.observed for c in sub.configs] == ["baseline_speculated"] * 3
    base = sub.configs[0]
    assert base.speculation.drafted_tokens == sum(
        t.counters.drafted for t in base.trials if t.counters)
    assert all(c.speculation.drafted_tokens is None for c in sub.configs[1:])
    flagged = [w for w in recorder.warnings if "the model speculates by itself" in w]
    assert len(flagged) == 3 and "during no_draft" in flagged[0]
    assert sub.note == ("speculation counters seen in configs that do not request it: "
                        "no_draft, draft_qwen2.5_0.5b, draft_qwen2.5_1.5b")


def test_ollama_draft_on_0_12_8_is_not_applied(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with FakeOllama(version="0.12.8", models=[FakeModel(MTP, mtp=True)], log_path=log) as fake:
        sub = _run(fake, "ollama-draft", target=MTP, log_path=log).submission
    drafts = [c for c in sub.configs if c.role == "draft"]
    # The fake's decode rate does not drift with load, so its baseline blocks agree.
    assert [c.speculation.observed for c in drafts] == ["not_applied"] * 2
    assert all(c.speculation.engine_can_honor is False for c in drafts)
    assert "options.draft_num_predict needs Ollama 0.30.0" in conclusion(sub)


def test_ollama_draft_without_a_readable_log_is_not_observed(tmp_path: Path) -> None:
    recorder = Recorder()
    with FakeOllama(version="0.33.1", models=[FakeModel(MTP, mtp=True)]) as fake:
        outcome = _run(fake, "ollama-draft", target=MTP, listener=recorder,
                       log_path=tmp_path / "no-such.log", no_log=True)
    drafts = [c for c in outcome.submission.configs if c.role == "draft"]
    assert [c.speculation.observed for c in drafts] == ["not_observed"] * 2
    assert outcome.log_read is False
    assert any("cannot read the Ollama server log" in w for w in recorder.warnings)
    assert "cannot be attributed to speculation" in conclusion(outcome.submission)


def test_ollama_draft_without_a_readable_log_is_refused_before_any_trial_unless_no_log(
        tmp_path: Path) -> None:
    with FakeOllama(version="0.33.1", models=[FakeModel(MTP, mtp=True)]) as fake:
        with pytest.raises(OllamaLogMissing) as refused:
            _run(fake, "ollama-draft", target=MTP, log_path=tmp_path / "no-such.log",
                 no_log=False)
        assert not [r for r in fake.requests if r[1] == "/api/generate"]
    said = refused.value.message
    assert f"the Ollama server log {tmp_path / 'no-such.log'} does not exist" in said
    assert said.endswith("or pass --no-log to run without it (no draft can then be "
                         "confirmed)")
    assert "\n" not in said


def test_ollama_draft_needs_a_target() -> None:
    with FakeOllama() as fake:
        with pytest.raises(UsageError, match="--target"):
            _run(fake, "ollama-draft")
        for bad in ("", "x" * 121, " padded", "new\nline"):
            with pytest.raises(UsageError, match="is not a model name"):
                _run(fake, "ollama-draft", target=bad)


def test_missing_model_without_pull() -> None:
    with FakeOllama(models=[]) as fake, pytest.raises(ModelMissing, match="'qwen3:14b'.*--pull"):
        _run(fake)


def test_missing_models_are_pulled_with_pull() -> None:
    with FakeOllama(models=[], pullable=default_models()) as fake:
        sub = _run(fake, pull=True).submission
        pulled = [b["model"] for m, p, b in fake.requests if p == "/api/pull"]
    # the drafts are only named in a field Ollama ignores: nothing to pull for them
    assert pulled == ["qwen3:14b"] and sub.complete


def test_memory_preflight_refuses_without_yes_and_warns_with_it() -> None:
    big = [FakeModel("qwen3:14b", size=30_000_000_000)]
    small_machine = Fingerprint(memory_bytes=16 * 1024**3, memory_gb=16, unified_memory=True)
    with FakeOllama(models=big) as fake:
        with pytest.raises(SpecSubmitError, match=r"need about 30\.0 GB .* 17\.2 GB.*--yes"):
            _run(fake, fingerprint=small_machine)
        assert not [r for r in fake.requests if r[1] == "/api/generate"]
        recorder = Recorder()
        outcome = _run(fake, fingerprint=small_machine, assume_yes=True, listener=recorder)
    assert outcome.submission.complete
    assert any("need about 30.0 GB" in w for w in recorder.warnings)


def test_cold_trials_are_flagged(tmp_path: Path) -> None:
    with FakeOllama(models=[FakeModel("qwen3:14b", load_s=0.15)]) as fake:
        class Unloader(Recorder):
            def trial_started(self, position, total, config, index) -> None:  # type: ignore[no-untyped-def]
                if position == 2:
                    fake.unload_all()  # as if Ollama evicted the model between trials

        sub = _run(fake, listener=Unloader(), cold_load_ns=100_000_000).submission
    trials = sorted((t for c in sub.configs for t in c.trials), key=lambda t: t.position)
    assert [t.position for t in trials if t.cold] == [2]
    assert trials[2].load_duration_ns >= 150_000_000
    assert sub.configs[0].warmups[0].load_duration_ns >= 150_000_000


def test_stop_event_yields_an_incomplete_result() -> None:
    stop = threading.Event()

    class StopAfterFour(Recorder):
        def trial_finished(self, position, total, config, trial) -> None:  # type: ignore[no-untyped-def]
            super().trial_finished(position, total, config, trial)
            if position == 3:
                stop.set()

    with FakeOllama() as fake:
        outcome = _run(fake, stop=stop, listener=StopAfterFour())
    sub = outcome.submission
    assert outcome.interrupted and not sub.complete and outcome.trials_done == 4
    assert [len(c.trials) for c in sub.configs] == [4, 0, 0]
    assert sub.note == "stopped early: interrupted by the contributor after 4 of 15 trials"
    assert "Incomplete run" in conclusion(sub)


def test_engine_dying_mid_run_keeps_what_was_measured() -> None:
    with FakeOllama(die_after_generates=3 + 7) as fake:  # 3 warm-ups, then the 7th trial
        outcome = _run(fake)
    sub = outcome.submission
    assert isinstance(outcome.error, OllamaStreamError)
    assert not sub.complete and outcome.trials_done == 6
    assert sub.note is not None and "127.0.0.1" not in sub.note and "6 of 15" in sub.note


def test_results_store_round_trip(tmp_path: Path) -> None:
    with FakeOllama() as fake:
        sub = _run(fake).submission
    path = save_result(sub)
    assert path == results_dir() / f"{sub.submission_id}.json"
    assert str(results_dir()).startswith(str(tmp_path))  # the autouse SPECSUBMIT_HOME fixture
    assert load_result(path) == sub
    assert not list(results_dir().glob(".*"))  # no temp files left behind


def test_outputs_match_baseline_uses_the_baseline_majority() -> None:
    from specschema.examples import example_submission

    trials = example_submission("hardnumbers-m2").configs[0].trials
    assert outputs_match_baseline(trials, trials) is True
    changed = [trials[0].model_copy(update={"output_sha256": "0" * 64})]
    assert outputs_match_baseline(trials, changed) is False
    assert outputs_match_baseline([], trials) is None
