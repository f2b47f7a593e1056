"""The probe's rounds (engines/llama_server/probe.py ``measure_rounds``) against a scripted
server: which requests it counts, where it cuts the repeated context again, and when it
stops for its time budget. The server here is the answers llama-server gives (timings'
``predicted_n``, ``draft_n``, ``draft_n_accepted``, as tests/realengine/test_probe_real.py
and the runs in BENCHMARKS.md saw them), played by a stub so that a clock can be set."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from specsubmit.engines.base import Generation, RunListener
from specsubmit.engines.llama_server.probe import CUT_TRIES, measure_rounds
from specsubmit.errors import LlamaServerError


class ScriptedServer:
    """A round checking k tokens in k ms (a plain step 1 ms); the clock advances by what each
    request took. ``short_before``: requests whose prompt is at most this long draft one
    token fewer than asked (the lookup matched a shorter continuation). ``copies_from``: a
    target that does not copy the repeated text by itself, whose context is that many
    tokens: it drafts nothing unless the request's logit bias makes its first token the one
    that continues the repeat."""

    def __init__(self, short_before: int = 0, copies_from: int | None = None) -> None:
        self.now = 0.0
        self.short_before = short_before
        self.copies_from = copies_from
        self.prompts: list[int] = []

    def clock(self) -> float:
        return self.now

    def tokenize(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def completion(self, body: Mapping[str, Any]) -> Generation:
        n, prompt = int(body["n_predict"]), list(body["prompt"])
        self.prompts.append(len(prompt))
        drafted = max(n - 2, 0)
        if drafted and len(prompt) <= self.short_before:
            drafted -= 1
        if self.copies_from is not None:
            continuation = prompt[len(prompt) - self.copies_from]
            if [[continuation, pytest.approx(1000.0, abs=900)]] != body.get("logit_bias"):
                drafted = 0
        self.now += (n - 1) / 1000
        return Generation(wall_s=0.0, ttft_s=None, text="", total_duration_ns=0,
                          load_duration_ns=0, prompt_eval_count=1,
                          prompt_eval_duration_ns=1, eval_count=n,
                          eval_duration_ns=(n - 1) * 1_000_000, done_reason="length",
                          draft_n=drafted or None, draft_accepted=drafted or None)


TEXT = "".join(chr(33 + i % 90) for i in range(400))


def test_each_size_once_per_round_and_a_plain_step_either_side() -> None:
    server = ScriptedServer()
    context, found, steps = measure_rounds(server, TEXT, RunListener(),  # type: ignore[arg-type]
                                           sizes=(2, 4), rounds=3, budget_s=60,
                                           clock=server.clock)
    assert found == {2: [0.002] * 3, 4: [0.004] * 3} and steps == [0.001] * 6
    assert context == server.prompts[0]


def test_a_round_that_drafted_less_is_not_counted_but_tried_elsewhere() -> None:
    server = ScriptedServer(short_before=256 + 24 + 8)  # the first two cuts draft short
    _, found, _ = measure_rounds(server, TEXT, RunListener(),  # type: ignore[arg-type]
                                 sizes=(2, 4), rounds=2, budget_s=60, clock=server.clock)
    assert found == {2: [0.002] * 2, 4: [0.004] * 2}
    assert server.prompts[:3] == [280, 288, 296]  # cut again 8 tokens on, twice
    server = ScriptedServer(short_before=10_000)  # never drafts in full
    with pytest.raises(LlamaServerError, match=f"in {CUT_TRIES} tries"):
        measure_rounds(server, TEXT, RunListener(),  # type: ignore[arg-type]
                       sizes=(2, 4), rounds=2, budget_s=60, clock=server.clock)


def test_rounds_stop_before_one_would_end_past_the_budget_two_at_least() -> None:
    # a round here: two plain steps and checks of 2 and 4, 1 + 1 + 2 + 4 = 8 ms
    # (a warm-up of 4 ms first): a third round would end at 28 ms, a fourth at 36 ms
    for budget, expected in ((0.0, 2), (0.0275, 2), (0.0285, 3), (0.0365, 4), (1.0, 5)):
        server = ScriptedServer()
        _, found, _ = measure_rounds(server, TEXT, RunListener(),  # type: ignore[arg-type]
                                     sizes=(2, 4), rounds=5, budget_s=budget,
                                     clock=server.clock)
        assert len(found[2]) == expected, budget


def test_a_target_that_would_not_copy_the_repeat_is_made_to() -> None:
    server = ScriptedServer(copies_from=256)
    context, found, _ = measure_rounds(server, TEXT, RunListener(),  # type: ignore[arg-type]
                                       sizes=(2, 4), rounds=2, budget_s=60,
                                       clock=server.clock)
    assert found == {2: [0.002] * 2, 4: [0.004] * 2}
    assert set(server.prompts) == {context}  # the first cut held: nothing was retried


def test_cutting_again_stops_before_the_repeat_runs_past_the_context() -> None:
    server = ScriptedServer(short_before=10_000)
    short = TEXT[:160]  # a context of 72 tokens: the cuts at 24, 32, ... reach its end
    with pytest.raises(LlamaServerError, match="found nothing to draft"):
        measure_rounds(server, short, RunListener(),  # type: ignore[arg-type]
                       sizes=(2, 4), rounds=2, budget_s=60, clock=server.clock)
    assert len(server.prompts) < CUT_TRIES
