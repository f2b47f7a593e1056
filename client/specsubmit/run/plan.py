"""A run's plan: how long it will take, how many bracketed rounds fit a budget, and what
it can show, in words. Pure (no clock, no I/O): the runner hands over what it measured,
the CLI the time.

**When.** The runner measures the first block before its first counted trial (the
engine's start, when each block starts its own, and the block's warm-ups) and calls the
planner once with that (``Measured``); the planner may answer with fewer rounds. So the
rounds are settled before any trial the server checks against the schedule they make. A
run of fewer rounds is the first part of the whole protocol's schedule
(``Protocol.for_run``), so the block already under way is the same block either way.

**The estimate** (``estimate``), from the first block alone:

- a trial takes as long as the block's last warm-up, less its load time, with its decode
  stretched to the protocol's token limit when it stopped before it (a prompt set's other
  prompts may stop sooner: the estimate errs long);
- every block takes the first block's engine start and warm-ups again, when each block
  has its own (``per_block``); one engine shared by every config was warmed up once;
- a draft's block takes as long as a baseline block: a draft that pays is faster, one
  that costs (or a second model to load at each start) slower. Configs refused before the
  run are left out; one refused at its start is counted, so the estimate errs long.

**What it can show** (``resolvable``): the smallest speedup that the run's interval can
tell from none, with K blocks per config: ``exp(t(K-1) * s / sqrt(K)) - 1``, Student's t
as the ``block_t`` interval uses it (``specschema.stats.t_975``) and ``s`` an assumed
spread of the block ratios' logarithms from block to block. Measured on this project's
2-core machine (BENCHMARKS.md, "Interval calibration": 4 blocks per draft, llama-server):
0.005-0.026 with a switching load on an otherwise quiet machine, 0.035-0.47 (median 0.15)
with other work starting and stopping beside it. The plan gives both: ``QUIET_SPREAD``
and ``BUSY_SPREAD``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby

from specschema import Protocol
from specschema.stats import t_975
from specsubmit.engines import Generation

__all__ = ["BUSY_SPREAD", "QUIET_SPREAD", "Estimate", "Measured", "Plan", "decide",
           "estimate", "plan_lines", "resolvable", "trial_seconds"]

# Assumed block-to-block spread of log block ratios (the module docstring says where from).
QUIET_SPREAD = 0.02
BUSY_SPREAD = 0.15


@dataclass(frozen=True)
class Measured:
    """What the runner measured of the first block before its first counted trial."""

    protocol: Protocol  # as the run makes it so far (``Protocol.for_run``)
    refused: frozenset[str]  # configs that will not run (incompatible before the run)
    # The first block's engine start in seconds; None: no start per block.
    start_s: float | None
    # The first block's warm-ups (with one engine for every config: every config's).
    warmups: tuple[Generation, ...]
    # Each block gets its own warm-ups (and start): the runner's per-block order.
    per_block: bool


@dataclass(frozen=True)
class Estimate:
    """The run with ``rounds`` rounds (None: the protocol has none), from now on."""

    rounds: int | None
    blocks: int  # the blocks that run, the one under way included
    block_trials: int | None  # trials per block (None: blocks of several sizes)
    trials: int
    starts: int  # engine starts (0: one engine, already running)
    warmups: int
    blocks_per_config: int | None  # a draft's blocks, where the interval is over blocks
    remaining_s: float | None  # None: nothing was measured (no warm-up)


@dataclass(frozen=True)
class Plan:
    """What the planner decided, and why."""

    measured: Measured
    chosen: Estimate
    protocol_rounds: int | None
    budget_s: float | None
    elapsed_s: float
    # The chosen rounds plus one, when the budget left it out: what it would have taken.
    longer: Estimate | None = None

    @property
    def rounds(self) -> int | None:
        """The rounds to run when they differ from the protocol's, else None."""
        if self.chosen.rounds is None or self.chosen.rounds == self.protocol_rounds:
            return None
        return self.chosen.rounds

    @property
    def over_budget_s(self) -> float | None:
        """How far the chosen plan ends past the budget (None: within it, or no budget)."""
        if self.budget_s is None or self.chosen.remaining_s is None:
            return None
        over = self.elapsed_s + self.chosen.remaining_s - self.budget_s
        return over if over > 0 else None


def trial_seconds(measured: Measured) -> float | None:
    """A trial's expected wall time, from the first block's last warm-up (None: none)."""
    if not measured.warmups:
        return None
    last = measured.warmups[-1]
    limit = measured.protocol.options.num_predict
    per_token = last.eval_duration_ns / 1e9 / last.eval_count if last.eval_count else 0.0
    return (max(last.wall_s - last.load_duration_ns / 1e9, 0.0)
            + max(limit - last.eval_count, 0) * per_token)


def _run_with(protocol: Protocol, rounds: int | None) -> Protocol:
    if rounds is None or rounds == protocol.rounds:
        return protocol
    return protocol.for_run({"rounds": str(rounds)})


def estimate(measured: Measured, rounds: int | None) -> Estimate:
    """The run in ``rounds`` rounds (the module docstring says how it is estimated)."""
    run = _run_with(measured.protocol, rounds)
    sizes = [sum(1 for _ in block) for name, block in
             groupby(name for name, _ in run.schedule()) if name not in measured.refused]
    trial = trial_seconds(measured)
    per_block = measured.per_block
    overhead = (measured.start_s or 0.0) + sum(g.wall_s for g in measured.warmups)
    remaining = None
    if trial is not None:
        remaining = sum(sizes) * trial + ((len(sizes) - 1) * overhead if per_block else 0.0)
    running = [c.name for c in run.configs if c.name not in measured.refused]
    warmups = run.warmups_per_config * (len(sizes) if per_block else len(running))
    draft = next((c.name for c in run.configs
                  if c.role == "draft" and c.name not in measured.refused), None)
    per_config = None
    if run.warmup_each_block and draft is not None:
        per_config = len({b for (name, _), b in zip(run.schedule(), run.blocks(), strict=True)
                          if name == draft})
    even = len(set(sizes)) == 1
    return Estimate(rounds=run.rounds, blocks=len(sizes), block_trials=sizes[0] if even else None,
                    trials=sum(sizes),
                    starts=len(sizes) if measured.start_s is not None else 0,
                    warmups=warmups, blocks_per_config=per_config, remaining_s=remaining)


def decide(measured: Measured, *, budget_s: float | None, elapsed_s: float) -> Plan:
    """The most rounds (1 to the protocol's) whose estimated end is within ``budget_s``
    of the run's start (``elapsed_s`` ago); the protocol's own without a budget or an
    estimate, and 1 when none fits."""
    most = measured.protocol.rounds
    whole = estimate(measured, most)
    if budget_s is None or most is None or whole.remaining_s is None:
        return Plan(measured, whole, most, budget_s, elapsed_s)
    candidates = [whole, *(estimate(measured, rounds) for rounds in range(most - 1, 0, -1))]
    fits = [c for c in candidates if (c.remaining_s or 0.0) <= budget_s - elapsed_s]
    if not fits:  # one round, the fewest, and the plan says how far past the budget
        return Plan(measured, candidates[-1], most, budget_s, elapsed_s)
    chosen = fits[0]
    longer = candidates[candidates.index(chosen) - 1] if chosen is not whole else None
    return Plan(measured, chosen, most, budget_s, elapsed_s, longer)


def resolvable(blocks_per_config: int | None, spread: float) -> float | None:
    """The smallest speedup (as a fraction: 0.1 is 10 %) the block interval tells from
    none with these blocks and this spread; None with fewer than two blocks."""
    if blocks_per_config is None or blocks_per_config < 2:
        return None
    k = blocks_per_config
    return math.exp(t_975(k - 1) * spread / math.sqrt(k)) - 1


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.0f} %" if fraction >= 0.1 else f"{fraction * 100:.1f} %"


def plan_lines(plan: Plan, now: datetime) -> list[str]:
    """The plan in words, one line each: what runs, how long, what it can show.
    ``now``: the wall clock (local time) the end is counted from."""
    measured, chosen = plan.measured, plan.chosen
    protocol = measured.protocol
    name = f"{protocol.id} v{protocol.version}"
    if chosen.rounds is None:
        head = f"plan: {name}, as the protocol runs it (no rounds to fit to a budget)"
    elif chosen.rounds == plan.protocol_rounds:
        head = f"plan: {name}, {chosen.rounds} round{'s' * (chosen.rounds != 1)} as the " \
               "protocol asks"
    else:
        head = (f"plan: {name}, {chosen.rounds} round{'s' * (chosen.rounds != 1)} of the "
                f"protocol's {plan.protocol_rounds}")
        if plan.longer is not None and plan.longer.remaining_s is not None:
            ends = now + timedelta(seconds=plan.longer.remaining_s)
            head += (f" ({plan.longer.rounds} would end about {ends:%H:%M}, past the "
                     "budget)")
    running = [c.name + " (baseline)" * (c.role == "baseline") for c in protocol.configs
               if c.name not in measured.refused]
    refused = sorted(measured.refused & {c.name for c in protocol.configs})
    lines = [head, "  configs: " + ", ".join(running)
             + (f"; not run: {', '.join(refused)} (incompatible)" if refused else "")]
    starts = f", {chosen.starts} engine starts" if chosen.starts else ""
    size = f" of {chosen.block_trials} trials" if chosen.block_trials else ""
    lines.append(f"  {chosen.blocks} blocks{size}: {chosen.trials} trials{starts}, "
                 f"{chosen.warmups} warm-ups")
    trial = trial_seconds(measured)
    if chosen.remaining_s is None or trial is None:
        lines.append("  estimated end: unknown (no warm-up was timed)")
    else:
        took = []
        if measured.start_s is not None:
            took.append(f"an engine start {measured.start_s:.1f} s")
        if measured.warmups:
            took.append(f"a warm-up {measured.warmups[-1].wall_s:.1f} s")
        took.append(f"a trial about {trial:.1f} s")
        lines.append("  measured: " + ", ".join(took))
        ends = now + timedelta(seconds=chosen.remaining_s)
        budget = ""
        if plan.budget_s is not None:
            budget = f"; budget {_minutes(plan.budget_s)}, {_minutes(plan.elapsed_s)} used"
            over = plan.over_budget_s
            if over is not None:
                budget += (f"; about {_minutes(over)} past the budget: one round is the "
                           "fewest, --configs runs fewer configs")
        lines.append(f"  estimated end: {ends:%H:%M}, in {_minutes(chosen.remaining_s)}"
                     f"{budget}")
    quiet = resolvable(chosen.blocks_per_config, QUIET_SPREAD)
    busy = resolvable(chosen.blocks_per_config, BUSY_SPREAD)
    if quiet is None or busy is None:
        lines.append("  resolves: not estimated (the interval is not over blocks)")
    else:
        lines.append(f"  resolves: a speedup of {_percent(quiet)} or more on a quiet "
                     f"machine, {_percent(busy)} or more on a busy one ("
                     f"{chosen.blocks_per_config} blocks per config; Student's t, a spread "
                     f"of {QUIET_SPREAD} or {BUSY_SPREAD} in log speedup from block to block)")
    return lines
