"""What a pass of the draft cost in the crowd's runs of a draft model, in that draft's
plain decoding steps (``specschema.predict.drafting_factor``), from the stored rows and
probes.

A draft model's plain step (the draft probed as a target) leaves out what drafting adds
(the engine samples every drafted token over the whole vocabulary; the pass over each
checked batch is counted by ``specschema.predict`` itself).
A run of the draft tells the whole cost when its machine's costs are known: its measured
speedup, its acceptance per position and plain steps, the target's probed cost curve on
that machine and the draft's probed step there give the T_d the model needs to meet the
measurement. A row counts when its chip (and engine family) has both a verification probe
of the target and a probe of the draft (``crowd.own_costs``: the contributor's own probes
there when they have any, else every probe of that chip).
"""

from __future__ import annotations

from collections.abc import Sequence

from specschema.predict import drafting_factor
from specserver.crowd.own_costs import MachineCosts, MeasuredRun

__all__ = ["drafting_factors"]


def drafting_factors(costs: MachineCosts, found: Sequence[MeasuredRun]
                     ) -> list[tuple[MeasuredRun, dict[str, float]]]:
    """Per draft-model run whose machine's costs are known, per domain, a pass of the
    draft's cost in the draft's plain steps (module docstring)."""
    out: list[tuple[MeasuredRun, dict[str, float]]] = []
    for run in found:
        if run.draft_digest is None:
            continue
        curve, step = costs.target_curve(run), costs.draft_step(run)
        if curve is None or step is None:
            continue
        factors = {domain: drafting_factor(speedup, rates, run.depth, curve, step, plain,
                                           drafted)
                   for domain, speedup, rates, plain, drafted in run.domains()}
        if factors:
            out.append((run, factors))
    return out
