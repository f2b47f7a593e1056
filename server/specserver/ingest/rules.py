"""The consistency rules (step 5 of ``ingest.checks``): one function per rule, one pass.

``RULES`` names each rule and says what it holds (docs/server.md, "Consistency rules").
``violations`` walks the submission once: the submission-wide rules first, then config by
config, where each rule's function checks that config (its trials included) against what
the protocol wants, read once per submission (``_Whole``) and once per config
(``_Config``). Nearly every submission breaks none, so the functions read plain values
(a model's ``__dict__`` through itemgetter, not attributes), compare them with a plan
cached per protocol, and format a path or a message only for a violation they found.

The report lists the violations rule by rule in ``RULES`` order, each rule's in the order
its definition walks the submission (config by config, trial by trial; a rule's later
part, such as the warm-ups of durations_coherent, after its earlier part for all configs).
The definition, one generator per rule as first written, is kept in
tests/server/ingest/consistency_reference.py; tests/server/ingest/test_ingest_fast.py holds
the two to the same lists (Hypothesis).

Pure and light: it imports the schema and ``ingest.names`` (ICU), never the store, so a
check worker process loads neither SQLAlchemy nor DuckDB.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from operator import itemgetter
from typing import Any

from specschema.capability import (
    TOTALS_OVER_DRAFTED,
    api_counters_refused,
    counter_problems,
    engine_can_honor,
    reports_api_counters,
    submission_verdicts,
)
from specschema.engines import descriptor
from specschema.models import ConfigResult, Mechanism, Submission
from specschema.protocol import Protocol
from specserver.ingest.namefields import (
    lookalike_fields,
    name_fields,
    name_problem_of,
    name_values,
)
from specserver.ingest.plan import (
    HEAD_FIELDS,
    NOT_SCHEDULED,
    plan_for,
    same_flat,
    same_json,
    stop_problem,
)
from specserver.ingest.rulebook import (
    DONE_REASONS,
    DURATION_TOLERANCE_FRACTION,
    DURATION_TOLERANCE_NS,
    IMPORT_UUID_VERSION,
    MAX_DECODE_TPS,
    MAX_VIOLATIONS,
    MIN_DECODE_TPS,
    RATE_MIN_TOKENS,
    RULE_NAMES,
    WALL_TOLERANCE_S,
    RuleName,
)


@dataclass(frozen=True)
class Violation:
    rule: str
    path: str
    message: str


@dataclass(frozen=True)
class RuleContext:
    protocol: Protocol
    now: datetime
    max_age: timedelta
    max_future_skew: timedelta


# Violations as the pass finds them, by rule; reported in ``RULES`` order (``_in_order``).
_Found = dict[RuleName, list[Violation]]


def _add(found: _Found, rule: RuleName, path: str, message: str) -> None:
    found.setdefault(rule, []).append(Violation(rule, path, message))


def _in_order(found: _Found) -> list[Violation]:
    if not found:
        return []
    ordered = [v for rule in RULE_NAMES for v in found.get(rule, ())]
    return ordered[:MAX_VIOLATIONS]


def _num_predict(options: dict[str, Any]) -> int | None:
    """The limit eval_count_fits_num_predict checks against, None when it checks none."""
    limit = options.get("num_predict")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return None
    return limit


@lru_cache(maxsize=1024)
def _can_honor(mechanism: Mechanism, engine_version: str, engine: str) -> bool | None:
    return engine_can_honor(mechanism, engine_version, engine)


# --- the submission-wide rules ------------------------------------------------------------


def created_at_recent(found: _Found, submission: Submission, ctx: RuleContext) -> None:
    created = submission.created_at
    if created > ctx.now + ctx.max_future_skew:
        _add(found, "created_at_recent", "created_at",
             f"created_at {created.isoformat()} is in the future")
    elif created < ctx.now - ctx.max_age:
        _add(found, "created_at_recent", "created_at",
             f"created_at {created.isoformat()} is older than {ctx.max_age.days} days")


def submission_id_not_reserved(found: _Found, submission: Submission) -> None:
    if submission.submission_id.version == IMPORT_UUID_VERSION:
        _add(found, "submission_id_not_reserved", "submission_id",
             f"version-{IMPORT_UUID_VERSION} UUIDs are reserved for imports; "
             "a signed submission's id is random (uuid4)")


def names_printable(found: _Found, submission: Submission) -> None:
    """Printable ASCII has no problem (``name_problem``'s own shortcut), so one test on all
    names joined decides nearly every submission (bench/names_check.py); ``name_fields``
    gives the paths when it does not ... except the lookalikes of known chips and models,
    which can be ASCII (``AppIe M2``): those few names are compared with the known
    skeletons every time."""
    joined = "".join(name_values(submission))
    printable = joined.isascii() and joined.isprintable()
    for path, value, kind in (lookalike_fields(submission) if printable
                              else name_fields(submission)):
        problem = name_problem_of(value, kind)
        if problem is not None:
            _add(found, "names_printable", path, problem)


# --- the per-config rules -----------------------------------------------------------------

# Fields in one C call on a model's ``__dict__`` (where pydantic keeps field values):
# reading them as attributes costs ~140 ns each, through BaseModel's ``__getattr__`` hook.
_config_fields = itemgetter(
    "name", "role", "model", "draft_model", "request_options", "request_fields", "warmups",
    "trials", "speculation",
)
_speculation_fields = itemgetter(
    "requested", "mechanism", "engine_can_honor", "observed", "drafted_tokens",
    "accepted_tokens", "counters_source", "refusal",
)
_trial_numbers = itemgetter(
    "index", "position", "eval_count", "eval_duration_ns", "total_duration_ns",
    "load_duration_ns", "prompt_eval_duration_ns", "wall_s", "ttft_s", "done_reason", "block",
)
_WALL_FACTOR = 1 - DURATION_TOLERANCE_FRACTION


class _Whole:
    """What the per-config rules read of the whole submission, computed once per pass,
    and what they carry from config to config."""

    __slots__ = ("api_refused", "complete", "engine_name", "per_config", "plan", "proto",
                 "seen", "verdicts", "version", "warmup_violations")

    def __init__(self, submission: Submission, ctx: RuleContext) -> None:
        self.proto = ctx.protocol
        self.plan = plan_for(ctx.protocol, submission.protocol.parameters)
        self.complete = submission.complete
        self.per_config = ctx.protocol.trials_per_config
        engine = submission.engine
        self.version = engine.version
        self.engine_name = engine.name
        self.verdicts = submission_verdicts(submission)
        self.api_refused = api_counters_refused(engine.name)
        self.seen: set[str] = set()  # configs_match_protocol: the protocol's configs sent
        # durations_coherent reports the warm-ups after the trials of every config
        self.warmup_violations: list[Violation] = []


class _Config:
    """One config's fields as the per-config rules read them (``__dict__`` values; each
    trial's numbers as one tuple, ``_trial_numbers``)."""

    __slots__ = ("accepted", "ci", "claimed_can_honor", "config", "draft_model", "drafted",
                 "expected", "fields", "mechanism", "model", "name", "observed", "options",
                 "refusal", "requested", "role", "source", "trials", "warmups")

    def __init__(self, ci: int, config: ConfigResult, expected: str) -> None:
        self.ci = ci
        self.config = config
        (self.name, self.role, self.model, self.draft_model, self.options, self.fields,
         self.warmups, trials, spec) = _config_fields(vars(config))
        (self.requested, self.mechanism, self.claimed_can_honor, self.observed, self.drafted,
         self.accepted, self.source, self.refusal) = _speculation_fields(vars(spec))
        self.expected = expected  # the verdict submission_verdicts derives for it
        self.trials: list[tuple[Any, ...]] = [_trial_numbers(vars(t)) for t in trials]


def configs_match_protocol(found: _Found, whole: _Whole, c: _Config) -> None:
    """A config of the protocol, once, sent as it says (a config it does not know is
    compared with nothing; the other rules still check it)."""
    wanted_configs = whole.plan.configs
    if wanted_configs is None:
        return  # reported once by configs_need_target
    want = wanted_configs.get(c.name)
    ci, name = c.ci, c.name
    if want is None:
        _add(found, "configs_match_protocol", f"configs.{ci}.name",
             f"config {name!r} is not in {whole.proto.id}")
        return
    if name in whole.seen:
        _add(found, "configs_match_protocol", f"configs.{ci}.name",
             f"config {name!r} appears twice")
    whole.seen.add(name)
    head = (c.role, c.model, c.draft_model, c.mechanism)
    if not want.head_exact or head != want.head:
        for field, actual, value in zip(HEAD_FIELDS, head, want.head, strict=True):
            if not same_json(actual, value):
                _add(found, "configs_match_protocol", f"configs.{ci}.{field}",
                     f"{field} of {name} must be {value!r}")
    if not same_flat(c.options, want.request_options, want.options_exact):
        _add(found, "configs_match_protocol", f"configs.{ci}.request_options",
             f"request_options of {name} must be {want.request_options!r}")
    if not same_flat(c.fields, want.request_fields, want.fields_exact):
        _add(found, "configs_match_protocol", f"configs.{ci}.request_fields",
             f"request_fields of {name} must be {want.request_fields!r}")
    if len(c.warmups) > want.max_warmups:
        _add(found, "configs_match_protocol", f"configs.{ci}.warmups",
             "more warmups than the protocol runs")


def configs_need_target(found: _Found, whole: _Whole) -> None:
    """configs_match_protocol, before the configs: a protocol without a target of its own
    needs the submission to name one."""
    if whole.plan.configs is None:
        _add(found, "configs_match_protocol", "protocol.parameters",
             whole.plan.problem or f"protocol {whole.proto.id} needs a target")


def configs_complete(found: _Found, whole: _Whole) -> None:
    """configs_match_protocol, after the configs: a complete submission has every config."""
    wanted_configs = whole.plan.configs
    if wanted_configs is not None and whole.complete and len(whole.seen) != len(wanted_configs):
        missing = [name for name in wanted_configs if name not in whole.seen]
        _add(found, "configs_match_protocol", "configs",
             f"a complete submission lacks {', '.join(missing)}")


def trials_fit_schedule(found: _Found, whole: _Whole, c: _Config) -> None:
    """The count, then the blocks (a trial's block, when given, is the schedule's), then the
    indices, then each trial's position."""
    ci, name, trials = c.ci, c.name, c.trials
    count = len(trials)
    positions = whole.plan.positions.get(name, NOT_SCHEDULED)
    planned = len(positions) or whole.per_config
    # A config the engine refused (incompatible) runs no trial; the others run them all.
    refused_whole = count == 0 and c.expected == "incompatible"
    if count > planned or (whole.complete and count != planned and not refused_whole):
        _add(found, "trials_fit_schedule", f"configs.{ci}.trials",
             f"{name} has {count} trials; the protocol runs {planned}")
    blocks = whole.plan.blocks.get(name, NOT_SCHEDULED)
    with_block = 0
    for ti, numbers in enumerate(trials):
        block = numbers[10]
        if block is None:
            continue
        with_block += 1
        index = numbers[0]
        wanted_block = blocks.get(index)
        if wanted_block is not None and block != wanted_block:
            _add(found, "trials_fit_schedule", f"configs.{ci}.trials.{ti}.block",
                 f"trial {index} of {name} runs in block {wanted_block}")
    if with_block and with_block != count:
        _add(found, "trials_fit_schedule", f"configs.{ci}.trials",
             "either every trial carries its block or none does")
    misplaced: list[Violation] = []  # reported after the indices
    in_order = True
    for ti, numbers in enumerate(trials):
        index, position = numbers[0], numbers[1]
        if index != ti:
            in_order = False
        scheduled = positions.get(index)
        if scheduled is not None and position != scheduled:
            misplaced.append(Violation("trials_fit_schedule",
                                       f"configs.{ci}.trials.{ti}.position",
                                       f"trial {index} of {name} runs at position {scheduled}"))
    if not in_order and sorted(numbers[0] for numbers in trials) != list(range(count)):
        _add(found, "trials_fit_schedule", f"configs.{ci}.trials",
             "trial indices must be 0..n-1, once")
    if misplaced:
        found.setdefault("trials_fit_schedule", []).extend(misplaced)


def eval_count_fits_num_predict(found: _Found, c: _Config) -> None:
    """No limit sent: nothing to check here (configs_match_protocol reports the options)."""
    limit = _num_predict(c.options)
    if limit is None:
        return
    ci = c.ci
    for ti, (_index, _position, eval_count, _eval_ns, _total_ns, _load_ns, _prompt_ns,
             _wall_s, _ttft_s, done, _block) in enumerate(c.trials):
        if eval_count > limit:
            _add(found, "eval_count_fits_num_predict", f"configs.{ci}.trials.{ti}.eval_count",
                 f"eval_count {eval_count} exceeds num_predict {limit}")
        if done is not None and done not in DONE_REASONS:
            _add(found, "eval_count_fits_num_predict", f"configs.{ci}.trials.{ti}.done_reason",
                 f"done_reason {done!r} is not stop or length")
        if done == "length" and eval_count < limit - 1:
            _add(found, "eval_count_fits_num_predict", f"configs.{ci}.trials.{ti}.done_reason",
                 f"done_reason length with eval_count {eval_count} < {limit}")


def durations_coherent(found: _Found, whole: _Whole, c: _Config) -> None:
    """Each trial's durations now; the warm-ups' are held for after every config's trials."""
    ci = c.ci
    for ti, (_index, _position, eval_count, eval_ns, total_ns, load_ns, prompt_ns, wall_s,
             ttft_s, _done, _block) in enumerate(c.trials):
        slack = DURATION_TOLERANCE_NS + int(total_ns * DURATION_TOLERANCE_FRACTION)
        if eval_ns > total_ns:
            _add(found, "durations_coherent", f"configs.{ci}.trials.{ti}.eval_duration_ns",
                 "eval_duration exceeds total")
        if load_ns + (prompt_ns or 0) + eval_ns > total_ns + slack:
            _add(found, "durations_coherent", f"configs.{ci}.trials.{ti}.total_duration_ns",
                 "load + prompt_eval + eval durations exceed total_duration")
        if wall_s < total_ns / 1e9 * _WALL_FACTOR - WALL_TOLERANCE_S:
            _add(found, "durations_coherent", f"configs.{ci}.trials.{ti}.wall_s",
                 f"wall_s {wall_s} is shorter than total_duration")
        if ttft_s is not None and ttft_s > wall_s:
            _add(found, "durations_coherent", f"configs.{ci}.trials.{ti}.ttft_s",
                 "time to first token exceeds wall time")
        if eval_count > 0 and eval_ns == 0:
            _add(found, "durations_coherent", f"configs.{ci}.trials.{ti}.eval_duration_ns",
                 "tokens decoded in zero time")
    for wi, w in enumerate(c.warmups):
        if w.total_duration_ns is not None and w.load_duration_ns is not None and (
            w.load_duration_ns > w.total_duration_ns
        ):
            whole.warmup_violations.append(Violation(
                "durations_coherent", f"configs.{ci}.warmups.{wi}", "load exceeds total"))


def decode_rate_plausible(found: _Found, c: _Config) -> None:
    """Rates over a few tokens, or in zero time, are not checked (durations_coherent
    reports the zero time)."""
    ci = c.ci
    for ti, (_index, _position, eval_count, eval_ns, _total_ns, _load_ns, _prompt_ns,
             _wall_s, _ttft_s, _done, _block) in enumerate(c.trials):
        if eval_count == 0:
            _add(found, "decode_rate_plausible", f"configs.{ci}.trials.{ti}.eval_count",
                 "the trial decoded no tokens")
        elif eval_count >= RATE_MIN_TOKENS and eval_ns != 0:
            rate = eval_count / eval_ns * 1e9
            if not MIN_DECODE_TPS <= rate <= MAX_DECODE_TPS:
                _add(found, "decode_rate_plausible", f"configs.{ci}.trials.{ti}.eval_duration_ns",
                     f"decode rate {rate:.4g} tok/s is outside "
                     f"[{MIN_DECODE_TPS}, {MAX_DECODE_TPS:g}]")


def speculation_coherent(found: _Found, whole: _Whole, c: _Config) -> None:
    ci, role = c.ci, c.role
    if c.requested != (role == "draft"):
        _add(found, "speculation_coherent", f"configs.{ci}.speculation.requested",
             "only draft configs request speculation")
    can_honor = _can_honor(c.mechanism, whole.version, whole.engine_name)
    if c.claimed_can_honor != can_honor:
        _add(found, "speculation_coherent", f"configs.{ci}.speculation.engine_can_honor",
             f"{c.mechanism} on {descriptor(whole.engine_name).label} {whole.version}: "
             f"engine_can_honor is {can_honor}")
    counters = (c.drafted, c.accepted, c.source)
    counters_seen = None not in counters
    if not counters_seen and counters != (None, None, None):
        _add(found, "speculation_coherent", f"configs.{ci}.speculation",
             "drafted, accepted and counters_source come together")
    if counters_seen and (c.accepted or 0) > (c.drafted or 0):
        _add(found, "speculation_coherent", f"configs.{ci}.speculation.accepted_tokens",
             TOTALS_OVER_DRAFTED)
    expected = c.expected
    if c.observed != expected:
        _add(found, "speculation_coherent", f"configs.{ci}.speculation.observed",
             f"observed must be {expected!r} for this evidence, not {c.observed!r}")
    elif counters_seen and expected in ("not_applied", "incompatible"):
        _add(found, "speculation_coherent", f"configs.{ci}.speculation",
             "acceptance counters for a config that cannot speculate")
    if c.refusal is not None and role != "draft":
        _add(found, "speculation_coherent", f"configs.{ci}.speculation.refusal",
             "only a draft config can be refused (a run without its baseline is nothing)")


def stops_follow_rule(found: _Found, whole: _Whole, submission: Submission) -> None:
    """trials_fit_schedule, after the configs: the configs the run stopped early are the
    ones the protocol's early-stop rule names (``ingest.plan.stop_problem``)."""
    problem = stop_problem(whole.proto, submission)
    if problem is not None:
        _add(found, "trials_fit_schedule", "protocol.parameters.stopped", problem)


def counters_consistent(found: _Found, whole: _Whole, c: _Config) -> None:
    for where, message in counter_problems(c.config):
        _add(found, "counters_consistent", f"configs.{c.ci}.{where}", message)
    if whole.api_refused is not None and reports_api_counters(c.config):
        _add(found, "counters_consistent", f"configs.{c.ci}.speculation.counters_source",
             whole.api_refused)


# --- the pass -----------------------------------------------------------------------------


def violations(submission: Submission, ctx: RuleContext) -> list[Violation]:
    """Every rule's violations in ``RULES`` order, at most ``MAX_VIOLATIONS``."""
    found: _Found = {}
    created_at_recent(found, submission, ctx)
    submission_id_not_reserved(found, submission)
    names_printable(found, submission)
    whole = _Whole(submission, ctx)
    configs_need_target(found, whole)
    for ci, config in enumerate(submission.configs):
        c = _Config(ci, config, whole.verdicts[ci])
        configs_match_protocol(found, whole, c)
        speculation_coherent(found, whole, c)
        counters_consistent(found, whole, c)
        trials_fit_schedule(found, whole, c)
        eval_count_fits_num_predict(found, c)
        durations_coherent(found, whole, c)
        decode_rate_plausible(found, c)
    configs_complete(found, whole)
    stops_follow_rule(found, whole, submission)
    if whole.warmup_violations:
        found.setdefault("durations_coherent", []).extend(whole.warmup_violations)
    return _in_order(found)
