"""The block bootstrap computed column by column is bit-identical to its definition (the
loop over resamples), which keeps every stored result's interval as it was."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specschema import block_bootstrap as stats
from specschema.block_ratios import Block, block_ratios
from tests.support.tiers import examples

rates = st.sampled_from([5.0, 7.5, 10.0, 10.0, 12.25, 20.0]) | st.floats(1.0, 500.0)


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[Block], list[Block]]:
    den_count = draw(st.integers(1, 5))
    num_count = draw(st.integers(1, 4))
    positions = sorted(draw(st.lists(st.floats(0.0, 60.0), min_size=den_count + num_count,
                                     max_size=den_count + num_count, unique=True)))
    roles = draw(st.permutations([True] * den_count + [False] * num_count))
    den, num = [], []
    for centre, is_den in zip(positions, roles, strict=True):
        values = tuple(draw(st.lists(rates, min_size=1, max_size=4)))
        (den if is_den else num).append(Block(centre, values))
    return num, den


def _both(num: list[Block], den: list[Block], resamples: int) -> tuple[object, object]:
    found = block_ratios(num, den)
    plan = (tuple(len(b.values) for b in found.den), tuple(len(b.values) for b in found.num),
            resamples, stats.BOOTSTRAP_SEED)
    den_values = [b.values for b in found.den]
    num_values = [b.values for b in found.num]
    return (stats._blocked_estimates_fast(den_values, num_values, found.where, plan),
            stats._blocked_estimates_direct(den_values, num_values, found.where, plan))


@settings(max_examples=examples(60), deadline=None)
@given(runs())
def test_the_fast_estimates_equal_the_loops_bit_for_bit(run: tuple[list[Block], list[Block]]
                                                       ) -> None:
    fast, direct = _both(*run, resamples=300)
    assert fast == direct


def test_the_shipped_shape_with_its_2000_resamples() -> None:
    # v2's shape: 3 baseline blocks and 2 draft blocks of 3 trials, with ties
    den = [Block(1.0, (10.0, 11.0, 10.0)), Block(10.0, (8.0, 8.5, 7.9)),
           Block(19.0, (6.0, 6.2, 6.1))]
    num = [Block(4.0, (19.0, 18.0, 20.5)), Block(15.0, (13.0, 13.0, 12.2))]
    fast, direct = _both(num, den, resamples=2000)
    assert fast is not None and fast == direct


def test_a_zero_reference_is_left_to_the_loop() -> None:
    # the block's median is 5, but a resample that draws the 0 twice has a median of 0
    den = [Block(1.0, (0.0, 5.0, 9.0)), Block(10.0, (8.0, 8.5, 7.9))]
    num = [Block(0.5, (19.0, 18.0, 20.5))]
    fast, direct = _both(num, den, resamples=300)
    assert fast is None and direct  # the loop skips the resamples whose reference is 0
    assert len(direct) < 300  # type: ignore[arg-type]
    assert stats.blocked_ratio(num, den).ci_low is not None
