"""Per-config summaries computed from trials: the numbers the client shows and the
server stores. Never trusted from the wire; both sides call ``summarize``.

When every trial of a config and of the baseline carries its block (``Trial.block``), the
speedups are computed over blocks (each draft block against the baseline interpolated at
its place in the run: in time when every trial says when it started, else by run
position) by the protocol's interval method (``Protocol.interval``):
``specschema.block_t.blocked_ratio_t`` (geometric mean of block ratios, Student's t CI) for
"block_t", ``specschema.block_bootstrap.blocked_ratio`` (median of block ratios, two-stage bootstrap
CI) for "block_bootstrap", the method of every protocol before "block_t" and of protocols
that are not shipped. The wall-time speedup is the same estimator over requests per second
(1 / wall_s). Without blocks (every result before blocks existed) they are the ratio of
medians over trials, as before, so those results keep their numbers bit for bit.

A protocol with a prompt set (``Protocol.prompts``) measures every kind of work in every
block; there the ratio of each block is the geometric mean over its domains of the domain's
ratio (``block_t.blocked_ratio_t_over``), so a fast domain weighs no more than a slow one,
and ``domain_summaries`` gives each domain's own speedup and acceptance."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict

from specschema.block_bootstrap import blocked_ratio
from specschema.block_ratios import Block, BlockedEstimate, block_drift
from specschema.block_t import blocked_ratio_t, blocked_ratio_t_over
from specschema.blocks import decode_rates, has_blocks, timed, trial_blocks
from specschema.models import ConfigResult, Observed, Role, Submission, Trial
from specschema.protocol_files import find_protocol, interval_of
from specschema.stability import baseline_stability
from specschema.stats import (
    median,
    median_of_sorted,
    ratio_of_medians,
    stdev_and_cv,
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
    # With blocks only (None otherwise, and on rows stored before them):
    blocks: int | None = None  # this config's blocks
    block_drift: float | None = None  # max / min of its block medians of tok/s, minus 1
    speedup_wall_ci_low: float | None = None
    speedup_wall_ci_high: float | None = None
    # The baseline of a timed run only (``specschema.stability``): its interior block
    # farthest off the line between its neighbours (its median over the line, minus 1),
    # that block's place among the baseline's blocks (0: the first), and its load change.
    off_line: float | None = None
    off_line_block: int | None = None
    off_line_load: float | None = None


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


@dataclass(frozen=True)
class _BlockFields:
    """A summary's numbers from blocks (``summarize_configs`` when the trials carry them)."""

    blocks: int
    block_drift: float | None
    speedup_tps: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    speedup_wall: float | None = None
    wall_ci_low: float | None = None
    wall_ci_high: float | None = None


Interval = str  # ``Protocol.interval``: "block_bootstrap" or "block_t"
_ESTIMATORS: dict[Interval, Callable[[Sequence[Block], Sequence[Block]], BlockedEstimate]] = {
    "block_bootstrap": blocked_ratio, "block_t": blocked_ratio_t}


# A prompt set's domain of each prompt, in prompt order: trial i answered prompt
# i % len(...) (``Protocol.domain_of``). None: one prompt, no domains.
PromptDomains = Sequence[str] | None
Rates = Callable[[Sequence[Trial]], list[float | None]]


def by_domain(trials: Sequence[Trial], domains: Sequence[str]) -> dict[str, list[Trial]]:
    """The trials of each domain, domains in the prompt set's order."""
    found: dict[str, list[Trial]] = {d: [] for d in domains}
    for trial in trials:
        found[domains[trial.index % len(domains)]].append(trial)
    return found


# The baseline's blocks of each rate, read once per summary (every draft is compared with
# the same baseline).
BaselineBlocks = dict[Rates, list[Block]]


def _estimate(config: ConfigResult, baseline: ConfigResult, interval: Interval,
              rates: Rates, domains: PromptDomains, by_time: bool,
              baseline_blocks: BaselineBlocks) -> BlockedEstimate | None:
    """The protocol's estimator over blocks of ``rates``, placed in time when ``by_time``;
    per domain, then over domains, for a prompt set. None when either side has no values."""
    if not domains:
        own = trial_blocks(config.trials, rates(config.trials), by_time)
        base = baseline_blocks.get(rates)
        if base is None:
            base = baseline_blocks[rates] = trial_blocks(baseline.trials,
                                                         rates(baseline.trials), by_time)
        if not any(b.values for b in own) or not any(b.values for b in base):
            return None
        if interval == "block_t" and by_time:  # the shared baseline counted too
            return blocked_ratio_t(own, base, shared_baseline=True)
        return _ESTIMATORS[interval](own, base)
    if interval != "block_t":
        raise ValueError("a prompt set's results need interval block_t")
    mine, theirs = by_domain(config.trials, domains), by_domain(baseline.trials, domains)
    parts = [(trial_blocks(mine[d], rates(mine[d]), by_time),
              trial_blocks(theirs[d], rates(theirs[d]), by_time)) for d in mine]
    if not all(any(b.values for b in own) and any(b.values for b in base)
               for own, base in parts):
        return None
    try:
        return blocked_ratio_t_over([own for own, _ in parts], [base for _, base in parts])
    except ValueError:  # domains with values in different blocks: no paired estimate
        return None


def _blocked(config: ConfigResult, baseline: ConfigResult | None,
             interval: Interval, domains: PromptDomains = None,
             by_time: bool = False, baseline_blocks: BaselineBlocks | None = None
             ) -> _BlockFields:
    own = trial_blocks(config.trials, decode_rates(config.trials))
    drift = block_drift([median(b.values) for b in own if b.values])
    if baseline is None or config is baseline or not any(b.values for b in own):
        return _BlockFields(len(own), drift)
    memo = {} if baseline_blocks is None else baseline_blocks
    tps = _estimate(config, baseline, interval, decode_rates, domains, by_time, memo)
    wall = _estimate(config, baseline, interval, _per_second, domains, by_time, memo)
    fields = _BlockFields(len(own), drift)
    if tps is not None:
        fields = replace(fields, speedup_tps=tps.ratio, ci_low=tps.ci_low, ci_high=tps.ci_high)
    if wall is not None:
        fields = replace(fields, speedup_wall=wall.ratio, wall_ci_low=wall.ci_low,
                         wall_ci_high=wall.ci_high)
    return fields


def _per_second(trials: Sequence[Trial]) -> list[float | None]:
    """Requests per second (1 / wall_s): the wall-time speedup's rate."""
    return [1.0 / t.wall_s if t.wall_s > 0 else None for t in trials]


def _summarize_config(config: ConfigResult, own: _Samples, base: _Samples | None,
                      blocked: _BlockFields | None = None) -> ConfigSummary:
    """``base``: the baseline's samples; None for the baseline itself or without one.
    ``blocked``: the numbers from blocks, when the trials carry them."""
    tps, tps_sorted, walls, evals = own
    speedup_tps = ci_low = ci_high = speedup_wall = None
    if blocked is not None:
        speedup_tps, ci_low, ci_high = blocked.speedup_tps, blocked.ci_low, blocked.ci_high
        speedup_wall = blocked.speedup_wall
    elif base is not None:
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
        blocks=blocked and blocked.blocks,
        block_drift=blocked and blocked.block_drift,
        speedup_wall_ci_low=blocked and blocked.wall_ci_low,
        speedup_wall_ci_high=blocked and blocked.wall_ci_high,
    )


def summarize_configs(configs: Sequence[ConfigResult], *,
                      interval: Interval = "block_bootstrap",
                      domains: PromptDomains = None) -> list[ConfigSummary]:
    """``interval``: the protocol's ``Protocol.interval`` (used when the trials carry
    blocks); ``domains``: its prompt set's domain per prompt."""
    if interval not in _ESTIMATORS:
        raise ValueError(f"unknown interval method {interval!r}")
    baseline = next((c for c in configs if c.role == "baseline"), None)
    samples = [_samples(c.trials) for c in configs]
    base = next((s for c, s in zip(configs, samples, strict=True) if c is baseline), None)
    base_blocks = baseline is not None and has_blocks(baseline.trials)
    by_time = base_blocks and timed(configs)
    memo: BaselineBlocks = {}
    found = [
        _summarize_config(c, own, None if c is baseline else base,
                          _blocked(c, baseline, interval, domains, by_time, memo)
                          if base_blocks and has_blocks(c.trials)
                          else None)
        for c, own in zip(configs, samples, strict=True)
    ]
    stability = baseline_stability(baseline, by_time) if by_time else None
    if stability is None or stability.worst is None:
        return found
    worst = stability.worst
    return [s.model_copy(update={"off_line": worst.residual, "off_line_block": worst.block,
                                 "off_line_load": worst.load_change})
            if c is baseline else s for c, s in zip(configs, found, strict=True)]


def prompt_domains(submission: Submission) -> PromptDomains:
    """The domain of each prompt of the submission's protocol's prompt set (None: the
    protocol has none, or is not shipped)."""
    ref = submission.protocol
    protocol = find_protocol(ref.id, ref.version, ref.sha256)
    if protocol is None or not protocol.prompts:
        return None
    return tuple(p.domain for p in protocol.prompts)


def summarize(submission: Submission) -> list[ConfigSummary]:
    """The summaries, with the interval method of the submission's protocol."""
    ref = submission.protocol
    return summarize_configs(submission.configs,
                             interval=interval_of(ref.id, ref.version, ref.sha256),
                             domains=prompt_domains(submission))
