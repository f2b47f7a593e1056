"""Per-config summaries computed from trials: the numbers the client shows and the
server stores. Never trusted from the wire; both sides call ``summarize``."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from specschema.models import ConfigResult, Observed, Role, Submission, Trial
from specschema.stats import (
    coefficient_of_variation,
    decode_tps,
    median,
    ratio_of_medians,
    sample_stdev,
)


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


def _summarize_config(config: ConfigResult, baseline: ConfigResult | None) -> ConfigSummary:
    tps = trial_tps(config.trials)
    walls = [t.wall_s for t in config.trials]
    evals = [t.eval_duration_ns / 1e9 for t in config.trials]
    speedup_tps = ci_low = ci_high = speedup_wall = None
    if baseline is not None and config is not baseline:
        base_tps = trial_tps(baseline.trials)
        base_walls = [t.wall_s for t in baseline.trials]
        if tps and base_tps:
            estimate = ratio_of_medians(tps, base_tps)
            speedup_tps, ci_low, ci_high = estimate.ratio, estimate.ci_low, estimate.ci_high
        if walls and base_walls and median(walls) > 0:
            # wall speedup > 1 means the draft config finished faster.
            speedup_wall = median(base_walls) / median(walls)
    return ConfigSummary(
        name=config.name,
        role=config.role,
        model=config.model,
        draft_model=config.draft_model,
        mechanism=config.speculation.mechanism,
        observed=config.speculation.observed,
        trials=len(config.trials),
        median_wall_s=median(walls) if walls else None,
        median_eval_s=median(evals) if evals else None,
        median_tps=median(tps) if tps else None,
        min_tps=min(tps) if tps else None,
        max_tps=max(tps) if tps else None,
        stdev_tps=sample_stdev(tps),
        cv_tps=coefficient_of_variation(tps) if tps else None,
        speedup_tps=speedup_tps,
        speedup_tps_ci_low=ci_low,
        speedup_tps_ci_high=ci_high,
        speedup_wall=speedup_wall,
        outputs_match_baseline=config.speculation.outputs_match_baseline,
    )


def summarize_configs(configs: Sequence[ConfigResult]) -> list[ConfigSummary]:
    baseline = next((c for c in configs if c.role == "baseline"), None)
    return [_summarize_config(c, baseline) for c in configs]


def summarize(submission: Submission) -> list[ConfigSummary]:
    return summarize_configs(submission.configs)
