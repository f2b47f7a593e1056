"""The baseline's stability rule and the baseline interpolated by time (pure rules): a run
whose trials say when they started is judged by its baseline blocks' distance from the line
between their neighbours, with the load beside them; one without keeps the older rule."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from specschema import Submission, submission_verdicts, summarize
from specschema.block_ratios import Block, block_ratios
from specschema.block_t import blocked_ratio_t, shared_baseline_variance
from specschema.blocks import decode_rates, timed, trial_blocks
from specschema.conclusion import conclusion, interval_method_words
from specschema.examples import example_submission
from specschema.payload import parse_submission, submission_bytes
from specschema.protocol_files import all_protocols
from specschema.stability import (
    MAX_BASELINE_DRIFT,
    OFF_LINE,
    OFF_LINE_WITH_LOAD,
    Bounds,
    baseline_stability,
    off_line_blocks,
)

CREATED = datetime(2026, 11, 30, tzinfo=UTC)
LLAMA_V3 = next(p for p in all_protocols() if (p.id, p.version) == ("llamacpp-draft", 3))
DRAFT = "draft_qwen3_0.6b_n8"


def _llama(drift: float = 0.0) -> Submission:
    return example_submission(LLAMA_V3, seed=5, engine_version="b1", schema_version=2,
                              runtime="ggml", counters_seen=True, created_at=CREATED,
                              draft_speedups={DRAFT: 2.0}, blocks=True, drift=drift)


def _timed(sub: Submission, *, baseline_block_speed: Mapping[int, float] | None = None,
           load: Mapping[int, float] | None = None, default_load: float | None = 1.0
           ) -> Submission:
    """``sub`` with every trial's start time (the trials back to back in run order), its
    load average (``load``: by the baseline block's place among the baseline's blocks, the
    draft blocks at ``default_load``), and the baseline's blocks made faster or slower by a
    factor (by the same place)."""
    data: dict[str, Any] = json.loads(submission_bytes(sub))
    speed = baseline_block_speed or {}
    loads = load or {}
    trials = sorted(((c, t) for c in data["configs"] for t in c["trials"]),
                    key=lambda pair: pair[1]["position"])
    base_blocks = sorted({t["block"] for c in data["configs"] if c["role"] == "baseline"
                          for t in c["trials"]})
    clock = 0.0
    for config, trial in trials:
        place = base_blocks.index(trial["block"]) if config["role"] == "baseline" else None
        if place is not None and place in speed:
            trial["eval_duration_ns"] = int(trial["eval_duration_ns"] / speed[place])
        trial["started_s"] = round(clock, 3)
        clock += trial["wall_s"]
        value = loads.get(place, default_load) if place is not None else default_load
        if value is not None:
            trial["load_1m"] = value
    return parse_submission(json.dumps(data).encode())


def _drafts(sub: Submission) -> set[str]:
    return {str(v) for v in submission_verdicts(sub)[1:]} - {"incompatible"}


def test_a_steady_drift_is_corrected_not_unstable_while_the_older_rule_flags_it() -> None:
    drifting = _llama(drift=0.6)  # the last trial at 40 % of the first's speed
    assert _drafts(drifting) == {"unstable"}  # untimed: the older max / min rule
    stability = baseline_stability(drifting.configs[0], by_time=False)
    assert stability is not None and stability.rule == "block_drift"
    assert stability.drift is not None and stability.drift > MAX_BASELINE_DRIFT
    run = _timed(drifting)
    assert timed(run.configs)
    stability = baseline_stability(run.configs[0], by_time=True)
    assert stability is not None and stability.rule == "off_line" and not stability.unstable
    assert stability.worst is not None and abs(stability.worst.residual) < OFF_LINE_WITH_LOAD
    assert _drafts(run) == {"confirmed"}
    draft = next(s for s in summarize(run) if s.name == DRAFT)
    assert draft.speedup_tps == pytest.approx(2.0, rel=0.1)


def test_a_baseline_block_far_off_its_line_makes_the_run_unstable_whatever_the_load() -> None:
    run = _timed(_llama(), baseline_block_speed={2: 1.0 - OFF_LINE - 0.1})
    stability = baseline_stability(run.configs[0], by_time=True)
    assert stability is not None and stability.unstable
    assert stability.worst is not None and stability.worst.block == 2
    assert stability.worst.residual == pytest.approx(-OFF_LINE - 0.1, abs=0.05)
    assert _drafts(run) == {"unstable"}
    evidence = {c.name: c.speculation.model_copy(update={"observed": v})
                for c, v in zip(run.configs, submission_verdicts(run), strict=True)}
    words = conclusion(summarize(run), evidence, engine_version="b1", complete=True,
                       engine="llama-server")
    assert (f"block 3 of 5 ran {abs(stability.worst.residual):.0%} slower than the line "
            "between its neighbours") in words
    assert "a steady drift is corrected" in words


def test_a_smaller_step_counts_only_when_the_load_moved_with_it() -> None:
    slower = {2: 1.0 - (OFF_LINE + OFF_LINE_WITH_LOAD) / 2}
    quiet = _timed(_llama(), baseline_block_speed=slower)
    assert _drafts(quiet) == {"confirmed"}  # the load stayed: within the noise it may be
    busy = _timed(_llama(), baseline_block_speed=slower, load={2: 3.0})
    stability = baseline_stability(busy.configs[0], by_time=True)
    assert stability is not None and stability.unstable
    assert stability.worst is not None and stability.worst.load_change == pytest.approx(2.0)
    assert _drafts(busy) == {"unstable"}
    # without a load average (Windows) the same step is judged by the wider bound alone
    unknown = _timed(_llama(), baseline_block_speed=slower, load={2: 3.0}, default_load=None)
    assert unknown.configs[0].trials[0].load_1m is None
    assert _drafts(unknown) == {"confirmed"}


def test_off_line_blocks_and_their_bounds() -> None:
    found = off_line_blocks([0.0, 10.0, 30.0], [10.0, 9.0, 10.0], [1.0, 2.5, 1.0])
    assert [(b.block, round(b.residual, 9), b.load_change) for b in found] == [(1, -0.1, 1.5)]
    assert not found[0].breaks(Bounds(off_line=0.25, off_line_with_load=0.15))
    assert found[0].breaks(Bounds(off_line=0.25, off_line_with_load=0.05, load_moved=1.5))
    assert not found[0].breaks(Bounds(off_line=0.25, off_line_with_load=0.05, load_moved=1.6))
    # the line is drawn at the block's time: 9 sits on the line from 10 at 0 s to 7 at 30 s
    assert off_line_blocks([0.0, 10.0, 30.0], [10.0, 9.0, 7.0], [None] * 3)[0].residual == (
        pytest.approx(0.0))
    assert off_line_blocks([0.0, 30.0], [10.0, 5.0], [None, None]) == []


def test_the_baseline_is_interpolated_at_the_draft_blocks_time() -> None:
    baseline = [Block(0.0, (10.0,)), Block(100.0, (20.0,))]
    draft = [Block(25.0, (30.0,))]  # a quarter of the way in time: the baseline at 12.5
    assert block_ratios(draft, baseline).ratios == [pytest.approx(30.0 / 12.5)]
    run = _timed(_llama(drift=0.5))
    blocks = trial_blocks(run.configs[0].trials, [1.0] * len(run.configs[0].trials),
                          by_time=True)
    first = [t for t in run.configs[0].trials if t.block == run.configs[0].trials[0].block]
    assert blocks[0].centre == pytest.approx(
        sum(t.started_s + t.wall_s / 2 for t in first if t.started_s is not None) / len(first))
    # one trial without a time: the whole run is placed by run position, as before
    data = json.loads(submission_bytes(run))
    data["configs"][1]["trials"][0]["started_s"] = None
    assert not timed(parse_submission(json.dumps(data).encode()).configs)
    # nor are times that run against the run order: no clock gives those
    data["configs"][1]["trials"][0]["started_s"] = 0.0
    assert not timed(parse_submission(json.dumps(data).encode()).configs)


def test_times_and_load_are_optional_wire_fields_and_old_bytes_stay() -> None:
    plain = _llama()
    raw = submission_bytes(plain)
    for field in (b'"started_s"', b'"load_1m"', b'"client_cpu_s"'):
        assert field not in raw  # a v2 result from before them keeps its bytes
    run = _timed(plain)
    again = submission_bytes(run)
    assert b'"started_s":0.0' in again and b'"load_1m":1.0' in again
    assert parse_submission(again) == run
    v1 = json.loads(submission_bytes(example_submission("hardnumbers-m2", created_at=CREATED)))
    v1["configs"][0]["trials"][0]["load_1m"] = 1.0
    with pytest.raises(Exception, match="schema_version 1 has no such field"):
        parse_submission(json.dumps(v1).encode())


def test_every_interval_is_worded_as_a_within_run_interval() -> None:
    for interval in ("block_t", "block_bootstrap"):
        for blocked in (True, False):
            assert "a within-run interval" in interval_method_words(interval, blocked)


def test_a_timed_runs_interval_counts_the_baseline_blocks_its_draft_blocks_share() -> None:
    baseline = [Block(0.0, (10.0,)), Block(10.0, (11.0,)), Block(20.0, (10.0,))]
    drafts = [Block(5.0, (21.0,)), Block(15.0, (22.0,))]
    found = block_ratios(drafts, baseline)
    # the middle block is log(11 / 10) off the line; each draft block leans half on it
    variance, df = shared_baseline_variance(found)
    expected = math.log(1.1) ** 2 / 1.5 * ((1.0 - 0.5) + 0.0 + 0.0) / 2
    assert (round(variance, 12), df) == (round(expected, 12), 1)
    plain, shared = blocked_ratio_t(drafts, baseline), blocked_ratio_t(drafts, baseline, True)
    assert shared.ratio == plain.ratio
    assert plain.ci_low is not None and plain.ci_high is not None
    assert shared.ci_low is not None and shared.ci_high is not None
    assert shared.ci_low < plain.ci_low and shared.ci_high > plain.ci_high
    # a baseline exactly on its line shares nothing: the plain interval, bit for bit
    straight = [Block(0.0, (10.0,)), Block(10.0, (11.0,)), Block(20.0, (12.0,))]
    assert blocked_ratio_t(drafts, straight, True) == blocked_ratio_t(drafts, straight)


def test_the_summary_of_a_timed_run_uses_the_shared_baseline_interval() -> None:
    run = _timed(_llama(drift=0.3))
    base = run.configs[0]
    draft = next(c for c in run.configs if c.name == DRAFT)
    expected = blocked_ratio_t(trial_blocks(draft.trials, decode_rates(draft.trials), True),
                               trial_blocks(base.trials, decode_rates(base.trials), True),
                               shared_baseline=True)
    found = next(s for s in summarize(run) if s.name == DRAFT)
    assert (found.speedup_tps, found.speedup_tps_ci_low, found.speedup_tps_ci_high) == (
        expected.ratio, expected.ci_low, expected.ci_high)
