"""The t interval over blocks (``interval: "block_t"``): its table, its arithmetic, its
coverage, and which results it applies to (pure rules)."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest

from specschema import ProtocolError, get_protocol, summarize, summarize_configs
from specschema.block_bootstrap import blocked_ratio
from specschema.block_ratios import Block
from specschema.block_t import T_975, blocked_ratio_t, t_975
from specschema.examples import example_submission
from specschema.protocol_files import all_protocols, interval_of, load_protocol_bytes

CREATED = datetime(2026, 11, 30, tzinfo=UTC)


def _two_sided(t: float, dof: int) -> float:
    """P(|T| < t) for Student's t with integer degrees of freedom, written from Abramowitz
    and Stegun 26.7.3-4 (the series in cos(theta), theta = atan(t / sqrt(dof)))."""
    theta = math.atan(t / math.sqrt(dof))
    sin, cos = math.sin(theta), math.cos(theta)
    if dof % 2:
        if dof == 1:
            return 2 * theta / math.pi
        term = total = cos
        for k in range(1, (dof - 3) // 2 + 1):
            term *= cos * cos * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + sin * total)
    term = total = 1.0
    for k in range(1, (dof - 2) // 2 + 1):
        term *= cos * cos * (2 * k - 1) / (2 * k)
        total += term
    return sin * total


@pytest.mark.parametrize("dof", [1, 2, 3, 4, 5, 7, 10, 30, 99, 100])
def test_the_t_table_is_students_975_quantile(dof: int) -> None:
    # At the tabulated value the two-sided probability is 0.95 to the table's 9 digits.
    assert _two_sided(t_975(dof), dof) == pytest.approx(0.95, abs=2e-9)
    assert len(T_975) == 100 and list(T_975) == sorted(T_975, reverse=True)
    assert t_975(3) == 3.18244631 and t_975(1) == 12.7062047  # the textbook values


def test_beyond_the_table_the_last_quantile_is_wider_than_the_truth() -> None:
    assert t_975(1000) == T_975[-1] > 1.959964
    with pytest.raises(ValueError):
        t_975(0)


def _baseline(rate: float = 10.0) -> list[Block]:
    return [Block(c, (rate,) * 2) for c in (0.5, 6.5, 12.5, 18.5, 24.5)]


def test_the_estimate_is_the_geometric_mean_of_block_ratios_with_a_t_interval() -> None:
    # A flat baseline of 10 tok/s; four draft blocks at 18, 22, 19 and 21 tok/s.
    den = _baseline()
    num = [Block(c, (v, v)) for c, v in zip((2.5, 10.5, 14.5, 22.5), (18.0, 22.0, 19.0, 21.0),
                                            strict=True)]
    estimate = blocked_ratio_t(num, den)
    logs = [math.log(r) for r in (1.8, 2.2, 1.9, 2.1)]
    centre = sum(logs) / 4
    sd = math.sqrt(sum((v - centre) ** 2 for v in logs) / 3)
    assert estimate.block_ratios == pytest.approx((1.8, 2.2, 1.9, 2.1))
    assert estimate.ratio == pytest.approx(math.exp(centre))
    assert estimate.ci_low == pytest.approx(math.exp(centre - 3.18244631 * sd / 2))
    assert estimate.ci_high == pytest.approx(math.exp(centre + 3.18244631 * sd / 2))
    assert estimate == blocked_ratio_t(num, den)  # no randomness: the same every time


def test_blocks_that_agree_give_a_narrow_interval_and_blocks_that_do_not_a_wide_one() -> None:
    den = _baseline()
    agree = [Block(c, (20.0, 20.0)) for c in (2.5, 10.5, 14.5, 22.5)]
    tight = blocked_ratio_t(agree, den)
    assert (tight.ratio, tight.ci_low, tight.ci_high) == pytest.approx((2.0, 2.0, 2.0))
    # Two blocks that read 1.5x and 2.5x: t with one degree of freedom (12.7) says that two
    # blocks cannot tell how much blocks vary; the bootstrap over them only spans the two.
    two = [Block(2.5, (15.0, 15.0)), Block(22.5, (25.0, 25.0))]
    wide = blocked_ratio_t(two, den)
    boot = blocked_ratio(two, den)
    assert wide.ci_low is not None and wide.ci_high is not None
    assert boot.ci_low is not None and boot.ci_high is not None
    assert wide.ci_low < 0.5 and wide.ci_high > 8.0
    assert 1.4 < boot.ci_low and boot.ci_high < 2.6


def test_a_linear_drift_between_baseline_blocks_cancels() -> None:
    def rate(position: float) -> float:
        return 20.0 - position * 10.0 / 25.0

    den = [Block(c, (rate(c),) * 2) for c in (0.5, 6.5, 12.5, 18.5, 24.5)]
    num = [Block(c, (2 * rate(c),) * 2) for c in (2.5, 10.5, 14.5, 22.5)]
    estimate = blocked_ratio_t(num, den)
    assert estimate.ratio == pytest.approx(2.0)
    assert estimate.ci_low == pytest.approx(2.0) and estimate.ci_high == pytest.approx(2.0)


def test_one_block_or_a_block_that_decoded_nothing_has_no_interval() -> None:
    den = _baseline()
    one = blocked_ratio_t([Block(2.5, (20.0, 21.0))], den)
    assert one.ratio == pytest.approx(2.05) and (one.ci_low, one.ci_high) == (None, None)
    zero = blocked_ratio_t([Block(2.5, (0.0, 0.0)), Block(10.5, (20.0, 20.0))], den)
    assert (zero.ratio, zero.ci_low, zero.ci_high) == (0.0, None, None)
    with pytest.raises(ValueError):
        blocked_ratio_t([Block(2.5, ())], den)


def _simulated_run(rng: random.Random, blocks: int, true_ratio: float,
                   between: float) -> tuple[list[Block], list[Block]]:
    """A bracketed run: each block's speed moves by a log-normal factor (the machine's load
    at that moment, sd ``between``), trials within a block by 2 %."""
    den: list[Block] = []
    num: list[Block] = []
    position = 0.0
    for k in range(2 * blocks + 1):
        rate = 10.0 * math.exp(rng.gauss(0.0, between))
        factor = 1.0 if k % 2 == 0 else true_ratio
        values = tuple(rate * factor * math.exp(rng.gauss(0.0, 0.02)) for _ in range(2))
        (den if k % 2 == 0 else num).append(Block(position + 0.5, values))
        position += 2
    return num, den


def test_the_interval_covers_the_true_speedup_95_times_in_100() -> None:
    # Seeded, so deterministic: with 4 draft blocks whose speed moves 15 % from block to
    # block, the t interval holds the true 2x in 93 % of 2,000 runs (a little under 95 %:
    # neighbouring draft blocks share a baseline block, so their ratios are correlated).
    # A normal quantile (1.96) in its place would hold it in about 86 %.
    rng = random.Random(22)
    held = held_normal = 0
    runs = 2000
    for _ in range(runs):
        num, den = _simulated_run(rng, 4, 2.0, 0.15)
        estimate = blocked_ratio_t(num, den)
        assert estimate.ci_low is not None and estimate.ci_high is not None
        held += estimate.ci_low <= 2.0 <= estimate.ci_high
        half = math.log(estimate.ci_high / estimate.ratio) * 1.959964 / t_975(3)
        held_normal += abs(math.log(2.0 / estimate.ratio)) <= half
    assert 0.92 <= held / runs <= 0.97
    assert held_normal / runs < 0.9


def test_the_bootstrap_over_two_blocks_covers_far_less_than_it_says() -> None:
    # Why "block_t": the same simulation with 2 blocks per draft (the first bracketed
    # design) and its two-stage bootstrap holds the true value in well under 95 %.
    rng = random.Random(23)
    runs = 60
    held = 0
    for _ in range(runs):
        num, den = _simulated_run(rng, 2, 2.0, 0.15)
        estimate = blocked_ratio(num, den, resamples=400)
        assert estimate.ci_low is not None and estimate.ci_high is not None
        held += estimate.ci_low <= 2.0 <= estimate.ci_high
    assert held / runs < 0.8


def test_the_current_llama_server_protocols_use_the_t_interval_and_old_ones_keep_theirs() -> None:
    for name in ("llamacpp-draft", "llamacpp-draft-long", "ollama-draft", "lmstudio-draft"):
        protocol = get_protocol(name)
        assert protocol.interval == "block_t" and protocol.order == "bracketed"
        drafts = [c.name for c in protocol.configs if c.role == "draft"]
        blocks = {n: len({b for (key, _), b in zip(protocol.schedule(), protocol.blocks(),
                                                    strict=True) if key == n})
                  for n in drafts}
        assert set(blocks.values()) == {4}  # 3 degrees of freedom per draft
    old = [p for p in all_protocols() if p.interval == "block_bootstrap"]
    assert {(p.id, p.version) for p in old} >= {("llamacpp-draft", 2), ("ollama-draft", 3),
                                                ("llamacpp-draft-long", 2)}
    assert interval_of("llamacpp-draft", 3, "0" * 64) == "block_bootstrap"  # not shipped


def test_a_submission_is_summarised_with_its_protocols_interval() -> None:
    sub = example_submission("llamacpp-draft", seed=5, engine_version="b1", schema_version=2,
                             runtime="ggml", counters_seen=True, created_at=CREATED,
                             draft_speedups={"draft_qwen3_0.6b_n8": 2.0}, blocks=True)
    assert sub.protocol.version >= 3  # block_t since version 3
    mine = {s.name: s for s in summarize(sub)}
    as_t = {s.name: s for s in summarize_configs(sub.configs, interval="block_t")}
    as_boot = {s.name: s for s in summarize_configs(sub.configs)}
    name = "draft_qwen3_0.6b_n8"
    assert mine[name] == as_t[name] != as_boot[name]
    assert mine[name].blocks == 4 and mine["no_draft"].blocks == 5
    assert mine[name].speedup_tps == pytest.approx(2.0, rel=0.1)
    assert mine[name].speedup_wall_ci_low is not None
    with pytest.raises(ValueError, match="unknown interval"):
        summarize_configs(sub.configs, interval="median")


def test_the_t_interval_needs_more_than_one_block_per_config() -> None:
    data = get_protocol("lmstudio-draft").model_dump(mode="json")
    data.update(order="blocked", block_trials=None, warmup_each_block=False)
    import json

    with pytest.raises(ProtocolError, match="interval block_t needs two blocks"):
        load_protocol_bytes(json.dumps(data).encode())


def test_the_page_words_name_the_method_the_numbers_came_from() -> None:
    from specschema.conclusion import interval_method_words

    assert "Student t interval over the blocks" in interval_method_words("block_t", True)
    assert "geometric mean" in interval_method_words("block_t", True)
    assert "two-stage bootstrap" in interval_method_words("block_bootstrap", True)
    for interval in ("block_t", "block_bootstrap"):  # no blocks: the trials' bootstrap
        assert "over trials" in interval_method_words(interval, False)


def test_a_result_of_the_first_bracketed_design_keeps_its_bootstrap_numbers() -> None:
    v2 = next(p for p in all_protocols() if (p.id, p.version) == ("llamacpp-draft", 2))
    sub = example_submission(v2, seed=5, engine_version="b1", schema_version=2,
                             runtime="ggml", counters_seen=True, created_at=CREATED,
                             draft_speedups={"draft_qwen3_0.6b_n8": 2.0}, blocks=True)
    base = next(c for c in sub.configs if c.role == "baseline")
    draft = next(c for c in sub.configs if c.name == "draft_qwen3_0.6b_n8")
    from specschema.blocks import decode_rates, trial_blocks

    direct = blocked_ratio(trial_blocks(draft.trials, decode_rates(draft.trials)),
                           trial_blocks(base.trials, decode_rates(base.trials)))
    mine = next(s for s in summarize(sub) if s.name == draft.name)
    assert (mine.speedup_tps, mine.speedup_tps_ci_low, mine.speedup_tps_ci_high) == (
        direct.ratio, direct.ci_low, direct.ci_high)
    assert mine.blocks == 2
