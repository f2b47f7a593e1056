"""Blocks: the interval over the unit that varies, and the unstable verdict (pure rules)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from specschema import submission_verdicts, summarize
from specschema.block_bootstrap import blocked_ratio
from specschema.block_ratios import Block
from specschema.blocks import baseline_drift
from specschema.examples import example_submission
from specschema.payload import parse_submission, submission_bytes
from specschema.protocol_files import all_protocols
from specschema.stability import MAX_BASELINE_DRIFT
from specschema.stats import SplitMix64, median, percentile

CREATED = datetime(2026, 11, 30, tzinfo=UTC)
# The first bracketed design (2 blocks per draft, the block bootstrap): its results keep
# their numbers. The current design's interval: test_block_t.py.
LLAMA_V2 = next(p for p in all_protocols() if (p.id, p.version) == ("llamacpp-draft", 2))


def _llama(**kwargs: object):  # type: ignore[no-untyped-def]
    return example_submission(LLAMA_V2, seed=3, engine_version="b1", schema_version=2,
                              runtime="ggml", counters_seen=True, created_at=CREATED,
                              draft_speedups={"draft_qwen3_0.6b_n8": 2.0}, **kwargs)


def _reference(num: list[Block], den: list[Block], resamples: int = 2000,
               seed: int = 0x5BEC_BE4C) -> tuple[float, float]:
    """The documented draw order, written out plainly (a re-implementation would do this)."""
    rng = SplitMix64(seed)
    den = sorted(den, key=lambda b: b.centre)
    estimates = []
    for _ in range(resamples):
        meds = [median([b.values[rng.below(len(b.values))] for _ in b.values]) for b in den]
        picks = [rng.below(len(num)) for _ in num]
        ratios = []
        for p in picks:
            block = num[p]
            drawn = median([block.values[rng.below(len(block.values))] for _ in block.values])
            before = [i for i, b in enumerate(den) if b.centre <= block.centre]
            after = [i for i, b in enumerate(den) if b.centre > block.centre]
            if not before:
                ref = meds[0]
            elif not after:
                ref = meds[-1]
            else:
                i, j = before[-1], after[0]
                if den[i].centre == block.centre:
                    ref = meds[i]
                else:
                    w = (block.centre - den[i].centre) / (den[j].centre - den[i].centre)
                    ref = meds[i] * (1 - w) + meds[j] * w
            ratios.append(drawn / ref)
        estimates.append(median(ratios))
    return percentile(estimates, 0.025), percentile(estimates, 0.975)


def test_the_blocked_interval_follows_the_documented_draw_order_bit_for_bit() -> None:
    den = [Block(1.0, (10.0, 11.0, 9.5)), Block(10.0, (8.0, 8.5, 7.9)),
           Block(19.0, (6.0, 6.2, 6.1))]
    num = [Block(4.0, (19.0, 18.0, 20.5)), Block(15.0, (13.0, 14.1, 12.2))]
    estimate = blocked_ratio(num, den)
    assert (estimate.ci_low, estimate.ci_high) == _reference(num, den)
    assert estimate == blocked_ratio(num, den)  # seeded: the same every time


def test_a_linear_drift_between_baseline_blocks_cancels() -> None:
    # The machine slows linearly from 20 to 10 tok/s over the run; the draft is exactly 2x
    # the baseline at every moment. A blocked order (baseline first) would read 2x of a
    # slower moment against a faster baseline; the interpolated reference reads 2.00x.
    def rate(position: float) -> float:
        return 20.0 - position * 10.0 / 20.0

    den = [Block(c, (rate(c),) * 3) for c in (1.0, 10.0, 19.0)]
    num = [Block(c, (2 * rate(c),) * 3) for c in (4.0, 16.0)]
    estimate = blocked_ratio(num, den)
    assert estimate.ratio == pytest.approx(2.0)
    assert estimate.block_ratios == pytest.approx((2.0, 2.0))
    blocked_reading = median([2 * rate(p) for p in (3, 4, 5)]) / median(
        [rate(p) for p in (0, 1, 2)])
    assert blocked_reading < 1.9  # what one block per config would have said (1.85x)


def test_the_interval_spans_blocks_that_disagree() -> None:
    # Within each block the trials agree to 1 %; the two draft blocks read 1.5x and 2.5x.
    # An interval over trials alone would be a few percent wide; over blocks it holds both.
    den = [Block(c, (10.0, 10.1, 9.9)) for c in (1.0, 10.0, 19.0)]
    num = [Block(4.0, (15.0, 15.1, 14.9)), Block(16.0, (25.0, 25.1, 24.9))]
    estimate = blocked_ratio(num, den)
    assert estimate.ci_low is not None and estimate.ci_high is not None
    assert estimate.ci_low <= 1.5 and estimate.ci_high >= 2.5


def test_a_run_with_blocks_carries_them_and_an_old_one_keeps_its_bytes_and_numbers() -> None:
    plain = _llama()
    assert all(t.block is None for c in plain.configs for t in c.trials)
    assert b'"block"' not in submission_bytes(plain)  # a v2 submission from before blocks
    blocked = _llama(blocks=True)
    raw = submission_bytes(blocked)
    assert b'"block":0' in raw and parse_submission(raw) == blocked
    base, draft = summarize(blocked)[0], summarize(blocked)[2]
    assert (base.blocks, draft.blocks) == (3, 2)
    assert draft.speedup_tps == pytest.approx(2.0, rel=0.1)
    assert draft.speedup_wall_ci_low is not None  # the wall-time speedup has its interval
    old = summarize(plain)[2]
    assert old.blocks is None and old.speedup_wall_ci_low is None


def test_baseline_blocks_that_disagree_make_every_draft_unstable() -> None:
    steady = _llama(blocks=True, drift=0.2)
    drift = baseline_drift(steady.configs[0])
    assert drift is not None and drift < MAX_BASELINE_DRIFT
    assert set(submission_verdicts(steady)[1:]) == {"confirmed"}
    shaky = _llama(blocks=True, drift=0.6)  # the last block at 40 % of the first's speed
    drift = baseline_drift(shaky.configs[0])
    assert drift is not None and drift > MAX_BASELINE_DRIFT
    assert submission_verdicts(shaky)[0] == "not_applied"  # the baseline stays the baseline
    assert set(submission_verdicts(shaky)[1:]) == {"unstable"}
    # without blocks nothing can be judged: the same trials are confirmed as before
    stripped = json.loads(submission_bytes(shaky))
    for config in stripped["configs"]:
        for trial in config["trials"]:
            trial["block"] = None
    assert set(submission_verdicts(parse_submission(json.dumps(stripped).encode()))[1:]) == {
        "confirmed"}


def test_schema_v1_has_no_blocks() -> None:
    v1 = example_submission("hardnumbers-m2", created_at=CREATED)
    data = json.loads(submission_bytes(v1))
    data["configs"][0]["trials"][0]["block"] = 0
    with pytest.raises(Exception, match="schema_version 1 has no such field"):
        parse_submission(json.dumps(data).encode())
