"""The advisor's validation, from a run of bench/advise.py (its saved JSON): predictions of
held-out cells against their measurement, beside three baselines. Pure (the figures are
printed by ``advise_report``).

A cell is (machine, candidate, kind of work). Its measured speedup is the candidate's
decode rate (tokens / engine decode seconds, over the block's request for that prompt; the
median of its requests in a block that asked each prompt more than once: the block is the
unit, ``advise_measurements``) over the mean of the machine's three baseline blocks' for
the same prompt; a candidate ran in two blocks, so its rate is the mean of the two. With
``--board``, the board's estimate instead (``specschema.block_t``: each candidate block's
rate over the baseline interpolated at the block's place in the run, their geometric
mean): two reasonable readings of the same requests, whose difference says how much of the
error is the yardstick's. Three tasks, each hiding cells and predicting them from the rest:

- depths: prompt lookup at depth d on machine m and kind of work x, from the acceptance of
  the other depths on (m, x) (positions beyond them credit nothing, so a depth above every
  other reads low; the report prints the cells within the known depths' reach again on
  their own, "depths within reach": the product never predicts above a run's depth);
- shallower depths: the same from the deeper depths only, what the advisor does (it
  predicts each candidate at the depths up to the one its runs used, never above);
- machines: every cell of machine m, from the acceptance of the same candidate and kind of
  work on the other machines;
- kinds of work: every candidate on (m, x), from the acceptance of the same candidate on
  m's other kinds of work.

The model (``specschema.predict.predicted_speedup``): acceptance per position pooled over
the rounds of the known cells, the steps that drafted nothing per round (pooled the same
way; with ``--units``, where the known cells are one candidate's, their medians as the
product takes its contributor units', ``advise_units``), machine m's probe (one round
checking k tokens; a plain step; the product's
``forecast.cost_curve``: each size's median; a run that probed before its blocks too pools
both probes' samples per size), and for the draft model its plain step on m
as the cost of a drafted token, times what a drafted token cost in the known draft cells,
in their machines' draft steps (the median of ``predict.drafting_factor`` over them; 1
without any). With ``--batch-prefill`` (runs that probed the draft's prefill), the
draft's pass over each checked batch is priced at its prefill of that batch on m, the
drafting passes at T_d, in the drafting factors too: not the product's model (a variant
the 2026-12-07 16:49 run measured and did not adopt, BENCHMARKS.md). Its interval:
the 5th-95th percentile (``forecast.LEVEL``) of 400 resamplings (the probe's samples per
size, the draft's steps, the drafting factor as a machine none of the known ones would
read it, ``forecast.drafting_draw`` over one median per known machine, and each
position's acceptance drawn binomially from its rounds, or with ``--units`` a bootstrap
of the known cells), each times the noise of a measured speedup
(``predict_measured.measured_interval`` with the median of the known cells' own spreads,
``measured_spread`` of their two candidate and three baseline blocks, or where known
lookup cells can be held against their own machine's probe, what the model missed by
there, ``predict_measured.model_error``: each known lookup cell's log(measured /
predicted from its own counts and its machine's probe), Student's t with as many degrees
of freedom as there are misses): where the held-out cell's measurement is expected to
land, as the product's forecast says it (``crowd.residuals``, ``forecast.miss``; the
product uses the misses only from as many contributors as its minimum, 3 by default, the
bench from the two or three other machines it has, as it does their acceptance).

Baselines: the textbook formula (one alpha from the same acceptance, c = the draft's file
size over the target's, 0 for the lookup); the pair's median across machines (the
candidate's measured speedup on the same kind of work on the other machines); the
machine's median across pairs, read two ways: as the issue words it, machine m's measured
speedups of the other pairs (the other mechanism: a lookup cell against the draft model's
cells, on the kinds of work not hidden), and the stronger reading the bench used first,
m's other candidates (the same lookup's other depths too; none in the machines task, where
nothing of m is known).
Top-1 regret, per machine and kind of work in the machines task: the best measured (or 1.0,
leaving speculation off) over the measured speedup of what each method ranks first.
"""

from __future__ import annotations

import math
import random
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import advise_units
from advise_batch import batch_factor, draft_batch, per_pass
from advise_measurements import block_rates, curve, probe_samples
from specschema.block_t import blocked_ratio_t
from specschema.forecast import LEVEL, drafting_draw
from specschema.predict import (
    drafted_at,
    drafting_factor,
    mean_acceptance,
    plain_counts,
    plain_steps_per_round,
    predicted_speedup,
    textbook_speedup,
)
from specschema.predict_measured import (
    log_variance,
    measured_interval,
    measured_spread,
    model_error,
    new_machine_spread,
)
from specschema.stats import median

Cell = tuple[str, str, str]  # machine, candidate, kind of work
RESAMPLES = 400


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return tuple(x + y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class Counts:
    """Rounds and, per draft position k, the rounds accepted through k (``accepted``) out
    of those that reached it (``reached``: through k - 1), summed over runs that could
    draft position k at all: a run at depth 3 says nothing about position 4, so pooling it
    with a deeper one leaves it out of position 4's denominator (a plain sum of the counts
    would read a deeper position's acceptance low)."""

    rounds: int
    accepted: tuple[int, ...]
    reached: tuple[int, ...]
    plain_steps: int
    decoded: int  # tokens after each request's first (which the prefill makes)
    drafted: int = 0  # tokens the rounds drafted (meant per cell: pooled across depths, a sum)

    @classmethod
    def of(cls, rounds: int, per_position: Sequence[int], plain: int, decoded: int,
           drafted: int = 0) -> Counts:
        counts = tuple(per_position)
        return cls(rounds, counts, (rounds, *counts[:-1]), plain, decoded, drafted)

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.rounds + other.rounds, _padded(self.accepted, other.accepted),
                      _padded(self.reached, other.reached),
                      self.plain_steps + other.plain_steps, self.decoded + other.decoded,
                      self.drafted + other.drafted)

    @property
    def depth(self) -> int:
        return len(self.accepted)

    def profile(self) -> list[float]:
        return [c / r if r else 0.0 for c, r in zip(self.accepted, self.reached, strict=True)]


def depth_of(candidate: str) -> int:
    return int(re.sub(r"\D", "", candidate))


def mechanism(candidate: str) -> str:
    """What drafts, without its depth: ``ngram`` (the lookup) or ``draft`` (the model)."""
    return re.sub(r"\d", "", candidate)


@dataclass
class Run:
    measured: dict[Cell, float]
    counts: dict[Cell, Counts]
    probes: dict[str, dict[int, list[float]]]  # machine -> k -> seconds (k = 1: steps)
    prefill: dict[str, dict[int, list[float]]]
    draft_steps: dict[str, list[float]]
    # machine -> k -> seconds of the draft's prefill of k tokens (runs that probed it)
    draft_prefill: dict[str, dict[int, list[float]]]
    size_ratio: float
    implied_round: dict[tuple[str, str], float]  # (machine, candidate) -> seconds per round
    base_step: dict[str, float]  # machine -> the baseline blocks' seconds per token
    spread: dict[Cell, float]  # the log-sd of the cell's measured speedup, from its blocks

    @property
    def machines(self) -> list[str]:
        return sorted({m for m, _, _ in self.measured})

    @property
    def candidates(self) -> list[str]:
        return sorted({c for _, c, _ in self.measured}, key=lambda c: (c[0], depth_of(c)))

    @property
    def domains(self) -> list[str]:
        return sorted({x for _, _, x in self.measured})


def load(data: Mapping[str, Any], board: bool = False) -> Run:
    """The saved run's cells. A cell's measured speedup is the candidate's mean rate over
    the baseline's (as in every analysis so far), or with ``board`` the board's
    (``block_t``: each candidate block's rate over the baseline interpolated at its place
    in the run, their geometric mean)."""
    measured: dict[Cell, float] = {}
    spread: dict[Cell, float] = {}
    counts: dict[Cell, Counts] = {}
    probes, prefill, draft_steps, implied, steps = {}, {}, {}, {}, {}
    draft_prefill: dict[str, dict[int, list[float]]] = {}
    for machine, found in data["machines"].items():
        placed = block_rates(found)
        rates = {key: [median(b.values) for b in blocks] for key, blocks in placed.items()}
        sums: dict[tuple[str, str], Counts] = {}
        spent: dict[str, list[float]] = {}
        for block in found["blocks"]:
            for row in block["rows"]:
                key = (block["config"], row["domain"])
                if block["config"] != "baseline" and row["rounds"]:
                    plain, decoded = plain_counts(row["tokens"], row["accepted"],
                                                  row["rounds"])
                    add = Counts.of(row["rounds"], row["per_position"], plain, decoded,
                                    row["drafted"])
                    sums[key] = sums[key] + add if key in sums else add
                    spent.setdefault(block["config"], []).append(row["seconds"])
        for (config, domain), values in rates.items():
            if config == "baseline":
                continue
            base_rates = rates[("baseline", domain)]
            measured[(machine, config, domain)] = (
                blocked_ratio_t(placed[(config, domain)], placed[("baseline", domain)]).ratio
                if board else statistics.fmean(values) / statistics.fmean(base_rates))
            spread[(machine, config, domain)] = measured_spread(
                log_variance(values), len(values), log_variance(base_rates), len(base_rates))
            if (config, domain) in sums:
                counts[(machine, config, domain)] = sums[(config, domain)]
        probe = found["probe"]
        probes[machine] = probe_samples(found)
        # the v1 curve's own decoding step ran on the probe's server, which speculates: the
        # plain steps of the rounds probe on that start stand in for it
        prefill[machine] = ({int(k): v for k, v in probe["prefill"].items()}
                            | {1: probe["steps"]})
        draft_steps[machine] = found["draft_steps"]
        if "draft_probe" in found:
            draft_prefill[machine] = {int(k): v for k, v in
                                      found["draft_probe"]["prefill"].items()}
        # what a round cost in the runs: decode seconds less the plain steps (at the
        # baseline's seconds per token), per round; pooled over the kinds of work
        base_step = sum(r["seconds"] for b in found["blocks"] if b["config"] == "baseline"
                        for r in b["rows"]) / sum(r["tokens"] for b in found["blocks"]
                                                  if b["config"] == "baseline"
                                                  for r in b["rows"])
        steps[machine] = base_step
        for config in {b["config"] for b in found["blocks"]} - {"baseline"}:
            total = [c for (m, cand, _), c in counts.items() if m == machine and cand == config]
            if total:
                pooled = sum(total[1:], total[0])
                seconds = sum(spent[config])
                implied[(machine, config)] = ((seconds - pooled.plain_steps * base_step)
                                              / pooled.rounds)
    ratio = (data["draft_bytes"] or 0) / data["target_bytes"]
    return Run(measured, counts, probes, prefill, draft_steps, draft_prefill, ratio, implied,
               steps, spread)


def pooled(counts: Iterable[Counts]) -> Counts | None:
    found = list(counts)
    return sum(found[1:], found[0]) if found else None


@dataclass(frozen=True)
class Case:
    task: str
    cell: Cell
    measured: float
    predicted: float
    low: float
    high: float
    textbook: float
    pair_median: float | None
    machine_others: float | None  # the machine's other candidates (its other depths too)
    # the machine's median across pairs, as the baseline reads: its measured
    # speedups of the other mechanisms (a lookup cell: the draft model's), not hidden
    other_pairs: float | None
    spread: float  # the log-sd of the cell's own measurement (its blocks)
    above: bool  # deeper than every known cell's depth (which the product never predicts)
    held_out: tuple[float, float]  # the interval with cross-validated misses (``residuals``)
    # the point times exp(the median miss of the known lookup cells on the same machine):
    # what the machine's own measurements of other cells would correct (None: none known)
    corrected: float | None


def _resampled_profile(counts: Counts, rng: random.Random) -> list[float]:
    out, reached = [], counts.rounds
    for a in counts.profile():
        kept = sum(rng.random() < a for _ in range(reached)) if reached else 0
        out.append(kept / reached if reached else 0.0)
        reached = kept
    return out


def drafting_factors(run: Run, cells: Iterable[Cell]) -> list[float]:
    """Per known draft-model cell, what a drafted token cost in its blocks in its machine's
    draft steps (``predict.drafting_factor``, as the server's crowd computes it per row
    from the row's machine's probes of the target and the draft)."""
    out = []
    for cell in cells:
        machine, candidate, _ = cell
        if not candidate.startswith("draft") or cell not in run.counts:
            continue
        counts, depth = run.counts[cell], depth_of(candidate)
        profile = counts.profile()
        plain = plain_steps_per_round(counts.plain_steps / counts.decoded, profile, depth)
        size, step = drafted(run, [cell], depth), statistics.median(run.draft_steps[machine])
        batch = draft_batch(run.draft_prefill.get(machine), size, depth)
        cost = curve(run.probes[machine])
        out.append(drafting_factor(run.measured[cell], profile, depth, cost, step, plain, size)
                   if batch is None else batch_factor(run.measured[cell], profile, depth,
                                                      cost, step, plain, size, batch))
    return out


def residuals(run: Run, cells: Iterable[Cell], held_out: bool = False) -> list[float]:
    """Per known lookup cell, log(measured / predicted from its own counts and its own
    machine's probe): the model's miss there (the server's ``crowd.residuals``; a draft
    model's cells are left out, as there: its drafting cost is read off them). With
    ``held_out``, each predicted from the other known cells' counts instead, as the task
    predicts the hidden one (a cross-validated miss, which holds how far acceptance moves
    between the known cells too; not what the product computes)."""
    cells = [c for c in cells if c in run.counts]
    out = []
    for cell in cells:
        machine, candidate, _ = cell
        if not candidate.startswith("ngram"):
            continue
        counts = (pooled(run.counts[k] for k in cells if k != cell) if held_out
                  else run.counts[cell])
        if counts is None or not counts.rounds:
            continue
        depth = depth_of(candidate)
        profile = counts.profile()
        plain = plain_steps_per_round(counts.plain_steps / counts.decoded, profile, depth)
        out.append(math.log(run.measured[cell] / predicted_speedup(
            profile, depth, curve(run.probes[machine]), 0.0, plain,
            drafted(run, [k for k in cells if k != cell] if held_out else [cell], depth))))
    return out


# Whether a round is taken to draft what the known cells' rounds drafted (``predict.
# drafted_at``) or always its whole depth (the model before: ``--whole-drafts``).
SHORT_DRAFTS = True


def drafted(run: Run, cells: Iterable[Cell], depth: int) -> float | None:
    """The tokens a round drafts on average at ``depth``, from the ``cells``' own rounds
    (each at its depth, ``predict.drafted_at``), weighted by their rounds; None without
    any (or with ``SHORT_DRAFTS`` off): the whole depth."""
    found = [(run.counts[c], depth_of(c[1])) for c in cells if c in run.counts]
    found = [(c, d) for c, d in found if c.rounds and c.drafted]
    if not SHORT_DRAFTS or not found:
        return None
    return sum(drafted_at(depth, d, c.drafted / c.rounds) * c.rounds for c, d in found) / sum(
        c.rounds for c, _ in found)


def _drawn_median(values: Sequence[float], rng: random.Random) -> float:
    return statistics.median([values[rng.randrange(len(values))] for _ in values])


def predict(run: Run, cell: Cell, known: Sequence[Cell]
            ) -> tuple[float, float, float, float, tuple[float, float]]:
    """(prediction, interval low, high, textbook, the interval with held-out misses) for
    ``cell`` from the ``known`` cells (their pooled counts, drafting costs, measured
    spreads and misses)."""
    source = pooled(run.counts[k] for k in known)
    assert source is not None
    machine, candidate, _ = cell
    depth = depth_of(candidate)
    drafting = candidate.startswith("draft")
    units = advise_units.units_of([run.counts[k] for k in known], {k[1] for k in known})
    profile, share = (advise_units.point(units) if units is not None
                      else (source.profile(), source.plain_steps / source.decoded))
    # the forecast's drafting_steps and measurement_spread: medians over the known units
    # per machine, as the product's contributor units (the draw's spread)
    by_machine = {m: drafting_factors(run, [k for k in known if k[0] == m])
                  for m in sorted({k[0] for k in known})} if drafting else {}
    factors = [f for found in by_machine.values() for f in found]
    factor = statistics.median(factors) if factors else 1.0
    per_machine = [statistics.median(found) for found in by_machine.values() if found]
    spread_of = new_machine_spread(per_machine)
    center = statistics.median(per_machine) if per_machine else 1.0
    spread = statistics.median([run.spread[k] for k in known])
    draft_s = statistics.median(run.draft_steps[machine]) * factor if drafting else 0.0
    size = drafted(run, known, depth)
    batch = draft_batch(run.draft_prefill.get(machine), size, depth) if drafting else None
    checked = depth if size is None else size
    plain = plain_steps_per_round(share, profile, depth)
    point = predicted_speedup(profile, depth, curve(run.probes[machine]),
                              per_pass(draft_s, checked, plain, batch), plain, size)
    rng = random.Random(f"{cell}")
    draws = []
    for _ in range(RESAMPLES):
        d = _drawn_median(run.draft_steps[machine], rng) if drafting else 0.0
        drawn, drawn_share = (advise_units.draw(units, rng) if units is not None
                              else (_resampled_profile(source, rng), share))
        if factors:
            d *= drafting_draw(center, spread_of, rng)
        plain = plain_steps_per_round(drawn_share, drawn, depth)
        draws.append(predicted_speedup(drawn, depth, curve(run.probes[machine], rng),
                                       per_pass(d, checked, plain, batch), plain, size))
    noise = model_error(residuals(run, known), spread)
    low, high = measured_interval(draws, noise.scale, LEVEL, rng, noise.dof)
    held = model_error(residuals(run, known, held_out=True), spread)
    held_out = measured_interval(draws, held.scale, LEVEL, random.Random(f"{cell} held"),
                                 held.dof)
    alpha = mean_acceptance(profile[:depth])
    book = textbook_speedup(alpha, depth, run.size_ratio if drafting else 0.0)
    return point, low, high, book, held_out


def cases(run: Run) -> list[Case]:
    out: list[Case] = []

    def add(task: str, cell: Cell, known: Iterable[Cell], hidden: set[Cell]) -> None:
        known = [k for k in known if k in run.counts]
        source = pooled(run.counts[k] for k in known)
        if source is None or not source.rounds or cell not in run.measured:
            return
        point, low, high, book, held_out = predict(run, cell, known)
        own = residuals(run, [k for k in known if k[0] == cell[0]])
        corrected = point * math.exp(statistics.median(own)) if own else None
        m, c, x = cell
        pair = [v for (m2, c2, x2), v in run.measured.items()
                if m2 != m and c2 == c and x2 == x and (m2, c2, x2) not in hidden]
        mine = [v for (m2, c2, x2), v in run.measured.items()
                if m2 == m and c2 != c and (m2, c2, x2) not in hidden]
        others = [v for (m2, c2, x2), v in run.measured.items()
                  if m2 == m and mechanism(c2) != mechanism(c) and (m2, c2, x2) not in hidden]
        out.append(Case(task, cell, run.measured[cell], point, low, high, book,
                        statistics.median(pair) if pair else None,
                        statistics.median(mine) if mine else None,
                        statistics.median(others) if others else None,
                        run.spread[cell],
                        all(depth_of(c) > depth_of(k[1]) for k in known), held_out, corrected))

    for m in run.machines:
        for x in run.domains:
            ngrams = [c for c in run.candidates if c.startswith("ngram")]
            for c in ngrams:
                hidden = {(m, c, x)}
                add("depths", (m, c, x), [(m, o, x) for o in ngrams if o != c], hidden)
                add("shallower depths", (m, c, x),
                    [(m, o, x) for o in ngrams if depth_of(o) > depth_of(c)], hidden)
            hidden = {(m, c, x) for c in run.candidates}
            for c in run.candidates:
                add("kinds of work", (m, c, x), [k for k in run.counts if k[0] == m
                                                 and k[1] == c and k[2] != x], hidden)
        hidden = {cell for cell in run.measured if cell[0] == m}
        for c in run.candidates:
            for x in run.domains:
                add("machines", (m, c, x), [k for k in run.counts if k[0] != m
                                            and k[1] == c and k[2] == x], hidden)
    return out
