"""A run's plan (``specsubmit.run.plan``): the estimate from the first block, the rounds
that fit a budget, what the plan can resolve, its words; and the runner's one call to the
planner, before the first counted trial, against the fake llama-server."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specschema import Fingerprint, Trial, get_protocol
from specserver.ingest import rules
from specsubmit.engines import Generation
from specsubmit.engines.base import RunListener
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.run.plan import (
    BUSY_SPREAD,
    QUIET_SPREAD,
    Measured,
    decide,
    estimate,
    plan_lines,
    resolvable,
    too_long_message,
    trial_seconds,
)
from specsubmit.run.runner import RunSettings, run_protocol
from tests.client.engines.llama_server.fake_llama_server import write_fake_binary
from tests.support.realengine.ollama_store import add_model
from tests.support.realengine.tiny_gguf import TinyModel, write_model

DRAFT = get_protocol("llamacpp-draft")  # two rounds in blocks of 2, num_predict 200
ONE_DRAFT = DRAFT.for_run({"configs": "draft_qwen3_0.6b_n3"})
NOW = datetime(2026, 12, 6, 17, 0)


def _gen(wall_s: float, *, tokens: int = 200, eval_s: float = 1.6, load_s: float = 0.0
         ) -> Generation:
    return Generation(wall_s=wall_s, ttft_s=0.1, text="x", total_duration_ns=int(wall_s * 1e9),
                      load_duration_ns=int(load_s * 1e9), prompt_eval_count=20,
                      prompt_eval_duration_ns=100_000_000, eval_count=tokens,
                      eval_duration_ns=int(eval_s * 1e9), done_reason="length")


def _measured(protocol=ONE_DRAFT, *, start_s: float | None = 1.0,  # type: ignore[no-untyped-def]
              warmup: Generation | None = None, refused: frozenset[str] = frozenset(),
              per_block: bool = True) -> Measured:
    return Measured(protocol, refused, start_s, (warmup or _gen(2.0),), per_block)


def test_a_trial_takes_a_warm_up_without_its_load_stretched_to_the_token_limit() -> None:
    assert trial_seconds(_measured()) == pytest.approx(2.0)
    # a warm-up that loaded the model for 3 s and stopped at 100 of 200 tokens (1 s)
    late = _measured(warmup=_gen(5.0, tokens=100, eval_s=1.0, load_s=3.0))
    assert trial_seconds(late) == pytest.approx(2.0 + 100 * 0.01)
    assert trial_seconds(Measured(ONE_DRAFT, frozenset(), 1.0, (), True)) is None


def test_the_estimate_counts_each_block_with_its_start_and_warm_up() -> None:
    # 1 s start + 2 s warm-up per block, 2 s per trial; blocks of 2
    two, one = estimate(_measured(), 2), estimate(_measured(), 1)
    assert (two.blocks, two.trials, two.starts, two.warmups) == (9, 18, 9, 9)
    assert two.remaining_s == pytest.approx(18 * 2 + 8 * 3)  # the first block is warm
    assert (one.blocks, one.trials, one.remaining_s) == (5, 10, pytest.approx(10 * 2 + 4 * 3))
    assert two.blocks_per_config == 4 and one.blocks_per_config == 2
    # a config refused before the run takes no time
    whole = DRAFT.for_run({})
    refused = frozenset(c.name for c in whole.configs if "qwen2.5" in c.name)
    assert estimate(_measured(whole, refused=refused), 2).blocks == 2 * 2 * 4 + 1
    # one engine for every config, already warmed up: the trials alone
    shared = estimate(_measured(get_protocol("hardnumbers-m2"), start_s=None,
                                per_block=False), None)
    assert shared.remaining_s == pytest.approx(15 * shared_trial())
    assert (shared.starts, shared.warmups, shared.blocks_per_config) == (0, 3, None)


def shared_trial() -> float:
    limit = get_protocol("hardnumbers-m2").options.num_predict
    return 2.0 + max(limit - 200, 0) * 1.6 / 200


def test_the_budget_takes_the_most_rounds_that_fit() -> None:
    measured = _measured()  # 60 s for two rounds, 32 s for one
    assert decide(measured, budget_s=None, elapsed_s=10).rounds is None  # the protocol's
    assert decide(measured, budget_s=70, elapsed_s=10).rounds is None
    fitted = decide(measured, budget_s=69, elapsed_s=10)
    assert fitted.chosen.rounds == 1 and fitted.longer is not None
    assert fitted.longer.rounds == 2 and fitted.over_budget_s is None
    # each block starts its own engine: the first estimate is shown, the cut waits for the
    # revision (a draft's blocks are only guessed yet)
    assert not fitted.final and fitted.rounds is None
    tight = decide(measured, budget_s=40, elapsed_s=10)  # nothing fits: one round
    assert tight.chosen.rounds == 1 and tight.longer is None
    assert tight.over_budget_s == pytest.approx(10 + 32 - 40)
    assert not tight.too_long  # 2 s past a 40 s budget: within its fifth
    # a protocol without rounds runs as it is, and says how far past the budget it ends
    shared = decide(_measured(get_protocol("hardnumbers-m2"), start_s=None, per_block=False),
                    budget_s=1, elapsed_s=0)
    assert shared.rounds is None and shared.over_budget_s is not None


def test_what_a_plan_can_resolve_is_students_t_over_its_blocks() -> None:
    assert resolvable(4, 0.02) == pytest.approx(math.exp(3.18244631 * 0.02 / 2) - 1)
    assert resolvable(2, QUIET_SPREAD) > 5 * resolvable(4, QUIET_SPREAD)  # type: ignore[operator]
    assert resolvable(1, BUSY_SPREAD) is None and resolvable(None, BUSY_SPREAD) is None


def test_the_plan_in_words() -> None:
    lines = plan_lines(decide(_measured(), budget_s=69, elapsed_s=10), NOW)
    assert lines == [
        "plan: llamacpp-draft v5, 1 round of the protocol's 2 (2 would end about 17:01, "
        "past the budget)",
        "  configs: no_draft (baseline), draft_qwen3_0.6b_n3",
        "  5 blocks of 2 trials: 10 trials, 5 engine starts, 5 warm-ups",
        "  measured: an engine start 1.0 s, a warm-up 2.0 s, a trial about 2.0 s",
        "  estimated end: 17:00, in 0.5 min (a draft's blocks taken as long as the "
        "baseline's until timed); budget 1.1 min, 0.2 min used",
        "  rounds: fixed once every config has run a block (a draft's speed is not known "
        "before); until then the run keeps the protocol's",
        "  resolves: a speedup of 20 % or more on a quiet machine, 285 % or more on a busy "
        "one (2 blocks per config; Student's t, a spread of 0.02 or 0.15 in log speedup "
        "from block to block)",
    ]
    assert plan_lines(decide(_measured(), budget_s=None, elapsed_s=0), NOW)[0] == \
        "plan: llamacpp-draft v5, 2 rounds as the protocol asks"
    over = plan_lines(decide(_measured(), budget_s=36, elapsed_s=10), NOW)
    assert over[4].endswith("about 0.1 min past the budget: it cannot make fewer rounds, "
                            "--configs runs fewer configs")
    whole = DRAFT.for_run({})
    refused = frozenset({"draft_qwen2.5_0.5b_n8"})
    assert "; not run: draft_qwen2.5_0.5b_n8 (incompatible)" in plan_lines(
        decide(_measured(whole, refused=refused), budget_s=None, elapsed_s=0), NOW)[1]
    shared = plan_lines(decide(_measured(get_protocol("hardnumbers-m2"), start_s=None,
                                         per_block=False), budget_s=None, elapsed_s=0), NOW)
    assert shared[0] == "plan: hardnumbers-m2 v1, as the protocol runs it (no rounds to fit " \
                        "to a budget)"
    assert "engine start" not in shared[2] + shared[3]
    assert shared[-1] == "  resolves: not estimated (the interval is not over blocks)"


def _timed(draft_s: float) -> Measured:
    """The second call on ONE_DRAFT: its first two blocks timed (the baseline's 7 s, the
    draft's ``draft_s``), the next block the second baseline block."""
    first = _measured()
    return Measured(ONE_DRAFT, frozenset(), first.start_s, first.warmups, True,
                    (("no_draft", 7.0, 2), ("draft_qwen3_0.6b_n3", draft_s, 2)), 4, False)


def test_the_revision_takes_each_configs_timed_blocks() -> None:
    # two rounds: 7 blocks to go (4 baseline, 3 draft); one round: 3 (2 baseline, 1 draft)
    assert estimate(_timed(7.0), 2).remaining_s == pytest.approx(7 * 7.0)
    assert estimate(_timed(30.0), 2).remaining_s == pytest.approx(4 * 7.0 + 3 * 30.0)
    assert estimate(_timed(30.0), 1).remaining_s == pytest.approx(2 * 7.0 + 30.0)
    slow = decide(_timed(30.0), budget_s=120, elapsed_s=50)  # 70 s left: one round fits
    assert slow.rounds == 1 and slow.longer is not None
    lines = plan_lines(slow, NOW)
    assert lines[0] == ("plan revised, every config timed once: llamacpp-draft v5, 1 round "
                        "of the protocol's 2 (2 would end about 17:01, past the budget)")
    assert lines[1] == "  5 blocks of 2 trials: 10 trials, 5 engine starts, 5 warm-ups"
    assert lines[2] == ("  a block took: no_draft 7 s, draft_qwen3_0.6b_n3 30 s (its start, "
                        "warm-up and trials)")
    assert lines[-1].startswith("  resolves: a speedup of 20 %")
    # nothing changed: the new end alone
    same = plan_lines(decide(_timed(7.0), budget_s=None, elapsed_s=50), NOW)
    assert [line.split(":")[0] for line in same] == [
        "plan revised, every config timed once", "  a block took", "  estimated end"]


def test_rounds_cut_by_the_first_guess_come_back_when_the_drafts_are_faster() -> None:
    # The first estimate takes the draft's blocks as long as the baseline's (7 s each with
    # start and warm-up): two rounds would end past a 60 s budget, so it shows one...
    first = decide(_measured(), budget_s=60, elapsed_s=10)
    assert first.chosen.rounds == 1 and first.rounds is None
    # ...but keeps both until the draft is timed: 3 s a block, and two rounds fit after all
    fast = decide(_timed(3.0), budget_s=80, elapsed_s=20)
    assert fast.final and fast.chosen.rounds == 2 and fast.rounds is None
    slow = decide(_timed(30.0), budget_s=80, elapsed_s=20)
    assert slow.final and slow.rounds == 1


def test_a_budget_even_the_fewest_rounds_cannot_fit_stops_before_the_first_trial() -> None:
    # one round takes 32 s more: 10 + 32 s ends 17 s past a 25 s budget, over its fifth
    plan = decide(_measured(), budget_s=25, elapsed_s=10)
    assert plan.chosen.rounds == 1 and plan.too_long
    assert too_long_message(plan) == (
        "the budget of 0.4 min cannot fit this run: even 1 round would take about 0.7 min "
        "by the first block's timing; stopped before the first trial, nothing was measured. "
        "Give --budget 1, or fewer configs with --configs")
    assert not decide(_measured(), budget_s=36, elapsed_s=10).too_long  # 6 s past 36: a sixth
    assert not decide(_measured(), budget_s=None, elapsed_s=10).too_long
    # once blocks ran, the run goes on and the plan says how late it ends
    late = decide(_timed(30.0), budget_s=25, elapsed_s=20)
    assert late.over_budget_s is not None and not late.too_long


def test_rounds_whose_last_blocks_are_behind_cannot_be_made() -> None:
    # past the second round's first baseline block (position 10 of 18), a cut to one round
    # would leave the run over; the run makes its two
    late = Measured(ONE_DRAFT, frozenset(), 1.0, (_gen(2.0),), True,
                    (("no_draft", 7.0, 2), ("draft_qwen3_0.6b_n3", 30.0, 2)), 10, False)
    plan = decide(late, budget_s=1, elapsed_s=0)
    assert plan.rounds is None and plan.chosen.rounds == 2


# --- the runner's calls, against the fake llama-server ------------------------------------

MACHINE = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24)
SMALL = TinyModel(layers=1, embd=64, ff=128, heads=2, seed=5)


class Events(RunListener):
    def __init__(self) -> None:
        self.events: list[str] = []

    def trial_started(self, position: int, total: int, config: str, index: int) -> None:
        self.events.append(f"trial {position}/{total}")

    def trial_finished(self, position: int, total: int, config: str, trial: Trial) -> None:
        pass


@pytest.mark.parametrize("rounds", [1, None])
def test_the_runner_asks_before_the_first_trial_and_once_every_config_ran(
        tmp_path: Path, rounds: int | None) -> None:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", write_model(tmp_path / "t.gguf", SMALL))
    add_model(folder, "qwen3:0.6b", write_model(tmp_path / "d.gguf", SMALL.truncated(1)))
    parameters = {"configs": "draft_qwen3_0.6b_n3"}
    settings = RunSettings(protocol=DRAFT.for_run(parameters), parameters=parameters)
    events = Events()
    seen: list[Measured] = []

    def planner(measured: Measured) -> int | None:
        seen.append(measured)
        events.events.append("plan")
        return rounds

    with LlamaServerEngine(settings, binary=write_fake_binary(tmp_path / "bin"),
                           models_dir=folder, startup_timeout_s=60, threads=1) as engine:
        outcome = run_protocol(engine, settings, fingerprint=MACHINE, listener=events,
                               planner=planner)
    first, second = seen
    assert first.per_block and first.start_s is not None and first.start_s > 0
    # the first block's warm-up: the protocol's 16 tokens, not a trial's 200
    assert len(first.warmups) == 1 and first.warmups[0].eval_count == DRAFT.warmup_tokens == 16
    assert (first.position, first.in_block, first.blocks) == (0, True, ())
    # the second: before the second baseline block, both configs' first blocks timed
    assert (second.position, second.in_block) == (4, False)
    assert [(name, trials) for name, _, trials in second.blocks] == [
        ("no_draft", 2), ("draft_qwen3_0.6b_n3", 2)]
    assert all(seconds > 0 for _, seconds, _ in second.blocks)
    total = 10 if rounds == 1 else 18
    assert events.events[:2] == ["plan", f"trial 0/{total}"]
    assert events.events[5:7] == ["plan", f"trial 4/{total}"]
    assert events.events.count("plan") == 2
    sub = outcome.submission
    assert sub.complete and outcome.trials_done == total
    assert sub.protocol.parameters == ({**parameters, "rounds": "1"} if rounds else parameters)
    assert [len(c.trials) for c in sub.configs] == ([6, 4] if rounds else [10, 8])
    assert len({t.block for c in sub.configs for t in c.trials}) == (5 if rounds else 9)
    ctx = rules.RuleContext(DRAFT, datetime.now(UTC), timedelta(days=30), timedelta(minutes=5))
    assert rules.violations(sub, ctx) == []
