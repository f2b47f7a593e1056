"""The consistency rules as they were defined before the single pass: one
generator per rule, run one after the other. ``specserver.ingest.rules.violations`` must
return exactly what ``rule_violations`` returns here (tests/server/ingest/test_ingest_fast.py).

This is the reference, kept only in the tests: a plain copy of the rules, not to be
optimised. The helpers both sides share (what a config must say, JSON equality, the name
walk, the constants) are imported from production: they are one copy, not two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from specschema.capability import (
    counter_problems,
    engine_can_honor,
    reports_api_counters,
    submission_verdicts,
)
from specschema.engines import descriptor
from specschema.models import ConfigResult, Submission, Trial
from specserver.ingest.namefields import name_fields, name_problem_of
from specserver.ingest.plan import expected_configs, identity_of, same_json, stop_problem
from specserver.ingest.rulebook import (
    DONE_REASONS,
    DURATION_TOLERANCE_FRACTION,
    DURATION_TOLERANCE_NS,
    IMPORT_UUID_VERSION,
    MAX_DECODE_TPS,
    MAX_VIOLATIONS,
    MIN_DECODE_TPS,
    RATE_MIN_TOKENS,
    WALL_TOLERANCE_S,
)
from specserver.ingest.rules import (
    RuleContext,
    Violation,
    _num_predict,
)

Rule = Callable[[Submission, RuleContext], Iterator[Violation]]


def _trial_paths(submission: Submission) -> Iterator[tuple[str, ConfigResult, Trial]]:
    for ci, config in enumerate(submission.configs):
        for ti, trial in enumerate(config.trials):
            yield f"configs.{ci}.trials.{ti}", config, trial


def configs_match_protocol(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """Each config is one of the protocol's, sent exactly as the protocol says."""
    proto = ctx.protocol
    rule = "configs_match_protocol"
    target = submission.protocol.parameters.get("target") or proto.target
    if proto.target is None and "target" not in submission.protocol.parameters:
        yield Violation(rule, "protocol.parameters", f"protocol {proto.id} needs a target")
        return
    expected = expected_configs(identity_of(proto), target)
    seen: set[str] = set()
    for ci, config in enumerate(submission.configs):
        path = f"configs.{ci}"
        wanted = expected.get(config.name)
        if wanted is None:
            yield Violation(rule, f"{path}.name", f"config {config.name!r} is not in {proto.id}")
            continue
        if config.name in seen:
            yield Violation(rule, f"{path}.name", f"config {config.name!r} appears twice")
        seen.add(config.name)
        actual: dict[str, Any] = {
            "role": config.role,
            "model": config.model,
            "draft_model": config.draft_model,
            "speculation.mechanism": config.speculation.mechanism,
            "request_options": config.request_options,
            "request_fields": config.request_fields,
        }
        for field, value in wanted.items():
            if not same_json(actual[field], value):
                yield Violation(
                    rule, f"{path}.{field}", f"{field} of {config.name} must be {value!r}"
                )
        if len(config.warmups) > proto.warmups_for(config.name):
            yield Violation(rule, f"{path}.warmups", "more warmups than the protocol runs")
    missing = [name for name in expected if name not in seen]
    if submission.complete and missing:
        yield Violation(rule, "configs", f"a complete submission lacks {', '.join(missing)}")



def trials_fit_schedule(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """Trial counts and indices per config, and positions in the protocol's run order."""
    proto = ctx.protocol
    rule = "trials_fit_schedule"
    positions = {slot: pos for pos, slot in enumerate(proto.schedule())}
    blocks = dict(zip(proto.schedule(), proto.blocks(), strict=True))
    verdicts = submission_verdicts(submission)
    for ci, config in enumerate(submission.configs):
        count = len(config.trials)
        planned = proto.trials_for(config.name) or proto.trials_per_config
        refused_whole = count == 0 and verdicts[ci] == "incompatible"
        if count > planned or (submission.complete and count != planned
                               and not refused_whole):
            yield Violation(
                rule, f"configs.{ci}.trials",
                f"{config.name} has {count} trials; the protocol runs {planned}",
            )
        for ti, trial in enumerate(config.trials):
            block = blocks.get((config.name, trial.index))
            if trial.block is not None and block is not None and trial.block != block:
                yield Violation(rule, f"configs.{ci}.trials.{ti}.block",
                                f"trial {trial.index} of {config.name} runs in block {block}")
        with_block = sum(1 for t in config.trials if t.block is not None)
        if with_block and with_block != count:
            yield Violation(rule, f"configs.{ci}.trials",
                            "either every trial carries its block or none does")
        if sorted(t.index for t in config.trials) != list(range(count)):
            yield Violation(rule, f"configs.{ci}.trials", "trial indices must be 0..n-1, once")
        for ti, trial in enumerate(config.trials):
            expected = positions.get((config.name, trial.index))
            if expected is not None and trial.position != expected:
                yield Violation(
                    rule, f"configs.{ci}.trials.{ti}.position",
                    f"trial {trial.index} of {config.name} runs at position {expected}",
                )
    problem = stop_problem(proto, submission)
    if problem is not None:
        yield Violation(rule, "protocol.parameters.stopped", problem)


def eval_count_fits_num_predict(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """eval_count <= num_predict; done_reason is stop or length, and length means the limit."""
    rule = "eval_count_fits_num_predict"
    for path, config, trial in _trial_paths(submission):
        limit = _num_predict(config.request_options)
        if limit is None:
            continue  # no limit sent (configs_match_protocol reports the options)
        if trial.eval_count > limit:
            yield Violation(rule, f"{path}.eval_count",
                            f"eval_count {trial.eval_count} exceeds num_predict {limit}")
        if trial.done_reason is not None and trial.done_reason not in DONE_REASONS:
            yield Violation(rule, f"{path}.done_reason",
                            f"done_reason {trial.done_reason!r} is not stop or length")
        if trial.done_reason == "length" and trial.eval_count < limit - 1:
            yield Violation(rule, f"{path}.done_reason",
                            f"done_reason length with eval_count {trial.eval_count} < {limit}")


def durations_coherent(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """Engine durations fit inside total_duration; the client's wall time covers it."""
    rule = "durations_coherent"
    for path, _config, t in _trial_paths(submission):
        slack = DURATION_TOLERANCE_NS + int(t.total_duration_ns * DURATION_TOLERANCE_FRACTION)
        if t.eval_duration_ns > t.total_duration_ns:
            yield Violation(rule, f"{path}.eval_duration_ns", "eval_duration exceeds total")
        parts = t.load_duration_ns + (t.prompt_eval_duration_ns or 0) + t.eval_duration_ns
        if parts > t.total_duration_ns + slack:
            yield Violation(rule, f"{path}.total_duration_ns",
                            "load + prompt_eval + eval durations exceed total_duration")
        wall_floor = t.total_duration_ns / 1e9 * (1 - DURATION_TOLERANCE_FRACTION)
        if t.wall_s < wall_floor - WALL_TOLERANCE_S:
            yield Violation(rule, f"{path}.wall_s",
                            f"wall_s {t.wall_s} is shorter than total_duration")
        if t.ttft_s is not None and t.ttft_s > t.wall_s:
            yield Violation(rule, f"{path}.ttft_s", "time to first token exceeds wall time")
        if t.eval_count > 0 and t.eval_duration_ns == 0:
            yield Violation(rule, f"{path}.eval_duration_ns", "tokens decoded in zero time")
    for ci, config in enumerate(submission.configs):
        for wi, w in enumerate(config.warmups):
            if w.total_duration_ns is not None and w.load_duration_ns is not None and (
                w.load_duration_ns > w.total_duration_ns
            ):
                yield Violation(rule, f"configs.{ci}.warmups.{wi}", "load exceeds total")


def decode_rate_plausible(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """Decode tok/s inside [MIN_DECODE_TPS, MAX_DECODE_TPS]; every trial decodes something."""
    rule = "decode_rate_plausible"
    for path, _config, t in _trial_paths(submission):
        if t.eval_count == 0:
            yield Violation(rule, f"{path}.eval_count", "the trial decoded no tokens")
            continue
        if t.eval_count < RATE_MIN_TOKENS or t.eval_duration_ns == 0:
            continue
        rate = t.eval_count / t.eval_duration_ns * 1e9
        if not MIN_DECODE_TPS <= rate <= MAX_DECODE_TPS:
            yield Violation(rule, f"{path}.eval_duration_ns",
                            f"decode rate {rate:.4g} tok/s is outside "
                            f"[{MIN_DECODE_TPS}, {MAX_DECODE_TPS:g}]")


def created_at_recent(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """created_at is neither in the future (beyond the skew) nor older than the max age."""
    rule = "created_at_recent"
    created = submission.created_at
    if created > ctx.now + ctx.max_future_skew:
        yield Violation(rule, "created_at", f"created_at {created.isoformat()} is in the future")
    elif created < ctx.now - ctx.max_age:
        yield Violation(rule, "created_at",
                        f"created_at {created.isoformat()} is older than {ctx.max_age.days} days")


def speculation_coherent(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """The evidence agrees with what the engine can honor and with its own counters; each
    verdict is the one ``specschema.capability.submission_verdicts`` derives."""
    rule = "speculation_coherent"
    version = submission.engine.version
    expected_verdicts = submission_verdicts(submission)
    for ci, config in enumerate(submission.configs):
        path = f"configs.{ci}.speculation"
        s = config.speculation
        if s.requested != (config.role == "draft"):
            yield Violation(rule, f"{path}.requested", "only draft configs request speculation")
        engine = descriptor(submission.engine.name)
        can_honor = engine_can_honor(s.mechanism, version, engine.name)
        if s.engine_can_honor != can_honor:
            yield Violation(rule, f"{path}.engine_can_honor",
                            f"{s.mechanism} on {engine.label} {version}: engine_can_honor is "
                            f"{can_honor}")
        counters = (s.drafted_tokens, s.accepted_tokens, s.counters_source)
        seen = all(c is not None for c in counters)
        if not seen and any(c is not None for c in counters):
            yield Violation(rule, path, "drafted, accepted and counters_source come together")
        if seen and (s.accepted_tokens or 0) > (s.drafted_tokens or 0):
            yield Violation(rule, f"{path}.accepted_tokens", "more tokens accepted than drafted")
        expected = expected_verdicts[ci]
        if s.observed != expected:
            yield Violation(rule, f"{path}.observed",
                            f"observed must be {expected!r} for this evidence, not {s.observed!r}")
        elif seen and expected in ("not_applied", "incompatible"):
            yield Violation(rule, path, "acceptance counters for a config that cannot speculate")
        if s.refusal is not None and config.role != "draft":
            yield Violation(rule, f"{path}.refusal", "only a draft config can be refused (a run "
                            "without its baseline is nothing)")


def counters_consistent(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """Counters agree with the trials (``specschema.capability.counter_problems``: accepted
    <= drafted, accepted <= eval_count, trial counters add up to the config's totals), and
    only llama-server reports counters from its own API."""
    rule = "counters_consistent"
    engine = descriptor(submission.engine.name)
    api_allowed = "engine_api" in engine.counter_sources
    for ci, config in enumerate(submission.configs):
        for where, message in counter_problems(config):
            yield Violation(rule, f"configs.{ci}.{where}", message)
        if not api_allowed and reports_api_counters(config):
            yield Violation(rule, f"configs.{ci}.speculation.counters_source",
                            f"{engine.label} reports no counters from its API")



def names_printable(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """No name holds a control, format or invisible character, or mixes Latin with its
    Cyrillic or Greek lookalikes (``ingest.names``; docs/aggregation.md, "Names")."""
    for path, value, kind in name_fields(submission):
        problem = name_problem_of(value, kind)
        if problem is not None:
            yield Violation("names_printable", path, problem)


def submission_id_not_reserved(submission: Submission, ctx: RuleContext) -> Iterator[Violation]:
    """A signed submission's id is not a version-5 (name-based) UUID: those are the imports'
    (``ingest.hardnumbers``: uuid5 of the public file), so no key can take one first."""
    if submission.submission_id.version == IMPORT_UUID_VERSION:
        yield Violation("submission_id_not_reserved", "submission_id",
                        f"version-{IMPORT_UUID_VERSION} UUIDs are reserved for imports; "
                        "a signed submission's id is random (uuid4)")


RULES: tuple[Rule, ...] = (
    configs_match_protocol,
    trials_fit_schedule,
    eval_count_fits_num_predict,
    durations_coherent,
    decode_rate_plausible,
    created_at_recent,
    speculation_coherent,
    counters_consistent,
    names_printable,
    submission_id_not_reserved,
)


def rule_violations(submission: Submission, ctx: RuleContext) -> list[Violation]:
    """Every rule in ``RULES``, one after the other: what ``rules.violations`` returns."""
    found: list[Violation] = []
    for rule in RULES:
        for violation in rule(submission, ctx):
            found.append(violation)
            if len(found) >= MAX_VIOLATIONS:
                return found
    return found
