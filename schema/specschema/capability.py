"""Which speculation mechanisms an engine version can honor, and the verdict (pure).

``submission_verdicts`` is the one rule a client and a server both apply; ``verdict`` is
its core over plain facts, ``counter_problems`` the counters that contradict the trials.

What each engine's versions can honor, and why, is its descriptor's
(``specschema.engines``): Ollama has never had a top-level ``draft_model`` request field
(dropped silently); ``options.draft_num_predict`` exists from v0.30.0 and only does anything
on a model with MTP layers or a Modelfile DRAFT; llama-server speculates as it is launched.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import NamedTuple

from specschema.blocks import timed
from specschema.engines import EngineDescriptor, descriptor, parse_version
from specschema.evidence import n_max_of
from specschema.models import (
    ConfigResult,
    Engine,
    Launch,
    Mechanism,
    Observed,
    Role,
    Runtime,
    Submission,
    Trial,
    TrialCounters,
)
from specschema.stability import baseline_stability

__all__ = ["CounterProblem", "TOTALS_OVER_DRAFTED", "api_counters_refused", "counter_problems",
           "decide", "engine_can_honor", "facts", "facts_of", "launch_speculates",
           "never_drafted", "parse_version", "reports_api_counters",
           "submission_counter_problems", "submission_verdicts", "verdict"]


def engine_can_honor(mechanism: Mechanism, engine_version: str,
                     engine: str | None = "ollama") -> bool | None:
    """True/False when known; None when the version cannot tell. ``engine``: the wire's
    ``engine.name`` (None, as in a v1 submission: Ollama)."""
    return descriptor(engine).can_honor(mechanism, engine_version)


def verdict(
    *,
    requested: bool,
    can_honor: bool | None,
    counters_seen: bool,
    speculated: bool = False,
    baseline_speculated: bool = False,
    synthetic: bool = False,
    runtime: Runtime | None = None,
    launched_without_speculation: bool = False,
    unstable: bool = False,
    refused: bool = False,
) -> Observed:
    """The speculation verdict of one config: the one rule, on both sides.

    For a draft config, in this order:
    incompatible: the engine could not run the config as asked (``refused``: a vocabulary
    llama.cpp refuses, a missing draft file, speculation refused at start); nothing of it
    was measured;
    synthetic: synthetic acceptance was switched on (this config's or the baseline's engine
    start): the output is not model output and the timings are fake;
    cannot_compare: the MLX runner, where speculation cannot be switched off per request (its
    baseline's counters are that, so MLX is named rather than baseline_speculated);
    baseline_speculated: the baseline itself speculated (counters or a launch with
    --spec-type), so no comparison against it measures speculation;
    unstable: the baseline's repeated blocks say the machine changed under the run in a
    way the design does not correct (``specschema.stability``), so no
    ratio against that baseline measures speculation (nor, for the noise floor, its absence);
    not_applied: the engine cannot honor the mechanism, or every engine start seen for this
    config ran without speculation (``launched_without_speculation``: also llama-server
    started with a draft whose trials drafted nothing);
    confirmed: acceptance counters were seen;
    unknown: the engine version could not be read and nothing was seen;
    not_observed: it could have speculated, but there is no evidence either way.

    The baseline config (``requested`` false) is synthetic, cannot_compare on MLX,
    baseline_speculated (its own ``counters_seen`` or ``speculated``), else not_applied. The
    keywords after ``counters_seen`` are v2 evidence; their defaults give the v1 rule.
    """
    if not requested:
        if synthetic:
            return "synthetic"
        if runtime == "mlx":
            return "cannot_compare"
        if counters_seen or speculated:
            return "baseline_speculated"
        return "not_applied"
    if refused:
        return "incompatible"
    if synthetic:
        return "synthetic"
    if runtime == "mlx":
        return "cannot_compare"
    if baseline_speculated:
        return "baseline_speculated"
    if unstable:
        return "unstable"
    if can_honor is False:
        return "not_applied"
    if counters_seen:
        return "confirmed"
    if launched_without_speculation:
        return "not_applied"
    if can_honor is None:
        return "unknown"
    return "not_observed"


# --- the evidence, read from the wire models -------------------------------------------------


class Facts(NamedTuple):
    """What one config's evidence says, as the verdict needs it (a NamedTuple: it is built
    per config on the server's ingest fast path)."""

    counters_seen: bool  # acceptance counters: the config's totals or any trial's
    spec_launch: bool  # an engine start with --spec-type other than none
    synthetic: bool  # an engine start with synthetic acceptance
    launched_plain: bool  # engine starts were seen and none of them speculated
    refused: bool = False  # the engine could not run the config (SpeculationEvidence.refusal)
    trials: int = 0  # how many trials the config has
    trials_with_counters: int = 0  # how many of them carry drafted > 0


# A Trial's counters from its __dict__ (where pydantic keeps field values): an attribute
# read goes through BaseModel.__getattr__ and costs several times more.
_COUNTERS = itemgetter("counters")


def launch_speculates(launch: Launch) -> bool:
    return launch.spec_type not in (None, "none")


def facts(
    *, totals_seen: bool, trials: Sequence[Trial], launches: Sequence[Launch],
    refused: bool = False,
) -> Facts:
    drafting = sum(1 for c in map(_COUNTERS, map(vars, trials))
                   if c is not None and c.drafted > 0)
    counters_seen = totals_seen or drafting > 0
    if not launches:  # every v1 submission, and v2 ones without a log
        return Facts(counters_seen, False, False, False, refused, len(trials), drafting)
    spec_launch = any(launch_speculates(launch) for launch in launches)
    return Facts(
        counters_seen=counters_seen,
        spec_launch=spec_launch,
        synthetic=any(launch.synthetic_flags for launch in launches),
        launched_plain=not spec_launch,
        refused=refused,
        trials=len(trials),
        trials_with_counters=drafting,
    )


def facts_of(config: ConfigResult) -> Facts:
    s = config.speculation
    return facts(totals_seen=s.drafted_tokens is not None, trials=config.trials,
                 launches=s.launches, refused=s.refusal is not None)


def never_drafted(engine: EngineDescriptor, own: Facts) -> bool:
    """An engine whose API counts every request that drafted (llama-server's
    ``timings.draft_n``, ``EngineDescriptor.counts_every_draft``): a config whose engine
    starts speculated but none of whose trials drafted a token did not speculate at all
    (llama.cpp served without its draft)."""
    return (engine.counts_every_draft and own.spec_launch and own.trials > 0
            and own.trials_with_counters == 0 and not own.counters_seen)


def decide(
    *,
    role: Role,
    mechanism: Mechanism,
    engine: Engine,
    own: Facts,
    baseline: Facts | None,
    unstable: bool = False,
) -> Observed:
    """``verdict`` for one config from its facts and the baseline's (None: no baseline);
    ``unstable``: the baseline's blocks say the machine changed under the run
    (``stability.baseline_stability``)."""
    requested = role == "draft"
    base_speculated = baseline is not None and (baseline.counters_seen or baseline.spec_launch)
    described = descriptor(engine.name)
    return verdict(
        requested=requested,
        can_honor=described.can_honor(mechanism, engine.version),
        counters_seen=own.counters_seen,
        speculated=own.spec_launch,
        baseline_speculated=requested and base_speculated,
        synthetic=own.synthetic or (requested and baseline is not None and baseline.synthetic),
        # MLX only rules out a comparison where the engine cannot switch speculation off
        runtime=engine.runtime if described.mlx_always_speculates else None,
        launched_without_speculation=own.launched_plain or never_drafted(described, own),
        unstable=requested and unstable,
        refused=requested and own.refused,
    )


def submission_verdicts(submission: Submission) -> list[Observed]:
    """The verdict each config must carry, in config order."""
    all_facts = [facts_of(c) for c in submission.configs]
    baseline = next(
        (f for c, f in zip(submission.configs, all_facts, strict=True) if c.role == "baseline"),
        None,
    )
    stability = baseline_stability(
        next((c for c in submission.configs if c.role == "baseline"), None),
        timed(submission.configs))
    unstable = stability is not None and stability.unstable
    return [
        decide(role=c.role, mechanism=c.speculation.mechanism, engine=submission.engine,
               own=f, baseline=None if c.role == "baseline" else baseline, unstable=unstable)
        for c, f in zip(submission.configs, all_facts, strict=True)
    ]


def counter_problems(config: ConfigResult) -> list[tuple[str, str]]:
    """Counters that contradict the trials, as (path under the config, what is wrong).

    Per trial: accepted <= drafted, and accepted <= eval_count (every accepted draft token
    is a generated token); the drafts cut by the answer's end are some of those not
    accepted, at most one round's depth. Per config: when trials carry counters, the
    config's totals are their sums (so a total cannot claim more than its trials).
    """
    found: list[tuple[str, str]] = []
    depth = n_max_of(config.request_options,
                     [launch.model_dump() for launch in config.speculation.launches])
    drafted_sum = accepted_sum = 0
    with_counters = 0
    for ti, trial in enumerate(config.trials):
        c = trial.counters
        if c is None:
            continue
        with_counters += 1
        drafted_sum += c.drafted
        accepted_sum += c.accepted
        path = f"trials.{ti}.counters.accepted"
        if c.accepted > c.drafted:
            found.append((path, f"{c.accepted} accepted > {c.drafted} drafted"))
        if c.accepted > trial.eval_count:
            found.append((path, f"{c.accepted} accepted > {trial.eval_count} generated "
                                "(eval_count)"))
        found.extend((f"trials.{ti}.counters.{where}", message)
                     for where, message in _round_problems(c))
        found.extend((f"trials.{ti}.counters.drafted_past_end", message)
                     for message in _past_end_problems(c, depth))
    s = config.speculation
    if s.drafted_tokens is not None and s.accepted_tokens is not None:
        # (accepted <= drafted for the totals is the server's speculation_coherent rule)
        if with_counters and (s.drafted_tokens, s.accepted_tokens) != (drafted_sum,
                                                                       accepted_sum):
            found.append(("speculation.drafted_tokens",
                          f"the config's {s.drafted_tokens} drafted / {s.accepted_tokens} "
                          f"accepted are not its trials' sums ({drafted_sum} / {accepted_sum})"))
    elif with_counters:
        found.append(("speculation.drafted_tokens",
                      "trials carry counters but the config's totals are missing"))
    return found


def _round_problems(c: TrialCounters) -> list[tuple[str, str]]:
    """Rounds and per-position counts against the totals: every round accepts a prefix of
    its draft, so the per-position counts never grow with the position, the first is at
    most the rounds, they sum to the accepted tokens, and a round drafts at most as many
    tokens as there are positions."""
    found: list[tuple[str, str]] = []
    per = c.accepted_per_position
    if per is not None:
        if sum(per) != c.accepted:
            found.append(("accepted_per_position", f"the positions sum to {sum(per)}, not "
                                                   f"the {c.accepted} accepted"))
        if any(later > earlier for earlier, later in zip(per, per[1:], strict=False)):
            found.append(("accepted_per_position", "a later position accepted more often "
                                                   "than an earlier one"))
    if c.rounds is not None:
        if per and per[0] > c.rounds:
            found.append(("accepted_per_position", f"position 0 accepted {per[0]} times in "
                                                   f"{c.rounds} rounds"))
        if c.drafted and not c.rounds:
            found.append(("rounds", f"{c.drafted} drafted in no round"))
        if per and c.drafted > c.rounds * len(per):
            found.append(("rounds", f"{c.drafted} drafted in {c.rounds} rounds of at most "
                                    f"{len(per)}"))
    return found


def _past_end_problems(c: TrialCounters, depth: int | None) -> list[str]:
    """Drafts the answer's end cut were never accepted, and only the round the answer
    ended in can hold them: at most its depth."""
    past = c.drafted_past_end
    if past is None:
        return []
    found: list[str] = []
    if past > c.drafted - c.accepted:
        found.append(f"{past} drafted past the end, but only {c.drafted - c.accepted} of "
                     f"the {c.drafted} drafted were not accepted")
    if depth is not None and past > depth:
        found.append(f"{past} drafted past the end: more than one round's {depth}")
    return found


def reports_api_counters(config: ConfigResult) -> bool:
    """Whether a config carries counters from the engine's own API (llama-server only)."""
    if config.speculation.counters_source == "engine_api":
        return True
    return any(t.counters is not None and t.counters.source == "engine_api"
               for t in config.trials)


TOTALS_OVER_DRAFTED = "more tokens accepted than drafted"


def api_counters_refused(engine_name: str | None) -> str | None:
    """Why this engine cannot carry counters from its own API (None: it can)."""
    described = descriptor(engine_name)
    if "engine_api" in described.counter_sources:
        return None
    return f"{described.label} reports no counters from its API"


class CounterProblem(NamedTuple):
    rule: str  # the server's rule name (specserver.ingest.rules.RULES)
    path: str  # where in the submission
    message: str


def submission_counter_problems(submission: Submission) -> list[CounterProblem]:
    """Every counter the shared rules call impossible, named by the server's rule: what a
    client checks before it prints a verdict or asks for consent (the server refuses the
    same submission, 422, with the same rule, path and message)."""
    found: list[CounterProblem] = []
    api_refused = api_counters_refused(submission.engine.name)
    for ci, config in enumerate(submission.configs):
        s = config.speculation
        if (s.drafted_tokens is not None and s.accepted_tokens is not None
                and s.accepted_tokens > s.drafted_tokens):
            found.append(CounterProblem("speculation_coherent",
                                        f"configs.{ci}.speculation.accepted_tokens",
                                        TOTALS_OVER_DRAFTED))
        for where, message in counter_problems(config):
            found.append(CounterProblem("counters_consistent", f"configs.{ci}.{where}",
                                        message))
        if api_refused is not None and reports_api_counters(config):
            found.append(CounterProblem("counters_consistent",
                                        f"configs.{ci}.speculation.counters_source",
                                        api_refused))
    return found

