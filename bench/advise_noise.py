"""How much of the advisor bench's error its measurement leaves to the model (pure; prints).

Readings of a saved run of bench/advise.py, beside ``advise_analysis``'s figures:

- **Two probes of one machine** (a run with ``--probe-twice``): how far the plain step
  and the 9-token round moved between the probe before the machine's blocks and the one
  after them, the load the probe alone cannot see.
- **Two measurements of one cell.** A candidate ran in two blocks (one in each sweep of the
  bracketed order), and its tokens are the same in both (temperature 0). Each block's rate
  over the baseline interpolated at its place (``specschema.block_ratios``, the product's
  rule: a linear drift between neighbouring baseline blocks cancels) is one measurement of
  the same speedup; |log(first / second)| is how far two measurements of it fall apart.
  If they were independent with log-sd s each, their mean would be off the truth by
  s / sqrt(2), so a perfect prediction's median |log error| would be about half the median
  of |log(first / second)|: a scale, not a bound (the baseline blocks they share add noise
  this difference cancels; one block over an interpolated baseline is noisier than the
  three-baseline mean the analysis compares with).
- **What acceptance adds.** Each held-out case predicted again with the cell's own
  acceptance per position and plain steps (what a perfect crowd would give) and everything
  else as the model takes it: what is left is the cost side (the machine's probe, the
  drafting cost) and the measurement; the difference is what the crowd's acceptance added.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from advise_analysis import Case, Run, depth_of, drafting_factors
from advise_measurements import block_rates, curve, drift_line, probe_drift
from specschema.block_ratios import block_ratios
from specschema.predict import plain_steps_per_round, predicted_speedup


def split_halves(data: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per machine, |log(first / second)| of each candidate cell's two block ratios (a
    block with repeats: the median of its requests, ``advise_measurements``)."""
    out: dict[str, list[float]] = {}
    for machine, found in data["machines"].items():
        rates = block_rates(found)
        for (config, domain), blocks in rates.items():
            if config == "baseline" or len(blocks) != 2:
                continue
            first, second = block_ratios(blocks, rates[("baseline", domain)]).ratios
            out.setdefault(machine, []).append(abs(math.log(first / second)))
    return out


def own_acceptance(run: Run, case: Case) -> float:
    """The case predicted with the held-out cell's own acceptance and plain steps, the
    machine's probe and (for the draft model) the drafting cost from every other cell."""
    machine, candidate, _ = case.cell
    own, depth = run.counts[case.cell], depth_of(candidate)
    profile = own.profile()
    draft_s = 0.0
    if candidate.startswith("draft"):
        others = [k for k in run.counts if k[1] == candidate and k != case.cell]
        factors = drafting_factors(run, others)
        draft_s = statistics.median(run.draft_steps[machine]) * (
            statistics.median(factors) if factors else 1.0)
    plain = plain_steps_per_round(own.plain_steps / own.decoded, profile, depth)
    return predicted_speedup(profile, depth, curve(run.probes[machine]), draft_s, plain)


def report(data: Mapping[str, Any], run: Run, found: Sequence[Case]) -> None:
    drifts = {m: d for m, f in sorted(data["machines"].items())
              if (d := probe_drift(f)) is not None}
    if drifts:  # a run probed once (every run before --probe-twice) prints nothing here
        print("\nthe probe before the blocks and after them (medians; log after / before): "
              "the analysis pools the two")
        for machine, drift in drifts.items():
            print(drift_line(machine, drift))
    print("\ntwo measurements of one cell (its two blocks, each over the baseline at its "
          "place): median |log(first / second)|, and half of it (about a perfect "
          "prediction's median |log error| against their mean)")
    for machine, diffs in sorted(split_halves(data).items()):
        half = statistics.median(diffs) / 2
        print(f"  {machine}: {statistics.median(diffs):.3f}, half {half:.3f} "
              f"({math.exp(half) - 1:.1%})")
    print("\nheld-out cases with the cell's own acceptance (median |log error|, signed): what "
          "the cost side and the measurement leave / the model as it is")
    for task in ("depths", "shallower depths", "machines", "kinds of work"):
        for machine in run.machines:
            chosen = [c for c in found if c.task == task and c.cell[0] == machine]
            if not chosen:
                continue
            own = [math.log(own_acceptance(run, c) / c.measured) for c in chosen]
            model = [math.log(c.predicted / c.measured) for c in chosen]
            print(f"  {task:<16} {machine}: own acceptance "
                  f"{statistics.median(abs(e) for e in own):.3f} "
                  f"({statistics.median(own):+.3f}) / model "
                  f"{statistics.median(abs(e) for e in model):.3f} "
                  f"({statistics.median(model):+.3f})")
