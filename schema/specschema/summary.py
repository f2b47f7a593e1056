"""Per-config summaries computed from trials: the numbers the client shows and the
server stores. Never trusted from the wire; both sides call ``summarize``."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from specschema.models import ConfigResult, Observed, Role, Submission, Trial
from specschema.stats import decode_tps, median_of_sorted, ratio_of_medians, stdev_and_cv


class ConfigSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    role: Role
    model: str
    draft_model: str | None
    mechanism: str
    observed: Observed
    trials: int
    median_wall_s: float | None
    median_eval_s: float | None
    median_tps: float | None
    min_tps: float | None
    max_tps: float | None
    stdev_tps: float | None
    cv_tps: float | None
    speedup_tps: float | None
    speedup_tps_ci_low: float | None
    speedup_tps_ci_high: float | None
    speedup_wall: float | None
    outputs_match_baseline: bool | None


def trial_tps(trials: Sequence[Trial]) -> list[float]:
    rates = (decode_tps(t.eval_count, t.eval_duration_ns) for t in trials)
    return [r for r in rates if r is not None]


# A config's per-trial numbers, read once: decode rates in trial order (the bootstrap's
# input), then the rates, wall times and eval times, each sorted once.
_Samples = tuple[list[float], list[float], list[float], list[float]]


def _samples(trials: Sequence[Trial]) -> _Samples:
    tps: list[float] = []
    walls: list[float] = []
    evals: list[float] = []
    for t in trials:
        eval_ns = t.eval_duration_ns
        walls.append(t.wall_s)
        evals.append(eval_ns / 1e9)
        if eval_ns > 0:  # decode_tps, inlined
            tps.append(t.eval_count / eval_ns * 1e9)
    walls.sort()
    evals.sort()
    return tps, sorted(tps), walls, evals


def _median(ordered: list[float]) -> float | None:
    return median_of_sorted(ordered) if ordered else None


def _summarize_config(config: ConfigResult, own: _Samples, base: _Samples | None) -> ConfigSummary:
    """``base``: the baseline's samples; None for the baseline itself or without one."""
    tps, tps_sorted, walls, evals = own
    speedup_tps = ci_low = ci_high = speedup_wall = None
    if base is not None:
        base_tps, _, base_walls, _ = base
        if tps and base_tps:
            estimate = ratio_of_medians(tps, base_tps)
            speedup_tps, ci_low, ci_high = estimate.ratio, estimate.ci_low, estimate.ci_high
        if walls and base_walls and median_of_sorted(walls) > 0:
            # wall speedup > 1 means the draft config finished faster.
            speedup_wall = median_of_sorted(base_walls) / median_of_sorted(walls)
    stdev_tps, cv_tps = stdev_and_cv(tps)
    return ConfigSummary(
        name=config.name,
        role=config.role,
        model=config.model,
        draft_model=config.draft_model,
        mechanism=config.speculation.mechanism,
        observed=config.speculation.observed,
        trials=len(config.trials),
        median_wall_s=_median(walls),
        median_eval_s=_median(evals),
        median_tps=_median(tps_sorted),
        min_tps=min(tps) if tps else None,
        max_tps=max(tps) if tps else None,
        stdev_tps=stdev_tps,
        cv_tps=cv_tps,
        speedup_tps=speedup_tps,
        speedup_tps_ci_low=ci_low,
        speedup_tps_ci_high=ci_high,
        speedup_wall=speedup_wall,
        outputs_match_baseline=config.speculation.outputs_match_baseline,
    )


def summarize_configs(configs: Sequence[ConfigResult]) -> list[ConfigSummary]:
    baseline = next((c for c in configs if c.role == "baseline"), None)
    samples = [_samples(c.trials) for c in configs]
    base = next((s for c, s in zip(configs, samples, strict=True) if c is baseline), None)
    return [
        _summarize_config(c, own, None if c is baseline else base)
        for c, own in zip(configs, samples, strict=True)
    ]


def summarize(submission: Submission) -> list[ConfigSummary]:
    return summarize_configs(submission.configs)
