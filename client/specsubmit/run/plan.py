"""A run's plan: how long it will take, how many bracketed rounds fit a budget, and what
it can show, in words. Pure (no clock, no I/O): the runner hands over what it measured,
the CLI the time.

**When.** A run of fewer rounds is the first part of the whole protocol's schedule
(``Protocol.for_run``): every trial has the same place and block in both. So the rounds may
be cut while the trials run so far are still in the shorter schedule; the runner asks at
two moments where that holds and no config has had its last block yet (whose end the
engine is told of):

1. before the first counted trial, with the first block's engine start (when each block
   starts its own) and warm-ups: the plan printed before any trial. Where the second
   moment follows (each block its own start), its rounds are an estimate only and the run
   keeps the protocol's for now (``Plan.final``): a cut made here could not be undone
   when the drafts turn out faster than guessed. A run whose fewest rounds would end
   well past the budget stops here, before any counted trial (``Plan.too_long``);
2. before the first block after every config has run one (in the bracketed order, the
   second baseline block: every config's last block is later in any number of rounds),
   with each finished block's time: drafts are timed at last, and the rounds are fixed:
   the most that fit, up to the protocol's.

**The estimate** (``estimate``), from the first block alone:

- a trial takes as long as the block's last warm-up, less its load time, with its decode
  stretched to the protocol's token limit when it stopped before it (a prompt set's other
  prompts may stop sooner: the estimate errs long);
- every block takes the first block's engine start and warm-ups again, when each block
  has its own (``per_block``); one engine shared by every config was warmed up once;
- a draft's block takes as long as a baseline block until one of its own was timed (a
  draft that pays is faster, one that costs, or a second model to load at each start,
  slower); then each block of a config takes as long per trial as its blocks so far, its
  start and warm-ups included. Configs refused before the run are left out; one refused
  at its start is counted until it is, so the estimate errs long;
- a config the protocol's early-stop rule would stop, were the first round over now
  (``Measured.stopping``: none of its drafted tokens accepted so far), runs no block after
  the first round (``specschema.earlystop``). Its second first-round block could still
  accept a token: then it runs on and the run ends later than estimated.

**What it can show** (``resolvable``): the smallest speedup that the run's interval can
tell from none, with K blocks per config: ``exp(t(K-1) * s / sqrt(K)) - 1``, Student's t
as the ``block_t`` interval uses it (``specschema.block_t.t_975``) and ``s`` an assumed
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

from specschema import Protocol, find_protocol
from specschema.block_t import t_975
from specsubmit.engines import Generation

__all__ = ["BUDGET_SLACK", "BUSY_SPREAD", "QUIET_SPREAD", "Estimate", "Measured", "Plan",
           "decide", "estimate", "plan_lines", "resolvable", "too_long_message",
           "trial_seconds"]

# Assumed block-to-block spread of log block ratios (the module docstring says where from).
QUIET_SPREAD = 0.02
BUSY_SPREAD = 0.15
# How far past its budget (a fraction of it) a run may be estimated to end before it stops
# before its first trial (``Plan.too_long``): the first estimate errs long, as a draft's
# blocks are taken as long as the baseline's.
BUDGET_SLACK = 0.2


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
    # The blocks finished so far: (config, seconds from its start to its end, trials).
    blocks: tuple[tuple[str, float, int], ...] = ()
    # Where the run is: the schedule position of the next trial, and whether its block
    # has started already (its start and warm-ups done: the first call).
    position: int = 0
    in_block: bool = True
    # The draft configs the early-stop rule would stop after the first round, by the
    # counters so far (``specschema.earlystop``).
    stopping: tuple[str, ...] = ()


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
    protocol_rounds: int | None  # the shipped protocol's (for the words)
    budget_s: float | None
    elapsed_s: float
    # The chosen rounds plus one, when the budget left it out: what it would have taken.
    longer: Estimate | None = None

    @property
    def final(self) -> bool:
        """Whether the run makes the chosen rounds now. Not on the first call of a run that
        times every config before its second baseline block (``per_block``): a draft's
        block is only guessed there, and rounds cut then could not be added back once
        the drafts turn out faster. Every number of rounds can still be made at the
        revision, so the rounds wait for it; the first plan shows its estimate."""
        return bool(self.measured.blocks) or not self.measured.per_block

    @property
    def rounds(self) -> int | None:
        """The rounds to run when they differ from the run's so far, else None."""
        if (not self.final or self.chosen.rounds is None
                or self.chosen.rounds == self.measured.protocol.rounds):
            return None
        return self.chosen.rounds

    @property
    def over_budget_s(self) -> float | None:
        """How far the chosen plan ends past the budget (None: within it, or no budget)."""
        if self.budget_s is None or self.chosen.remaining_s is None:
            return None
        over = self.elapsed_s + self.chosen.remaining_s - self.budget_s
        return over if over > 0 else None

    @property
    def too_long(self) -> bool:
        """Whether the run should stop before its first counted trial: even its fewest
        rounds are estimated to end more than ``BUDGET_SLACK`` of the budget past it.
        Said before anything was measured, a run the contributor has no time for costs
        one engine start and warm-up, not the minutes past what they gave it."""
        over = self.over_budget_s
        return (not self.measured.blocks and over is not None and self.budget_s is not None
                and over > BUDGET_SLACK * self.budget_s)


def trial_seconds(measured: Measured) -> float | None:
    """A trial's expected wall time, from the first block's last warm-up (None: none)."""
    if not measured.warmups:
        return None
    last = measured.warmups[-1]
    limit = measured.protocol.options.num_predict
    per_token = last.eval_duration_ns / 1e9 / last.eval_count if last.eval_count else 0.0
    return (max(last.wall_s - last.load_duration_ns / 1e9, 0.0)
            + max(limit - last.eval_count, 0) * per_token)


def _run_with(protocol: Protocol, rounds: int | None, stopping: tuple[str, ...] = ()
              ) -> Protocol:
    """The run in ``rounds`` rounds, without the later blocks of the configs ``stopping``
    (when a round follows the first for them to be left out of)."""
    parameters: dict[str, str] = {}
    if rounds is not None and rounds != protocol.rounds:
        parameters["rounds"] = str(rounds)
    if stopping and protocol.early_stop is not None and (rounds or 0) >= 2:
        parameters["stopped"] = ",".join(stopping)
    return protocol.for_run(parameters) if parameters else protocol


def estimate(measured: Measured, rounds: int | None) -> Estimate:
    """The run in ``rounds`` rounds (the module docstring says how it is estimated)."""
    run = _run_with(measured.protocol, rounds, measured.stopping)
    names = [name for name, _ in run.schedule()]
    sizes = [sum(1 for _ in block) for name, block in groupby(names)
             if name not in measured.refused]
    ahead = [(name, sum(1 for _ in block)) for name, block in
             groupby(names[measured.position:]) if name not in measured.refused]
    costs = [_block_cost(measured, name, size, under_way=i == 0 and measured.in_block)
             for i, (name, size) in enumerate(ahead)]
    remaining = None if None in costs else sum(c or 0.0 for c in costs)
    per_block = measured.per_block
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


def _block_cost(measured: Measured, name: str, size: int, *, under_way: bool) -> float | None:
    """Seconds a block of ``size`` trials of ``name`` takes (module docstring); None:
    nothing to tell from."""
    timed = [(seconds, trials) for config, seconds, trials in measured.blocks
             if config == name and trials]
    if timed and not under_way:
        return sum(s for s, _ in timed) / sum(n for _, n in timed) * size
    trial = trial_seconds(measured)
    if trial is None:
        return None
    if under_way or not measured.per_block:
        return size * trial
    return (measured.start_s or 0.0) + sum(g.wall_s for g in measured.warmups) + size * trial


def decide(measured: Measured, *, budget_s: float | None, elapsed_s: float) -> Plan:
    """The most rounds (the run's so far at most, and as few as it can still make) whose
    estimated end is within ``budget_s`` of the run's start (``elapsed_s`` ago); the
    run's own without a budget or an estimate, and the fewest when none fits."""
    current = measured.protocol.rounds
    whole = estimate(measured, current)
    shipped = _shipped_rounds(measured.protocol)
    if budget_s is None or current is None or whole.remaining_s is None:
        return Plan(measured, whole, shipped, budget_s, elapsed_s)
    candidates = [whole, *(estimate(measured, rounds) for rounds in range(current - 1, 0, -1)
                           if _can_make(measured, rounds))]
    fits = [c for c in candidates if (c.remaining_s or 0.0) <= budget_s - elapsed_s]
    if not fits:  # the fewest rounds, and the plan says how far past the budget
        return Plan(measured, candidates[-1], shipped, budget_s, elapsed_s)
    chosen = fits[0]
    longer = candidates[candidates.index(chosen) - 1] if chosen is not whole else None
    return Plan(measured, chosen, shipped, budget_s, elapsed_s, longer)


def _can_make(measured: Measured, rounds: int) -> bool:
    """Whether the run can still make ``rounds``: every config's last block is ahead."""
    schedule = _run_with(measured.protocol, rounds, measured.stopping).schedule()
    last = {name: position for position, (name, _) in enumerate(schedule)}
    return min(last.values()) >= measured.position


def _shipped_rounds(protocol: Protocol) -> int | None:
    shipped = find_protocol(protocol.id, protocol.version, protocol.sha256)
    return (shipped or protocol).rounds


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
    """The plan in words, one line each: what runs, how long, what it can show; revised
    (the second call: blocks were timed), what changed. ``now``: the wall clock (local
    time) the end is counted from."""
    measured, chosen = plan.measured, plan.chosen
    protocol = measured.protocol
    revised = bool(measured.blocks)
    lines = [_head(plan, now)]
    if not revised:
        running = [c.name + " (baseline)" * (c.role == "baseline") for c in protocol.configs
                   if c.name not in measured.refused]
        refused = sorted(measured.refused & {c.name for c in protocol.configs})
        lines.append("  configs: " + ", ".join(running)
                     + (f"; not run: {', '.join(refused)} (incompatible)" if refused else ""))
    if not revised or plan.rounds is not None:
        starts = f", {chosen.starts} engine starts" if chosen.starts else ""
        size = f" of {chosen.block_trials} trials" if chosen.block_trials else ""
        lines.append(f"  {chosen.blocks} blocks{size}: {chosen.trials} trials{starts}, "
                     f"{chosen.warmups} warm-ups")
    trial = trial_seconds(measured)
    if revised:
        took: dict[str, list[float]] = {}
        for name, seconds, _ in measured.blocks:
            took.setdefault(name, []).append(seconds)
        lines.append("  a block took: " + ", ".join(
            f"{name} {sum(times) / len(times):.0f} s" for name, times in took.items())
            + " (its start, warm-up and trials)")
    elif trial is not None:
        parts = []
        if measured.start_s is not None:
            parts.append(f"an engine start {measured.start_s:.1f} s")
        parts.append(f"a warm-up {measured.warmups[-1].wall_s:.1f} s")
        parts.append(f"a trial about {trial:.1f} s")
        lines.append("  measured: " + ", ".join(parts))
    if chosen.remaining_s is None:
        lines.append("  estimated end: unknown (no warm-up was timed)")
    else:
        ends = now + timedelta(seconds=chosen.remaining_s)
        budget = ""
        if plan.budget_s is not None:
            budget = f"; budget {_minutes(plan.budget_s)}, {_minutes(plan.elapsed_s)} used"
            over = plan.over_budget_s
            if over is not None:
                budget += (f"; about {_minutes(over)} past the budget: it cannot make fewer "
                           "rounds, --configs runs fewer configs")
        untimed = "" if revised or not measured.per_block or not any(
            c.role == "draft" and c.name not in measured.refused for c in protocol.configs) \
            else " (a draft's blocks taken as long as the baseline's until timed)"
        lines.append(f"  estimated end: {ends:%H:%M}, in {_minutes(chosen.remaining_s)}"
                     f"{untimed}{budget}")
    if measured.stopping and (chosen.rounds or 0) >= 2:
        lines.append("  stop after the first round by the protocol's rule, none of their "
                     "drafted tokens accepted so far: " + ", ".join(measured.stopping))
    if not plan.final and chosen.rounds is not None:
        lines.append("  rounds: fixed once every config has run a block (a draft's speed is "
                     "not known before); until then the run keeps the protocol's")
    if revised and plan.rounds is None:
        return lines
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


def _head(plan: Plan, now: datetime) -> str:
    chosen, protocol = plan.chosen, plan.measured.protocol
    head = (f"plan revised, every config timed once: {protocol.id} v{protocol.version}"
            if plan.measured.blocks else f"plan: {protocol.id} v{protocol.version}")
    if chosen.rounds is None:
        return f"{head}, as the protocol runs it (no rounds to fit to a budget)"
    rounds = f"{chosen.rounds} round{'s' * (chosen.rounds != 1)}"
    if chosen.rounds == plan.protocol_rounds:
        return f"{head}, {rounds} as the protocol asks"
    head = f"{head}, {rounds} of the protocol's {plan.protocol_rounds}"
    if plan.longer is not None and plan.longer.remaining_s is not None:
        ends = now + timedelta(seconds=plan.longer.remaining_s)
        head += f" ({plan.longer.rounds} would end about {ends:%H:%M}, past the budget)"
    return head


def too_long_message(plan: Plan) -> str:
    """Why a run stops before its first trial (``Plan.too_long``), and what would fit."""
    chosen, budget = plan.chosen, plan.budget_s or 0.0
    needed = plan.elapsed_s + (chosen.remaining_s or 0.0)
    fewest = "" if chosen.rounds is None else \
        f" even {chosen.rounds} round{'s' * (chosen.rounds != 1)}"
    return (f"the budget of {_minutes(budget)} cannot fit this run:{fewest} would take about "
            f"{_minutes(needed)} by the first block's timing; stopped before the first trial, "
            f"nothing was measured. Give --budget {math.ceil(needed / 60)}, or fewer configs "
            "with --configs")
