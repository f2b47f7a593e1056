"""``summarize`` is bit-identical to the definition it replaced (kept here as the reference).

The summaries are shown by the client, stored by the server and compared in tests, so the
faster version (each list read and sorted once, the baseline's numbers read once) must give
the very same floats: compared by ``repr``, which tells -0.0 from 0.0 and every last bit.
"""

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specschema.examples import example_submission
from specschema.models import ConfigResult, Trial
from specschema.stats import (
    coefficient_of_variation,
    decode_tps,
    median,
    ratio_of_medians,
    sample_stdev,
)
from specschema.summary import ConfigSummary, summarize, summarize_configs
from tests.support.tiers import examples


def _reference_tps(trials: Sequence[Trial]) -> list[float]:
    rates = (decode_tps(t.eval_count, t.eval_duration_ns) for t in trials)
    return [r for r in rates if r is not None]


def _reference_config(config: ConfigResult, baseline: ConfigResult | None) -> dict[str, Any]:
    tps = _reference_tps(config.trials)
    walls = [t.wall_s for t in config.trials]
    evals = [t.eval_duration_ns / 1e9 for t in config.trials]
    speedup_tps = ci_low = ci_high = speedup_wall = None
    if baseline is not None and config is not baseline:
        base_tps = _reference_tps(baseline.trials)
        base_walls = [t.wall_s for t in baseline.trials]
        if tps and base_tps:
            estimate = ratio_of_medians(tps, base_tps)
            speedup_tps, ci_low, ci_high = estimate.ratio, estimate.ci_low, estimate.ci_high
        if walls and base_walls and median(walls) > 0:
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
    ).model_dump()


def _reference(configs: Sequence[ConfigResult]) -> list[dict[str, Any]] | str:
    baseline = next((c for c in configs if c.role == "baseline"), None)
    try:
        return [_reference_config(c, baseline) for c in configs]
    except ValueError as exc:
        return f"ValueError: {exc}"


def _fast(configs: Sequence[ConfigResult]) -> list[dict[str, Any]] | str:
    try:
        return [s.model_dump() for s in summarize_configs(configs)]
    except ValueError as exc:
        return f"ValueError: {exc}"


TEMPLATE = example_submission("ollama-draft", seed=4, engine_version="0.30.1")

trial_numbers = st.tuples(
    st.sampled_from([0, 1, 7, 200]),  # eval_count
    st.one_of(st.sampled_from([0, 1]), st.integers(1, 10**11)),  # eval_duration_ns
    st.one_of(st.sampled_from([0.0, 1.5, 1.5]), st.floats(0.0, 100.0)),  # wall_s
)


def _configs(trial_lists: list[list[tuple[int, int, float]]],
             roles: list[str]) -> list[ConfigResult]:
    configs = []
    for template, role, numbers in zip(TEMPLATE.configs, roles, trial_lists, strict=False):
        trials = [
            template.trials[0].model_copy(update={
                "index": i, "eval_count": count, "eval_duration_ns": eval_ns, "wall_s": wall,
            })
            for i, (count, eval_ns, wall) in enumerate(numbers)
        ]
        configs.append(template.model_copy(update={"trials": trials, "role": role}))
    return configs


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.lists(trial_numbers, max_size=9), min_size=1, max_size=len(TEMPLATE.configs)),
    st.lists(st.sampled_from(["baseline", "draft"]), min_size=len(TEMPLATE.configs),
             max_size=len(TEMPLATE.configs)),
)
def test_summaries_equal_the_reference_bit_for_bit(
    trial_lists: list[list[tuple[int, int, float]]], roles: list[str]
) -> None:
    configs = _configs(trial_lists, roles)
    assert repr(_fast(configs)) == repr(_reference(configs))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("protocol", ["hardnumbers-m2", "ollama-draft"])
def test_example_summaries_equal_the_reference(seed: int, protocol: str) -> None:
    submission = example_submission(protocol, seed=seed, engine_version="0.30.1")
    expected = _reference(submission.configs)
    assert isinstance(expected, list)
    assert repr([s.model_dump() for s in summarize(submission)]) == repr(expected)
