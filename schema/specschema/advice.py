"""Predicted speedups for one machine from a result's acceptance and a cost probe (pure).

For every config of a result that speculated without a draft model of its own (prompt
lookup, n-gram drafters; their drafting costs next to nothing, T_d = 0) and whose trials
carry acceptance per draft position, ``predictions`` gives S at each depth up to the one
measured, overall and per kind of work, with the result's own measured speedup beside the
prediction at the depth it ran. A config with a draft model needs that model's cost per
token, which no probe measures yet: it is listed as not predicted, with that reason.

``recommendation`` answers in one line: the mechanism and depth predicted fastest, when it
is predicted to help by more than ``MARGIN``, else to leave speculation off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specschema.breakdown import acceptance_of, domain_results
from specschema.models import Submission
from specschema.predict import CostCurve, mean_acceptance, predicted_speedup, textbook_speedup
from specschema.summary import summarize
from specschema.verdicts import verdict_of

__all__ = ["MARGIN", "Prediction", "predictions", "recommendation"]

MARGIN = 1.05  # a predicted gain below 5 % is within what a probe and one run can tell


@dataclass(frozen=True)
class Prediction:
    config: str
    depth: int
    predicted: float | None  # None: not predicted (``why``)
    textbook: float | None = None  # Leviathan et al. with this run's mean acceptance
    measured: float | None = None  # this result's speedup, at the depth it ran only
    by_domain: dict[str, float] = field(default_factory=dict)
    why: str = ""


def predictions(submission: Submission, cost: CostCurve) -> list[Prediction]:
    measured = {s.name: s.speedup_tps for s in summarize(submission)}
    verdicts = {c.name: c.speculation.observed for c in submission.configs}
    out: list[Prediction] = []
    for config in submission.configs:
        if config.role != "draft" or not config.trials:
            continue
        found = acceptance_of(config.trials)
        if found is None or not found.per_position:
            out.append(Prediction(config.name, 0, None, why="no acceptance per draft "
                                  "position was reported for it"))
            continue
        if config.draft_model is not None:
            out.append(Prediction(config.name, len(found.per_position), None,
                                  why="its draft model's cost per token is not measured yet"))
            continue
        per_domain = {r.domain: r.acceptance.per_position for r in
                      domain_results(submission, config)
                      if r.acceptance is not None and r.acceptance.per_position}
        ran = len(found.per_position)
        alpha = mean_acceptance(found.per_position)
        for depth in range(1, ran + 1):
            out.append(Prediction(
                config.name, depth, predicted_speedup(found.per_position, depth, cost),
                textbook=textbook_speedup(alpha, depth, 0.0),
                measured=(measured.get(config.name) if depth == ran
                          and verdict_of(verdicts[config.name]).counts else None),
                by_domain={d: predicted_speedup(p, depth, cost)
                           for d, p in per_domain.items()}))
    return out


def recommendation(found: Sequence[Prediction]) -> str:
    predicted = [p for p in found if p.predicted is not None]
    if not predicted:
        return "nothing could be predicted from this result (no acceptance per position)"
    best = max(predicted, key=lambda p: p.predicted or 0.0)
    assert best.predicted is not None
    if best.predicted < MARGIN:
        return (f"leave speculation off: the best predicted is {best.config} at depth "
                f"{best.depth}, {best.predicted:.2f}x")
    return f"use {best.config} at depth {best.depth}: predicted {best.predicted:.2f}x"
