"""How far the model misses on the crowd's own machines: per run of a drafter that costs
nothing (an n-gram lookup) whose machine probed the target, the log of its measured
speedup over what ``specschema.predict`` says from its own acceptance, plain steps and
its machine's cost curve (``crowd.own_costs``).

A probe times rounds on its own; a run's rounds run among the run's other work, and on
the advisor bench the two priced a round 5-12 % apart, one way on one machine and the
other way on another. A user's machine is one more of those, so the forecast widens its
interval by what these misses spread (``specschema.predict_measured.model_error``). A
draft model's runs are left out: the cost of a pass of the draft is read off the same
runs (``crowd.drafting``), so that its miss on its own run is nothing by construction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specschema.predict import predicted_speedup
from specserver.crowd.own_costs import MachineCosts, MeasuredRun

__all__ = ["model_residuals"]


def model_residuals(costs: MachineCosts, found: Sequence[MeasuredRun]
                    ) -> list[tuple[MeasuredRun, dict[str, float]]]:
    """Per costless run whose machine's target curve is known, per domain, log(measured /
    predicted) (module docstring). The caller passes costless runs only."""
    out: list[tuple[MeasuredRun, dict[str, float]]] = []
    for run in found:
        curve = costs.target_curve(run)
        if curve is None or run.draft_digest is not None:
            continue
        misses = {domain: math.log(speedup / predicted_speedup(rates, run.depth, curve, 0.0,
                                                               plain, drafted))
                  for domain, speedup, rates, plain, drafted in run.domains()}
        if misses:
            out.append((run, misses))
    return out
