"""``bench/advise.py --batch-prefill``: a draft model's pass over a round's checked batch
priced at the draft's probed prefill of that batch, its drafting passes at T_d, in the
prediction and in the drafting factors read off the runs. A variant the 2026-12-07 16:49
run measured and the product did not adopt (BENCHMARKS.md, "Is a draft's dearer pass on
some machines its pass over the checked batch?"); the product prices the batch pass as
one more drafting pass (``specschema.predict.draft_passes``), which these reduce to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from advise_measurements import curve
from specschema.predict import CostCurve, draft_passes, implied_draft_seconds

BATCH_PREFILL = False


def draft_batch(prefill: Mapping[int, Sequence[float]] | None, size: float | None,
                depth: int) -> float | None:
    """The draft's prefill of a round's drafted tokens and the target's own (None: the
    variant not asked for, or the run did not probe the draft's prefill)."""
    if not BATCH_PREFILL or not prefill:
        return None
    return curve(prefill).at((depth if size is None else size) + 1)


def per_pass(t_d: float, size: float, plain: float, batch: float | None) -> float:
    """The seconds per pass at which the product's ``draft_passes`` a round cost what its
    drafting passes at ``t_d`` and the batch's prefill (``batch``) do."""
    if batch is None:
        return t_d
    passes = draft_passes(size, plain)
    return ((passes - 1) * t_d + batch) / passes


def batch_factor(measured: float, profile: Sequence[float], depth: int, cost: CostCurve,
                 step: float, plain: float, size: float | None, batch: float) -> float:
    """``predict.drafting_factor`` with the batch's prefill taken out: the per-pass cost
    that meets the measurement, less the batch, over the drafting passes, in draft steps."""
    passes = draft_passes(depth if size is None else size, plain)
    whole = implied_draft_seconds(measured, profile, depth, cost, plain, size) * passes
    return max((whole - batch) / (passes - 1) / step, 1.0)
