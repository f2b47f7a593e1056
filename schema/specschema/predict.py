"""A speedup predicted from what travels between machines and what does not (pure).

Acceptance is a property of the pair, the drafting settings and the kind of work: per draft
position i, a_i is the share of the rounds that reached position i whose draft token i was
accepted too (``specschema.breakdown.Acceptance.per_position``). The cost of checking
several tokens at once is the machine's: T_t(k), the target's time for one forward pass
over k new tokens (a "cost curve", measured by ``specsubmit probe``). With T_d the drafter's
time per drafted token (a draft model pays one pass more: below) and o a fixed cost per
round, one round of depth g yields

    E[N](g) = 1 + sum over k = 1..g of a_1 * ... * a_k     tokens, and costs
    g * T_d + T_t(g + 1) + o,

so the decode speedup over plain decoding (one token per T_t(1)) is

    S(g) = T_t(1) * E[N](g) / (g * T_d + T_t(g + 1) + o).

Plain steps. Not every step drafts: an n-gram lookup that finds no match in the text so far
drafts nothing, and the engine takes one plain step (one token, T_t(1)). llama-server
counts every token it returns (``eval_count``, its n_decoded), the first included, which
comes out of the prompt's prefill before the decode clock starts; a round returns its
accepted tokens plus the target's own, a plain step one. So over one request

    eval_count = 1 + accepted + rounds + plain,    plain = eval_count - 1 - accepted - rounds

and the decode time is rounds * (g T_d + T_t(g + 1) + o) + plain * T_t(1), for the
eval_count - 1 = rounds * E[N](g) + plain tokens plain decoding spends T_t(1) each on:

    S(g) = T_t(1) (rounds E[N](g) + plain) / (rounds (g T_d + T_t(g + 1) + o) + plain T_t(1))
         = T_t(1) (E[N](g) + p) / (g T_d + T_t(g + 1) + o + p T_t(1)),   p = plain / rounds.

What travels with the text is not p but the plain steps' share of the decoded tokens,
f = plain / (eval_count - 1): a lookup fails at about the same places in the text whatever
the depth, while a deeper round covers more tokens, so p grows with depth (measured on the
bench's six kinds of work: f the same within one or two steps at depths 3, 5 and 8, p
twice or more at 8 what it is at 3). From tokens = rounds E[N] + plain and plain = f tokens,

    p(g) = f E[N](g) / (1 - f)                                  (``plain_steps_per_round``),

which is exact at the depth f was measured at.

A draft model runs once more than it drafts. llama-server (the pinned build's
``server-context.cpp``, "always re-evaluate for simplicity") passes every batch the target
decodes through the draft as well, so that the draft's context follows the text: a round's
checked batch of g + 1 tokens (whose drafted tokens the draft had just dropped from its
own cache), and each plain step's token. A round of a draft model is then g passes that
draft (the first over the target's last token, then one over each drafted token but the
last) and one over the checked batch, which computes one output, as a step does (its g
extra tokens through the draft's layers are left out: a lower bound); a plain step costs
T_t(1) + T_d. With T_d one pass of the draft,

    S(g) = T_t(1) (E[N](g) + p) / ((g + 1) T_d + T_t(g + 1) + o + p (T_t(1) + T_d))

(``predicted_speedup`` with ``draft_s_per_token``; the n-gram lookup drafts with no model,
T_d = 0). A pass costs more than the draft model's plain step (its own sampling over the
whole vocabulary, ...): ``drafting_factor`` reads that cost, in the draft's steps, off a
run whose speedup was measured on a machine whose costs are known, by solving S for T_d
(``implied_draft_seconds``).

Short drafts. A round checks what it drafted, not always its depth: an n-gram lookup
copies the text that followed an earlier match, and drafts fewer where that text runs out
(on the advisor bench, prompt lookup at depth 8 drafted 7.3 tokens a round, at 5 4.9, at 3
3.0). The round then checks d + 1 tokens, d its drafted count, and a draft model makes d
passes. From what rounds drafted at the run's depth D on average, d_D, the count at a
depth g is taken as min(g, d_D) below D (a round at g drafts at most g and at most what it
drafted at D) and g - (D - d_D) above it (``drafted_at``); acceptance per position already
counts an undrafted position as not accepted. Priced at 9 tokens where the runs checked
8.3, the depth-8 round read 7-10 % dear on three of the bench's four stand-in machines.

The textbook formula (Leviathan, Kalman and Matias 2023) is the special case of one
acceptance alpha at every position and a check of g + 1 tokens that costs one step:
S = (1 - alpha^(g+1)) / ((1 - alpha) (g c + 1)), c = T_d / T_t(1). On CPUs and llama.cpp's
Metal backend checking g + 1 tokens costs several steps, which is why it overestimates there.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["CostCurve", "draft_passes", "drafted_at", "drafting_factor", "expected_tokens",
           "implied_draft_seconds", "plain_counts", "plain_steps_per_round",
           "predicted_speedup", "textbook_speedup"]


@dataclass(frozen=True)
class CostCurve:
    """The target's seconds per forward pass over k new tokens (k >= 1), and the fixed
    seconds per draft round besides (sampling, bookkeeping).

    Not monotone in k, and taken as measured (likely the CPU's matrix kernels, which take a
    batch in tiles of a few columns, an odd batch leaving a narrow remainder; not traced to
    the kernel). On the advisor bench's two quieter stand-ins a round checking 3 tokens
    cost 3-34 % more than one checking 4 in all five probes (three runs), one of 5 up to
    15 % more than one of 6 in three (equal within 2 % in the others); a prefill, which
    computes the output of its last token only, shows no such step. On llama.cpp's Metal
    backend (an M3 Max) a batch of 2 took as long as one of 8, 77-78 ms. Pooling a size
    with a dearer neighbour, as a non-decreasing fit did, read the round at depth 3 (4
    tokens) up to 17 % dear."""

    seconds: Mapping[int, float]
    overhead_s: float = 0.0

    def _sizes(self) -> tuple[int, ...]:
        found: tuple[int, ...] | None = self.__dict__.get("_sorted")
        if found is None:
            found = tuple(sorted(self.seconds))
            object.__setattr__(self, "_sorted", found)  # a frozen curve: sorted once
        return found

    def at(self, tokens: float) -> float:
        """T_t(tokens), interpolated linearly between measured sizes and extended by the
        last two beyond them (a batch grows in cost roughly linearly once it is
        compute-bound), never downwards. An unmeasured size between two of another tile
        parity reads what its neighbours cost, not what it costs: the probe measures the
        sizes the advisor predicts at."""
        if tokens == int(tokens) and int(tokens) in self.seconds:
            return self.seconds[int(tokens)]
        sizes = self._sizes()
        if not sizes:
            raise ValueError("a cost curve without measurements")
        if tokens < sizes[0]:
            return self.seconds[sizes[0]]
        # the first measured size above, and the one before it (a fractional size, a
        # round's mean drafted count, is asked many times a forecast)
        above = bisect.bisect_right(sizes, tokens)
        lower = sizes[above - 1]
        upper = sizes[above] if above < len(sizes) else None
        if upper is None:
            if len(sizes) < 2:
                return self.seconds[lower]
            a, b = sizes[-2], sizes[-1]
            # never falling past the largest measured size: a cheaper last size is the
            # kernel's tile, not a trend
            slope = max((self.seconds[b] - self.seconds[a]) / (b - a), 0.0)
            return self.seconds[b] + slope * (tokens - b)
        weight = (tokens - lower) / (upper - lower)
        return self.seconds[lower] * (1 - weight) + self.seconds[upper] * weight


def expected_tokens(per_position: Sequence[float], depth: int) -> float:
    """E[N](depth): tokens one round yields, the target's own included. Positions beyond
    the measured ones are taken as never accepted (what was not seen is not credited)."""
    if depth < 0:
        raise ValueError("a negative depth")
    total, reached = 1.0, 1.0
    for a in per_position[:depth]:
        reached *= min(max(a, 0.0), 1.0)
        total += reached
    return total


def plain_counts(eval_count: int, accepted: int, rounds: int, requests: int = 1
                ) -> tuple[int, int]:
    """(plain steps, decoded tokens) of ``requests`` requests' summed counters: the steps
    that drafted nothing and the tokens after each request's first (module docstring).
    A count below zero (a round cut short by the token limit) is taken as none."""
    decoded = eval_count - requests
    return max(decoded - accepted - rounds, 0), max(decoded, 0)


def plain_steps_per_round(share: float, per_position: Sequence[float], depth: int) -> float:
    """p(depth) = f E[N](depth) / (1 - f): the plain steps per round at ``depth`` when
    ``share`` (f) of the decoded tokens came from plain steps (module docstring)."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"a share of plain steps outside [0, 1): {share}")
    return share * expected_tokens(per_position, depth) / (1.0 - share)


def draft_passes(depth: float, plain_steps_per_round: float = 0.0) -> float:
    """A draft model's passes per round: ``depth`` that draft, one over the checked batch,
    and one per plain step (module docstring: the engine runs every target batch through
    the draft too)."""
    return depth + 1 + plain_steps_per_round


def drafted_at(depth: int, run_depth: int, drafted_per_round: float) -> float:
    """The tokens a round drafts on average at ``depth``, from what rounds drafted at
    ``run_depth`` (module docstring, "Short drafts"): at most ``depth`` and at most what
    the deeper runs drafted; above the run's depth, its shortfall carried."""
    if depth < 1 or run_depth < 1 or drafted_per_round < 0:
        raise ValueError("a depth below 1 or a negative count")
    drafted = min(drafted_per_round, run_depth)
    if depth >= run_depth:
        return depth - (run_depth - drafted)
    return min(float(depth), drafted)


def predicted_speedup(per_position: Sequence[float], depth: int, cost: CostCurve,
                      draft_s_per_token: float = 0.0,
                      plain_steps_per_round: float = 0.0,
                      drafted: float | None = None) -> float:
    """S(depth) of the module docstring. ``draft_s_per_token`` (T_d) is 0 for drafters
    that cost next to nothing (n-gram lookup) and one pass of the draft model otherwise,
    paid ``draft_passes`` times a round. ``plain_steps_per_round``: the steps between
    rounds that drafted nothing (a lookup that found no match), per round; each yields one
    token at one plain step's cost: S = T_t(1) (E[N] + p) / (round + p T_t(1)).
    ``drafted``: the tokens a round drafts on average (``drafted_at``; None: ``depth``
    every round), which set the checked batch and the draft's passes."""
    if depth < 1:
        raise ValueError("speculation drafts at least one token per round")
    if plain_steps_per_round < 0:
        raise ValueError("a negative number of plain steps")
    size = depth if drafted is None else min(max(drafted, 0.0), depth)
    step = cost.at(1)
    drafting = draft_passes(size, plain_steps_per_round) * draft_s_per_token
    tokens = expected_tokens(per_position, depth) + plain_steps_per_round
    return step * tokens / (drafting + cost.at(size + 1) + cost.overhead_s
                            + plain_steps_per_round * step)


def implied_draft_seconds(measured: float, per_position: Sequence[float], depth: int,
                          cost: CostCurve, plain_steps_per_round: float = 0.0,
                          drafted: float | None = None) -> float:
    """The T_d at which ``predicted_speedup`` gives ``measured``: S solved for T_d,
    T_d = (T_t(1) (E[N] + p) / S - T_t(g + 1) - o - p T_t(1)) / (g + 1 + p). Below zero
    when the measured speedup is more than the model allows a drafter that costs
    nothing."""
    if depth < 1 or measured <= 0:
        raise ValueError("a depth below 1 or a speedup that is not positive")
    size = depth if drafted is None else min(max(drafted, 0.0), depth)
    step = cost.at(1)
    tokens = expected_tokens(per_position, depth) + plain_steps_per_round
    return (step * tokens / measured - cost.at(size + 1) - cost.overhead_s
            - plain_steps_per_round * step) / draft_passes(size, plain_steps_per_round)


def drafting_factor(measured: float, per_position: Sequence[float], depth: int,
                    cost: CostCurve, draft_step_s: float,
                    plain_steps_per_round: float = 0.0, drafted: float | None = None
                    ) -> float:
    """What a pass of the draft cost in a measured run, in the draft model's plain
    decoding steps (``draft_step_s``, its step as a target on that machine): the implied
    T_d over the step. A pass can cost more than the draft's plain step (the engine
    samples the draft's every token over the whole vocabulary: with the re-evaluation
    counted, 1.0-2.3 steps a pass on llama-server's draft-simple on the advisor bench,
    BENCHMARKS.md), never less than one step: a run measured faster than the model allows
    for one step says its speedup moved with the load, not that its drafter was cheaper
    than its own forward pass, so it counts as 1."""
    if draft_step_s <= 0:
        raise ValueError("a draft step that is not positive")
    implied = implied_draft_seconds(measured, per_position, depth, cost,
                                    plain_steps_per_round, drafted)
    return max(implied / draft_step_s, 1.0)


def textbook_speedup(alpha: float, depth: int, cost_ratio: float) -> float:
    """Leviathan et al.'s S for one acceptance ``alpha`` and ``cost_ratio`` c = T_d / T_t(1),
    checking depth + 1 tokens at the cost of one step."""
    if alpha >= 1.0:
        return (depth + 1) / (depth * cost_ratio + 1)
    return (1 - alpha ** (depth + 1)) / ((1 - alpha) * (depth * cost_ratio + 1))


def mean_acceptance(per_position: Sequence[float]) -> float:
    """One alpha from per-position acceptance, for the textbook formula: the one whose
    geometric rounds yield the same expected tokens at the measured depth."""
    depth = len(per_position)
    if depth == 0:
        return 0.0
    target = expected_tokens(per_position, depth)
    low, high = 0.0, 1.0
    for _ in range(60):  # bisection: E[N] grows with alpha
        mid = (low + high) / 2
        if sum(mid ** k for k in range(depth + 1)) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2 if math.isfinite(low) else 0.0
