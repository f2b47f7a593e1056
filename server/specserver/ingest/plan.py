"""What a protocol wants of a submission's configs and trials, cached per protocol (pure).

``ingest.rules`` compares each config with its ``ConfigPlan`` (role, models, mechanism,
request options and fields, warm-ups) and each trial with the protocol's schedule (run
position and block by config and trial index). Shipped protocols' plans are cached by
identity and target, so a submission pays for a dict lookup, not for the protocol's
expansion; a protocol that is not shipped (tests make some) is planned each time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from specschema.earlystop import first_round_end, round_one_counts, stopped_by_rule
from specschema.errors import ProtocolError
from specschema.models import Submission, Trial
from specschema.protocol import Protocol
from specschema.protocol_files import all_protocols, get_protocol

# The run parameters besides the target (``Protocol.for_run``: ``draft``, ``configs``), as
# a hashable key: (name, value) pairs in name order.
Others = tuple[tuple[str, str], ...]


@cache
def protocols_by_identity() -> dict[tuple[str, int, str], Protocol]:
    """Shipped protocols by (id, version, sha256); computing a sha256 per request is slow."""
    return {(p.id, p.version, p.sha256): p for p in all_protocols()}  # older versions too


def identity_of(protocol: Protocol) -> tuple[str, int, str]:
    for identity, known in protocols_by_identity().items():
        if known is protocol:
            return identity
    return (protocol.id, protocol.version, protocol.sha256)


@lru_cache(maxsize=256)
def expected_configs(
    identity: tuple[str, int, str], target: str | None, others: Others = ()
) -> dict[str, dict[str, Any]]:
    """What each config of the protocol, as the run made it, must say, by config name
    (cached: pure)."""
    shipped = protocols_by_identity().get(identity) or get_protocol(identity[0])
    proto = shipped.for_run(dict(others))
    return {
        spec.name: {
            "role": spec.role,
            "model": proto.model_for(spec, target),
            "draft_model": spec.draft_model,
            "speculation.mechanism": spec.mechanism,
            "request_options": proto.request_options(spec),
            "request_fields": dict(spec.request_fields),
        }
        for spec in proto.configs
    }


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by value (1 == 1.0), but a boolean is not a number."""
    if type(a) is type(b) and type(a) in (str, int, float, type(None)):
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


# The scalar fields configs_match_protocol compares, in its report order (then
# request_options, request_fields, warmups).
HEAD_FIELDS = ("role", "model", "draft_model", "speculation.mechanism")
NOT_SCHEDULED: dict[int, int] = {}


@dataclass(frozen=True)
class ConfigPlan:
    """What configs_match_protocol wants of one config, in a form quick to compare."""

    head: tuple[Any, ...]  # role, model, draft_model, speculation.mechanism (HEAD_FIELDS)
    head_exact: bool  # == on ``head`` is ``_same`` (every wanted value a str or None)
    request_options: dict[str, Any]
    options_exact: bool  # == plus "no bool sent" is ``_same`` (wanted values str/int/float)
    request_fields: dict[str, Any]
    fields_exact: bool
    max_warmups: int  # Protocol.warmups_for: per block when the protocol warms up each block


@dataclass(frozen=True)
class Plan:
    # None when the protocol has no target and the submission names none: then
    # configs_match_protocol reports only that (nothing to compare the configs with).
    configs: dict[str, ConfigPlan] | None
    positions: dict[str, dict[int, int]]  # config name -> trial index -> run position
    blocks: dict[str, dict[int, int]]  # config name -> trial index -> block number
    # Why the run cannot be planned (its parameters name configs the protocol does not
    # have); None when it can, or when only the target is missing (``configs`` is None).
    problem: str | None = None


def _scalar_exact(values: tuple[Any, ...]) -> bool:
    return all(v is None or type(v) is str for v in values)


def _flat_exact(wanted: dict[str, Any]) -> bool:
    return all(type(v) in (str, int, float) for v in wanted.values())


@cache
def _shipped_identities() -> dict[int, tuple[str, int, str]]:
    """Shipped protocols' identities by ``id()`` (they live as long as the process does)."""
    return {id(p): identity for identity, p in protocols_by_identity().items()}


def plan_for(proto: Protocol, parameters: dict[str, str]) -> Plan:
    target = parameters.get("target") or proto.target
    lacks_target = proto.target is None and "target" not in parameters
    others = tuple(sorted((k, v) for k, v in parameters.items() if k != "target"))
    identity = _shipped_identities().get(id(proto))
    if identity is not None:
        return _shipped_plan(identity, target, lacks_target, others)
    # not a shipped protocol (check_protocol returns only those; tests make others): uncached
    return _build_plan(proto, identity_of(proto), target, lacks_target, others)


@lru_cache(maxsize=256)
def _shipped_plan(identity: tuple[str, int, str], target: str | None,
                  lacks_target: bool, others: Others = ()) -> Plan:
    return _build_plan(protocols_by_identity()[identity], identity, target, lacks_target,
                       others)


def _build_plan(shipped: Protocol, identity: tuple[str, int, str], target: str | None,
                lacks_target: bool, others: Others = ()) -> Plan:
    """``_expected_configs`` and the schedule of the protocol as the run made it
    (``Protocol.for_run``), for ``violations``."""
    try:
        proto = shipped.for_run(dict(others))
    except ProtocolError as exc:
        return Plan(None, {}, {}, problem=exc.message)
    configs: dict[str, ConfigPlan] | None = None
    if not lacks_target:
        configs = {}
        for name, wanted in expected_configs(identity, target, others).items():
            head = tuple(wanted[field] for field in HEAD_FIELDS)
            configs[name] = ConfigPlan(
                head, _scalar_exact(head),
                wanted["request_options"], _flat_exact(wanted["request_options"]),
                wanted["request_fields"], _flat_exact(wanted["request_fields"]),
                proto.warmups_for(name),
            )
    positions: dict[str, dict[int, int]] = {}
    blocks: dict[str, dict[int, int]] = {}
    for pos, ((name, index), block) in enumerate(zip(proto.schedule(), proto.blocks(),
                                                     strict=True)):
        positions.setdefault(name, {})[index] = pos
        blocks.setdefault(name, {})[index] = block
    return Plan(configs, positions, blocks)


def same_flat(actual: dict[str, Any], wanted: dict[str, Any], exact: bool) -> bool:
    """``same_json(actual, wanted)``: when every wanted value is a str, int or float, dict
    equality differs from it only where a bool stands for a number (True == 1)."""
    if exact:
        return actual == wanted and bool not in map(type, actual.values())
    return same_json(actual, wanted)


def stop_problem(protocol: Protocol, submission: Submission) -> str | None:
    """Why the configs the run says it stopped early (the run parameter ``stopped``) are not
    the ones the protocol's rule names by the counters of the first round's trials
    (``specschema.earlystop``); None when they are, or when the rule does not apply. The
    rule is decided at the end of the first round: a run that has no trial past it has
    stopped nothing yet."""
    parameters = submission.protocol.parameters
    if protocol.early_stop is None and "stopped" not in parameters:
        return None
    try:
        run = protocol.for_run({k: v for k, v in parameters.items() if k != "target"})
    except ProtocolError:
        return None  # the plan reports the parameters themselves (configs_need_target)
    end = first_round_end(run)
    if end is None:
        return None
    trials = [(config.name, trial.position, *_counted(trial))
              for config in submission.configs for trial in config.trials]
    decided = any(position >= end for _, position, _, _ in trials)
    named = stopped_by_rule(run, round_one_counts(run, trials)) if decided else ()
    if named == run.stopped:
        return None
    return (f"by the first round's counters the early-stop rule stops "
            f"{', '.join(named) or 'no config'}, not {', '.join(run.stopped) or 'none'}")


def _counted(trial: Trial) -> tuple[int | None, int | None]:
    counters = trial.counters
    return (None, None) if counters is None else (counters.drafted, counters.accepted)
