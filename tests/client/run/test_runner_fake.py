"""The runner's orchestration against the in-memory engine (tests/support/fake_engine.py):
order, starts and stops, warm-ups, checkpoints, partial results, cold trials, counters and
verdicts, with no server or process (the fake Ollama and llama-server tests cover those)."""

from __future__ import annotations

import threading
from itertools import groupby

from specschema import Fingerprint, Submission, get_protocol, submission_verdicts
from specschema.protocol_files import all_protocols
from specsubmit.run.runner import RunSettings, run_protocol
from tests.client.run.test_runner import OLLAMA_DRAFT_V1
from tests.support.fake_engine import FakeEngine, Script

MACHINE = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24, unified_memory=True)
# v1 (blocked, one start per config): these tests count trials and starts of that schedule
LLAMACPP = next(p for p in all_protocols() if (p.id, p.version) == ("llamacpp-draft", 1))


def run(engine: FakeEngine, *, target: str | None = None, stop: threading.Event | None = None,
        checkpoints: list[Submission] | None = None):  # type: ignore[no-untyped-def]
    engine.target = target
    settings = RunSettings(protocol=engine.protocol, target=target)
    return run_protocol(engine, settings, fingerprint=MACHINE, stop=stop,
                        checkpoint=checkpoints.append if checkpoints is not None else None)


def test_a_per_config_engine_is_started_once_per_block_and_warmed_up_right_after() -> None:
    engine = FakeEngine(LLAMACPP)
    outcome = run(engine)
    assert outcome.submission.complete and outcome.trials_done == 30
    begins = [c[1] for c in engine.calls if c[0] == "begin"]
    assert begins == [c.name for c in LLAMACPP.configs]  # blocked: one start per config
    # Between each start and its stop: the warm-ups first, then that config's trials.
    blocks = [list(g) for k, g in groupby(engine.calls[1:-1], key=lambda c: c[0] == "end")
              if not k]
    for block in blocks:
        kinds = [c[2] for c in block if c[0] == "generate"]
        assert kinds == ["warmup"] * LLAMACPP.warmups_per_config + ["trial"] * 5
    assert [c for c in engine.calls if c[0] == "end"][-1][2] == "last"
    assert engine.calls[-1] == ("report",)


def test_a_shared_engine_warms_every_config_up_before_the_first_trial() -> None:
    protocol = get_protocol("hardnumbers-m2")
    engine = FakeEngine(protocol, name="ollama", version="0.12.8", per_config_start=False)
    run(engine)
    kinds = [c[2] for c in engine.calls if c[0] == "generate"]
    assert kinds == ["warmup"] * 3 + ["trial"] * 15
    assert not [c for c in engine.calls if c[0] == "begin"][3:]  # no start per block
    assert [c[1] for c in engine.calls if c[0] == "end" and c[2] == "last"] == [
        c.name for c in protocol.configs]


def test_api_counters_confirm_a_draft_and_add_up_to_its_totals() -> None:
    scripts = {c.name: Script(tps=36.0, drafted=120, accepted=90)
               for c in LLAMACPP.configs if c.role == "draft"}
    sub = run(FakeEngine(LLAMACPP, scripts=scripts)).submission
    assert [c.speculation.observed for c in sub.configs] == ["not_applied"] + ["confirmed"] * 5
    draft = sub.configs[1]
    assert (draft.speculation.drafted_tokens, draft.speculation.accepted_tokens,
            draft.speculation.counters_source) == (600, 450, "engine_api")
    assert all(t.counters is not None and t.counters.drafted == 120 for t in draft.trials)
    assert [c.speculation.observed for c in sub.configs] == submission_verdicts(sub)
    assert sub.engine.name == "llama-server" and sub.engine.version == "b6123"


def test_a_baseline_whose_api_reports_drafting_makes_every_draft_incomparable() -> None:
    scripts = {c.name: Script(drafted=100, accepted=80) for c in LLAMACPP.configs}
    sub = run(FakeEngine(LLAMACPP, scripts=scripts)).submission
    assert {c.speculation.observed for c in sub.configs} == {"baseline_speculated"}
    assert sub.note is not None and "no_draft" in sub.note  # counters where none was asked


def test_an_engine_error_keeps_the_trials_so_far_and_names_the_engine() -> None:
    engine = FakeEngine(LLAMACPP, fail_at_request=10)  # 1 warm-up + 5 trials, 1 + 2 trials
    checkpoints: list[Submission] = []
    outcome = run(engine, checkpoints=checkpoints)
    assert outcome.error is not None and outcome.trials_done == 7
    assert not outcome.submission.complete
    assert outcome.submission.note == ("stopped early: llama-server failed (EngineDied) "
                                       "after 7 of 30 trials")
    assert [sum(len(c.trials) for c in p.configs) for p in checkpoints] == list(range(1, 8))
    assert {p.submission_id for p in checkpoints} == {outcome.submission.submission_id}
    assert engine.calls[-2][0] == "end"  # the failed config's engine start was stopped


def test_a_stop_request_ends_the_run_after_the_current_trial() -> None:
    stop = threading.Event()
    engine = FakeEngine(LLAMACPP, stop_after_trials=(stop, 4))
    outcome = run(engine, stop=stop)
    assert outcome.interrupted and outcome.trials_done == 4 and outcome.error is None
    assert "interrupted by the contributor after 4 of 30 trials" in (outcome.submission.note
                                                                      or "")


def test_a_change_of_a_load_time_option_makes_the_trial_cold() -> None:
    assert OLLAMA_DRAFT_V1 is not None  # interleaved: the option changes at every trial
    engine = FakeEngine(OLLAMA_DRAFT_V1, name="ollama", version="0.34.1",
                        per_config_start=False,
                        load_time_options=frozenset({"draft_num_predict"}))
    sub = run(engine, target="m:9b").submission
    trials = sorted((t for c in sub.configs for t in c.trials), key=lambda t: t.position)
    # The warm-ups end with the last config, so even the first trial switched the option.
    assert len(trials) == 15 and all(t.cold for t in trials)
    same = FakeEngine(OLLAMA_DRAFT_V1, name="ollama", version="0.34.1",
                      per_config_start=False)  # no load-time options: nothing is cold
    assert not any(t.cold for c in run(same, target="m:9b").submission.configs
                   for t in c.trials)


# --- a block counts only whole (protocols whose blocks each start with their own warm-up)

BRACKETED = get_protocol("llamacpp-draft")  # blocks of 2: baseline, 5 drafts, baseline, ...


def _kept(sub: Submission) -> dict[str, list[int | None]]:
    return {c.name: [t.block for t in c.trials] for c in sub.configs if c.trials}


def test_a_stop_in_the_middle_of_a_block_keeps_only_the_whole_blocks() -> None:
    assert BRACKETED.warmup_each_block and BRACKETED.block_trials == 2
    stop = threading.Event()
    engine = FakeEngine(BRACKETED, stop_after_trials=(stop, 5))  # blocks 0, 1, half of 2
    checkpoints: list[Submission] = []
    outcome = run(engine, stop=stop, checkpoints=checkpoints)
    assert outcome.interrupted and outcome.trials_done == 4 and outcome.trials_dropped == 1
    first = BRACKETED.configs[1].name
    assert _kept(outcome.submission) == {"no_draft": [0, 0], first: [1, 1]}
    assert "after 4 of 50 trials" in (outcome.submission.note or "")
    # no checkpoint ever held a half block: none before block 0 was whole, then after each
    # trial the whole blocks so far
    assert [sum(len(c.trials) for c in p.configs) for p in checkpoints] == [2, 2, 4, 4]
    # what is kept is what a complete run's whole blocks say (its verdicts too)
    assert [c.speculation.observed for c in outcome.submission.configs] == submission_verdicts(
        outcome.submission)


def test_an_engine_error_in_the_middle_of_a_block_drops_that_block_only() -> None:
    # Requests: block 0 = 1 warm-up + 2 trials, block 1 the same, block 2's warm-up and its
    # first trial; the 9th request (block 2's second trial) fails.
    engine = FakeEngine(BRACKETED, fail_at_request=9)
    outcome = run(engine)
    assert outcome.error is not None and (outcome.trials_done, outcome.trials_dropped) == (4, 1)
    assert sum(len(c.trials) for c in outcome.submission.configs) == 4
    assert outcome.submission.note == ("stopped early: llama-server failed (EngineDied) "
                                       "after 4 of 50 trials")


def test_a_protocol_without_a_warm_up_per_block_keeps_every_finished_trial() -> None:
    stop = threading.Event()
    engine = FakeEngine(LLAMACPP, stop_after_trials=(stop, 3))  # blocked: one block of 5
    outcome = run(engine, stop=stop)
    assert (outcome.trials_done, outcome.trials_dropped) == (3, 0)


def test_the_logs_counters_of_a_dropped_trial_leave_the_totals() -> None:
    from specschema import TrialCounters
    from specsubmit.engines.base import DraftCounters, EngineReport
    from specsubmit.run.kept import cut_report

    log = "llama_server_log"
    per_trial = [TrialCounters(drafted=10, accepted=7, source=log), None,
                 TrialCounters(drafted=30, accepted=1, source=log)]
    report = EngineReport(
        counters={"spec_4": DraftCounters(40, 8, log, 2), "spec_8": DraftCounters(5, 5, log, 1)},
        trial_counters={"spec_4": per_trial,
                        "spec_8": [TrialCounters(drafted=5, accepted=5, source=log)]},
        reloaded={"spec_4": [True, False, True], "spec_8": [False]})
    cut = cut_report(report, {"spec_off": 0, "spec_4": 2, "spec_8": 1})
    assert cut.counters["spec_4"] == DraftCounters(10, 7, log, 1)
    assert cut.counters["spec_8"] == report.counters["spec_8"]
    assert cut.trial_counters["spec_4"] == per_trial[:2] and cut.reloaded["spec_4"] == [True,
                                                                                         False]
    gone = cut_report(report, {"spec_4": 0, "spec_8": 1})
    assert "spec_4" not in gone.counters
    assert cut_report(report, {"spec_4": 3, "spec_8": 1}) is report
