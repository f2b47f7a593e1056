"""The checks a submission passes before it is stored: pure functions, no I/O.

Order (each step's status in docs/server.md):
    1. body size                                  413   (ingest_api, while reading)
    2. envelope form, payloadType / signature     400 / 401
    3. strict JSON / schema                       400 / 422
    4. protocol known, hash matching              422
    5. consistency rules (``RULES``)              422 naming the rule
    6. banned key / rate limits                   403 / 429   (ingest_api)
    7. idempotency by submission id               200 / 409   (store)

The consistency rules (``RULES``: name and what each holds) are checked in one pass,
``violations``; ``check_consistency`` reports every violation (up to a limit), the first
one in the message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache, lru_cache
from operator import itemgetter
from typing import Any, Literal, get_args

from specschema.capability import (
    TOTALS_OVER_DRAFTED,
    api_counters_refused,
    counter_problems,
    engine_can_honor,
    reports_api_counters,
    submission_verdicts,
)
from specschema.engines import descriptor
from specschema.envelope import PAYLOAD_TYPE, verify_envelope
from specschema.errors import EnvelopeError
from specschema.models import Mechanism, Submission
from specschema.payload import parse_submission
from specschema.protocol import Protocol, all_protocols, get_protocol, shipped_protocols
from specschema.summary import ConfigSummary, summarize
from specserver.errors import Invalid, Malformed
from specserver.ingest.names import name_problem
from specserver.ingest.plausibility import implausible_reason

# --- documented bounds (docs/server.md, "Consistency rules") ------------------------------

# Decode speed is bounded by memory bandwidth / bytes read per token. The fastest consumer
# GPUs move ~1.8 TB/s and the smallest chat models weigh ~0.3 GB, i.e. ~6,000 tok/s before
# speculation; accepted drafts can multiply that a few times at most. Anything above
# 10,000 tok/s, or below 0.01 tok/s (200 tokens in 5.5 hours), is not a measurement.
MAX_DECODE_TPS = 10_000.0
MIN_DECODE_TPS = 0.01
# Rates over a handful of tokens are noise (one token's eval_duration can be microseconds).
RATE_MIN_TOKENS = 16
# Engine durations come from two processes (server and runner): allow this much overlap.
DURATION_TOLERANCE_NS = 5_000_000
DURATION_TOLERANCE_FRACTION = 0.01
# The client's wall clock should cover the engine's total_duration, within this tolerance.
WALL_TOLERANCE_S = 0.05
DONE_REASONS = ("stop", "length")
MAX_VIOLATIONS = 20
# Imports' submission ids are uuid5 (name-based, of the imported file); signed ones may not be.
IMPORT_UUID_VERSION = 5


class ConsistencyError(Invalid):
    code = "inconsistent"


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


@dataclass(frozen=True)
class Checked:
    """A submission that passed steps 2-5, with everything the store needs."""

    submission: Submission
    submission_id: str
    key_id: str
    body: bytes
    body_sha256: str
    summaries: list[ConfigSummary]
    # Why it is stored quarantined (hidden until a maintainer releases it), or None
    # (ingest.plausibility: a baseline faster than the hardware can decode).
    quarantine: str | None = None


# --- step 2: envelope ---------------------------------------------------------------------


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise EnvelopeError(f"duplicate key {key!r} in the envelope")
        result[key] = value
    return result


def parse_envelope_json(body: bytes) -> Any:
    """The envelope's JSON (not the payload's): UTF-8, no duplicate keys, bounded nesting."""
    try:
        text = body.decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except EnvelopeError as exc:
        raise Malformed(exc.message, code="bad_envelope") from None
    except UnicodeDecodeError as exc:
        raise Malformed(f"body is not UTF-8 (byte {exc.start})", code="bad_envelope") from None
    except json.JSONDecodeError as exc:
        raise Malformed(
            f"body is not a JSON envelope: {exc.msg} at line {exc.lineno} column {exc.colno}",
            code="bad_envelope",
        ) from None
    except (RecursionError, ValueError) as exc:
        raise Malformed(f"body is not a JSON envelope: {exc}", code="bad_envelope") from None


# --- step 4: protocol ---------------------------------------------------------------------


@cache
def _protocols_by_identity() -> dict[tuple[str, int, str], Protocol]:
    """Shipped protocols by (id, version, sha256); computing a sha256 per request is slow."""
    return {(p.id, p.version, p.sha256): p for p in all_protocols()}  # older versions too


def check_protocol(submission: Submission) -> Protocol:
    ref = submission.protocol
    protocol = _protocols_by_identity().get((ref.id, ref.version, ref.sha256))
    if protocol is not None:
        return protocol
    known = shipped_protocols()
    details = {
        "protocol": {"id": ref.id, "version": ref.version, "sha256": ref.sha256},
        "known": [{"id": p.id, "version": p.version, "sha256": p.sha256}
                  for p in all_protocols()],
    }
    if ref.id not in known:
        message = f"unknown protocol {ref.id!r}"
    else:
        message = f"protocol {ref.id} v{ref.version} with sha256 {ref.sha256[:12]}... is not known"
    raise Invalid(message, details, code="unknown_protocol")


# --- step 5: consistency rules ------------------------------------------------------------
#
# One pass over the submission checks every rule and records what each refuses. Nearly every
# submission breaks none, so the pass reads plain values (a model's ``__dict__`` through
# itemgetter, not attributes), compares them with a plan cached per protocol, and formats a
# path or a message only for a violation it found. The report lists the violations rule by
# rule in ``RULES`` order, each rule's in the order its definition walks the submission
# (config by config, trial by trial; a rule's later part, such as the warm-ups of
# durations_coherent, after its earlier part for all configs). The definition, one
# generator per rule as first written, is kept in tests/server/ingest/consistency_reference.py;
# tests/server/ingest/test_ingest_fast.py holds the two to the same lists (Hypothesis).

RuleName = Literal[
    "configs_match_protocol",
    "trials_fit_schedule",
    "eval_count_fits_num_predict",
    "durations_coherent",
    "decode_rate_plausible",
    "created_at_recent",
    "speculation_coherent",
    "counters_consistent",
    "names_printable",
    "submission_id_not_reserved",
]
# The rules in report order (docs/server.md, "Consistency rules", says what each refuses).
RULE_NAMES: tuple[RuleName, ...] = get_args(RuleName)
RULES: dict[RuleName, str] = {
    "configs_match_protocol":
        "each config is one of the protocol's, sent exactly as the protocol says",
    "trials_fit_schedule":
        "trial counts and indices per config, and positions in the protocol's run order",
    "eval_count_fits_num_predict":
        "eval_count <= num_predict; done_reason is stop or length, and length means the limit",
    "durations_coherent":
        "engine durations fit inside total_duration; the client's wall time covers it",
    "decode_rate_plausible":
        "decode tok/s inside [MIN_DECODE_TPS, MAX_DECODE_TPS]; every trial decodes something",
    "created_at_recent":
        "created_at is neither in the future (beyond the skew) nor older than the max age",
    "speculation_coherent":
        "the evidence agrees with what the engine can honor and with its own counters; each "
        "verdict is the one specschema.capability.submission_verdicts derives",
    "counters_consistent":
        "counters agree with the trials (specschema.capability.counter_problems: accepted <= "
        "drafted, accepted <= eval_count, trial counters add up to the config's totals), and "
        "only llama-server reports counters from its own API",
    "names_printable":
        "no name holds a control, format or invisible character or one outside UTS #39's "
        "recommended set, mixes scripts or digit systems, renders like other Latin text, or "
        "is a lookalike of a known chip or model (ingest.names; docs/aggregation.md, "
        "\"Names\")",
    "submission_id_not_reserved":
        "a signed submission's id is not a version-5 (name-based) UUID: those are the "
        "imports' (ingest.hardnumbers: uuid5 of the public file), so no key can take one first",
}

_WALL_FACTOR = 1 - DURATION_TOLERANCE_FRACTION
# Fields in one C call on a model's ``__dict__`` (where pydantic keeps field values):
# reading them as attributes costs ~140 ns each, through BaseModel's ``__getattr__`` hook.
_config_fields = itemgetter(
    "name", "role", "model", "draft_model", "request_options", "request_fields", "warmups",
    "trials", "speculation",
)
_speculation_fields = itemgetter(
    "requested", "mechanism", "engine_can_honor", "observed", "drafted_tokens",
    "accepted_tokens", "counters_source",
)
_trial_numbers = itemgetter(
    "index", "position", "eval_count", "eval_duration_ns", "total_duration_ns",
    "load_duration_ns", "prompt_eval_duration_ns", "wall_s", "ttft_s", "done_reason",
)
# The scalar fields configs_match_protocol compares, in its report order (then
# request_options, request_fields, warmups).
_HEAD_FIELDS = ("role", "model", "draft_model", "speculation.mechanism")
_NOT_SCHEDULED: dict[int, int] = {}


# Violations as the pass finds them, by rule; reported in ``RULES`` order (``_in_order``).
_Found = dict[RuleName, list[Violation]]


def _add(found: _Found, rule: RuleName, path: str, message: str) -> None:
    found.setdefault(rule, []).append(Violation(rule, path, message))


def _add_later(found: _Found, rule: RuleName, later: list[Violation]) -> None:
    """Violations held back (a rule's later part), after those the rule has so far."""
    found.setdefault(rule, []).extend(later)


def _in_order(found: _Found) -> list[Violation]:
    if not found:
        return []
    ordered = [v for rule in RULE_NAMES for v in found.get(rule, ())]
    return ordered[:MAX_VIOLATIONS]


def _identity(protocol: Protocol) -> tuple[str, int, str]:
    for identity, known in _protocols_by_identity().items():
        if known is protocol:
            return identity
    return (protocol.id, protocol.version, protocol.sha256)


@lru_cache(maxsize=256)
def _expected_configs(
    identity: tuple[str, int, str], target: str | None
) -> dict[str, dict[str, Any]]:
    """What each config of the protocol must say, by config name (cached: pure)."""
    proto = _protocols_by_identity().get(identity) or get_protocol(identity[0])
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


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by value (1 == 1.0), but a boolean is not a number."""
    if type(a) is type(b) and type(a) in (str, int, float, type(None)):
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


@dataclass(frozen=True)
class _ConfigPlan:
    """What configs_match_protocol wants of one config, in a form quick to compare."""

    head: tuple[Any, ...]  # role, model, draft_model, speculation.mechanism (_HEAD_FIELDS)
    head_exact: bool  # == on ``head`` is ``_same`` (every wanted value a str or None)
    request_options: dict[str, Any]
    options_exact: bool  # == plus "no bool sent" is ``_same`` (wanted values str/int/float)
    request_fields: dict[str, Any]
    fields_exact: bool
    max_warmups: int  # Protocol.warmups_for: per block when the protocol warms up each block


@dataclass(frozen=True)
class _Plan:
    # None when the protocol has no target and the submission names none: then
    # configs_match_protocol reports only that (nothing to compare the configs with).
    configs: dict[str, _ConfigPlan] | None
    positions: dict[str, dict[int, int]]  # config name -> trial index -> run position
    blocks: dict[str, dict[int, int]]  # config name -> trial index -> block number


def _scalar_exact(values: tuple[Any, ...]) -> bool:
    return all(v is None or type(v) is str for v in values)


def _flat_exact(wanted: dict[str, Any]) -> bool:
    return all(type(v) in (str, int, float) for v in wanted.values())


@cache
def _shipped_identities() -> dict[int, tuple[str, int, str]]:
    """Shipped protocols' identities by ``id()`` (they live as long as the process does)."""
    return {id(p): identity for identity, p in _protocols_by_identity().items()}


def _plan_for(proto: Protocol, parameters: dict[str, str]) -> _Plan:
    target = parameters.get("target") or proto.target
    lacks_target = proto.target is None and "target" not in parameters
    identity = _shipped_identities().get(id(proto))
    if identity is not None:
        return _shipped_plan(identity, target, lacks_target)
    # not a shipped protocol (check_protocol returns only those; tests make others): uncached
    return _build_plan(proto, _identity(proto), target, lacks_target)


@lru_cache(maxsize=256)
def _shipped_plan(identity: tuple[str, int, str], target: str | None,
                  lacks_target: bool) -> _Plan:
    return _build_plan(_protocols_by_identity()[identity], identity, target, lacks_target)


def _build_plan(proto: Protocol, identity: tuple[str, int, str], target: str | None,
                lacks_target: bool) -> _Plan:
    """``_expected_configs`` and the protocol's schedule, for ``violations``."""
    configs: dict[str, _ConfigPlan] | None = None
    if not lacks_target:
        configs = {}
        for name, wanted in _expected_configs(identity, target).items():
            head = tuple(wanted[field] for field in _HEAD_FIELDS)
            configs[name] = _ConfigPlan(
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
    return _Plan(configs, positions, blocks)


def _same_flat(actual: dict[str, Any], wanted: dict[str, Any], exact: bool) -> bool:
    """``_same(actual, wanted)``: when every wanted value is a str, int or float, dict
    equality differs from it only where a bool stands for a number (True == 1)."""
    if exact:
        return actual == wanted and bool not in map(type, actual.values())
    return _same(actual, wanted)


def _num_predict(options: dict[str, Any]) -> int | None:
    """The limit eval_count_fits_num_predict checks against, None when it checks none."""
    limit = options.get("num_predict")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return None
    return limit


@lru_cache(maxsize=1024)
def _can_honor(mechanism: Mechanism, engine_version: str, engine: str) -> bool | None:
    return engine_can_honor(mechanism, engine_version, engine)


def name_fields(submission: Submission) -> Iterator[tuple[str, str, str]]:
    """Every free-text name of a submission as (path, value, kind): kind is "chip" for a
    hardware name (also compared with the known chips' lookalikes), "model" for a model
    name (compared with the known models'), "note" for the note, else "name". Config
    names, models and options are the protocol's (configs_match_protocol) but are listed
    too: a name is refused for its characters before it is compared."""
    fp = submission.fingerprint
    cpu = fp.cpu
    for path, value, kind in (
        ("fingerprint.chip", fp.chip, "chip"), ("fingerprint.machine_model", fp.machine_model,
                                                "name"),
        ("fingerprint.cpu.brand_raw", cpu.brand_raw, "name"),
        ("fingerprint.cpu.name", cpu.name, "chip"), ("fingerprint.cpu.arch", cpu.arch, "name"),
        ("fingerprint.os.version", fp.os.version, "name"),
        ("fingerprint.os.arch", fp.os.arch, "name"),
        ("fingerprint.virtualization", fp.virtualization, "name"),
        ("engine.backend", submission.engine.backend, "name"),
        ("engine.build", submission.engine.build, "name"),
        ("client.name", submission.client.name, "name"), ("note", submission.note, "note"),
    ):
        if value is not None:
            yield path, value, kind
    for gi, gpu in enumerate(fp.gpus):
        for field, value, kind in (("name_raw", gpu.name_raw, "name"), ("name", gpu.name, "chip"),
                                   ("driver", gpu.driver, "name"),
                                   ("metal_family", gpu.metal_family, "name")):
            if value is not None:
                yield f"fingerprint.gpus.{gi}.{field}", value, kind
    for mi, model in enumerate(submission.models):
        for field, value, kind in (("name", model.name, "model"),
                                   ("quantization", model.quantization, "name"),
                                   ("parameter_size", model.parameter_size, "name"),
                                   ("family", model.family, "name")):
            if value is not None:
                yield f"models.{mi}.{field}", value, kind
    for key, value in submission.protocol.parameters.items():
        yield f"protocol.parameters.{key}", key, "name"
        yield f"protocol.parameters.{key}", value, "name"
    for ci, config in enumerate(submission.configs):
        yield f"configs.{ci}.name", config.name, "name"
        yield f"configs.{ci}.model", config.model, "model"
        if config.draft_model is not None:
            yield f"configs.{ci}.draft_model", config.draft_model, "model"
        for li, loaded in enumerate(config.speculation.models_loaded):
            yield f"configs.{ci}.speculation.models_loaded.{li}", loaded, "name"


def lookalike_fields(submission: Submission) -> Iterator[tuple[str, str, str]]:
    """The "chip" and "model" entries of ``name_fields`` (the names compared with the known
    ones even when printable ASCII); tests/server/ingest/test_ingest_fast.py holds them to
    ``name_fields``."""
    fp = submission.fingerprint
    if fp.chip is not None:
        yield "fingerprint.chip", fp.chip, "chip"
    if fp.cpu.name is not None:
        yield "fingerprint.cpu.name", fp.cpu.name, "chip"
    for gi, gpu in enumerate(fp.gpus):
        if gpu.name is not None:
            yield f"fingerprint.gpus.{gi}.name", gpu.name, "chip"
    for mi, model in enumerate(submission.models):
        yield f"models.{mi}.name", model.name, "model"
    for ci, config in enumerate(submission.configs):
        yield f"configs.{ci}.model", config.model, "model"
        if config.draft_model is not None:
            yield f"configs.{ci}.draft_model", config.draft_model, "model"


def name_values(submission: Submission) -> list[str]:
    """The values of ``name_fields``, read from the models' ``__dict__`` (no generator, no
    attribute hook): what ``violations`` tests first, walking ``name_fields`` only when a
    name is not printable ASCII. tests/server/ingest/test_ingest_fast.py holds the two to the same
    values."""
    d = vars(submission)
    fp = vars(d["fingerprint"])
    cpu = vars(fp["cpu"])
    os_info = vars(fp["os"])
    found = [fp["chip"], fp["machine_model"], cpu["brand_raw"], cpu["name"], cpu["arch"],
             os_info["version"], os_info["arch"], fp["virtualization"],
             vars(d["engine"])["backend"], vars(d["engine"])["build"], vars(d["client"])["name"],
             d["note"]]
    for gpu in fp["gpus"]:
        g = vars(gpu)
        found += (g["name_raw"], g["name"], g["driver"], g["metal_family"])
    for model in d["models"]:
        m = vars(model)
        found += (m["name"], m["quantization"], m["parameter_size"], m["family"])
    parameters = vars(d["protocol"])["parameters"]
    found += parameters.keys()
    found += parameters.values()
    for config in d["configs"]:
        c = vars(config)
        found += (c["name"], c["model"], c["draft_model"])
        found += vars(c["speculation"])["models_loaded"]
    return [v for v in found if v is not None]


def _name_problem(value: str, kind: str) -> str | None:
    return name_problem(value, note=kind == "note", chip=kind == "chip", model=kind == "model")


def violations(submission: Submission, ctx: RuleContext) -> list[Violation]:
    """Every rule's violations in ``RULES`` order, at most ``MAX_VIOLATIONS``."""
    found: _Found = {}

    # created_at_recent
    created = submission.created_at
    if created > ctx.now + ctx.max_future_skew:
        _add(found, "created_at_recent", "created_at",
             f"created_at {created.isoformat()} is in the future")
    elif created < ctx.now - ctx.max_age:
        _add(found, "created_at_recent", "created_at",
             f"created_at {created.isoformat()} is older than {ctx.max_age.days} days")

    # submission_id_not_reserved
    if submission.submission_id.version == IMPORT_UUID_VERSION:
        _add(found, "submission_id_not_reserved", "submission_id",
             f"version-{IMPORT_UUID_VERSION} UUIDs are reserved for imports; "
             "a signed submission's id is random (uuid4)")

    # names_printable: printable ASCII has no problem (``name_problem``'s own shortcut), so
    # one test on all names joined decides nearly every submission (bench/names_check.py);
    # ``name_fields`` gives the paths when it does not
    # ... except the lookalikes of known chips and models, which can be ASCII (``AppIe M2``):
    # those few names are compared with the known skeletons every time.
    joined = "".join(name_values(submission))
    printable = joined.isascii() and joined.isprintable()
    for path, value, kind in (lookalike_fields(submission) if printable
                              else name_fields(submission)):
        problem = _name_problem(value, kind)
        if problem is not None:
            _add(found, "names_printable", path, problem)

    # configs_match_protocol: the target
    proto = ctx.protocol
    plan = _plan_for(proto, submission.protocol.parameters)
    wanted_configs = plan.configs
    if wanted_configs is None:
        _add(found, "configs_match_protocol", "protocol.parameters",
             f"protocol {proto.id} needs a target")

    complete = submission.complete
    per_config = proto.trials_per_config
    version = submission.engine.version
    expected_verdicts = submission_verdicts(submission)
    engine_name = submission.engine.name
    api_refused = api_counters_refused(engine_name)
    seen: set[str] = set()
    warmup_violations: list[Violation] = []  # durations_coherent reports them after the trials
    for ci, config in enumerate(submission.configs):
        name, role, model, draft_model, options, fields, warmups, trials, spec = (
            _config_fields(vars(config)))
        requested, mechanism, claimed_can_honor, observed, drafted, accepted, source = (
            _speculation_fields(vars(spec))
        )

        # configs_match_protocol: a config of the protocol, once, sent as it says (a config
        # it does not know is compared with nothing; the other rules still check it)
        want = None if wanted_configs is None else wanted_configs.get(name)
        if want is None:
            if wanted_configs is not None:
                _add(found, "configs_match_protocol", f"configs.{ci}.name",
                     f"config {name!r} is not in {proto.id}")
        else:
            if name in seen:
                _add(found, "configs_match_protocol", f"configs.{ci}.name",
                     f"config {name!r} appears twice")
            seen.add(name)
            head = (role, model, draft_model, mechanism)
            if not want.head_exact or head != want.head:
                for field, actual, value in zip(_HEAD_FIELDS, head, want.head, strict=True):
                    if not _same(actual, value):
                        _add(found, "configs_match_protocol", f"configs.{ci}.{field}",
                             f"{field} of {name} must be {value!r}")
            if not _same_flat(options, want.request_options, want.options_exact):
                _add(found, "configs_match_protocol", f"configs.{ci}.request_options",
                     f"request_options of {name} must be {want.request_options!r}")
            if not _same_flat(fields, want.request_fields, want.fields_exact):
                _add(found, "configs_match_protocol", f"configs.{ci}.request_fields",
                     f"request_fields of {name} must be {want.request_fields!r}")
            if len(warmups) > want.max_warmups:
                _add(found, "configs_match_protocol", f"configs.{ci}.warmups",
                     "more warmups than the protocol runs")

        # durations_coherent: warm-ups
        for wi, w in enumerate(warmups):
            if w.total_duration_ns is not None and w.load_duration_ns is not None and (
                w.load_duration_ns > w.total_duration_ns
            ):
                warmup_violations.append(Violation("durations_coherent",
                                                   f"configs.{ci}.warmups.{wi}",
                                                   "load exceeds total"))

        # speculation_coherent
        if requested != (role == "draft"):
            _add(found, "speculation_coherent", f"configs.{ci}.speculation.requested",
                 "only draft configs request speculation")
        can_honor = _can_honor(mechanism, version, engine_name)
        if claimed_can_honor != can_honor:
            _add(found, "speculation_coherent", f"configs.{ci}.speculation.engine_can_honor",
                 f"{mechanism} on {descriptor(engine_name).label} {version}: "
                 f"engine_can_honor is {can_honor}")
        counters = (drafted, accepted, source)
        counters_seen = None not in counters
        if not counters_seen and counters != (None, None, None):
            _add(found, "speculation_coherent", f"configs.{ci}.speculation",
                 "drafted, accepted and counters_source come together")
        if counters_seen and (accepted or 0) > (drafted or 0):
            _add(found, "speculation_coherent", f"configs.{ci}.speculation.accepted_tokens",
                 TOTALS_OVER_DRAFTED)
        expected = expected_verdicts[ci]
        if observed != expected:
            _add(found, "speculation_coherent", f"configs.{ci}.speculation.observed",
                 f"observed must be {expected!r} for this evidence, not {observed!r}")
        elif counters_seen and expected in ("not_applied", "incompatible"):
            _add(found, "speculation_coherent", f"configs.{ci}.speculation",
                 "acceptance counters for a config that cannot speculate")
        if spec.refusal is not None and role != "draft":
            _add(found, "speculation_coherent", f"configs.{ci}.speculation.refusal",
                 "only a draft config can be refused (a run without its baseline is nothing)")

        # counters_consistent
        for where, message in counter_problems(config):
            _add(found, "counters_consistent", f"configs.{ci}.{where}", message)
        if api_refused is not None and reports_api_counters(config):
            _add(found, "counters_consistent", f"configs.{ci}.speculation.counters_source",
                 api_refused)

        # trials_fit_schedule: the count, then the indices, then each trial's position
        # (and block: a trial's block, when given, is the schedule's)
        count = len(trials)
        positions = plan.positions.get(name, _NOT_SCHEDULED)
        planned = len(positions) or per_config
        # A config the engine refused (incompatible) runs no trial; the others run them all.
        refused_whole = count == 0 and expected == "incompatible"
        if count > planned or (complete and count != planned and not refused_whole):
            _add(found, "trials_fit_schedule", f"configs.{ci}.trials",
                 f"{name} has {count} trials; the protocol runs {planned}")
        blocks = plan.blocks.get(name, _NOT_SCHEDULED)
        with_block = 0
        for ti, fields_of_trial in enumerate(map(vars, trials)):
            block = fields_of_trial["block"]
            if block is None:
                continue
            with_block += 1
            index = fields_of_trial["index"]
            wanted_block = blocks.get(index)
            if wanted_block is not None and block != wanted_block:
                _add(found, "trials_fit_schedule", f"configs.{ci}.trials.{ti}.block",
                     f"trial {index} of {name} runs in block {wanted_block}")
        if with_block and with_block != count:
            _add(found, "trials_fit_schedule", f"configs.{ci}.trials",
                 "either every trial carries its block or none does")
        misplaced: list[Violation] = []
        in_order = True
        limit = _num_predict(options)
        for ti, (index, position, eval_count, eval_ns, total_ns, load_ns, prompt_ns, wall_s,
                 ttft_s, done) in enumerate(
            map(_trial_numbers, map(vars, trials))
        ):
            # trials_fit_schedule
            if index != ti:
                in_order = False
            scheduled = positions.get(index)
            if scheduled is not None and position != scheduled:
                misplaced.append(Violation("trials_fit_schedule",
                                           f"configs.{ci}.trials.{ti}.position",
                                           f"trial {index} of {name} runs at position "
                                           f"{scheduled}"))

            # eval_count_fits_num_predict (no limit sent: configs_match_protocol reports it)
            if limit is not None:
                if eval_count > limit:
                    _add(found, "eval_count_fits_num_predict",
                         f"configs.{ci}.trials.{ti}.eval_count",
                         f"eval_count {eval_count} exceeds num_predict {limit}")
                if done is not None and done not in DONE_REASONS:
                    _add(found, "eval_count_fits_num_predict",
                         f"configs.{ci}.trials.{ti}.done_reason",
                         f"done_reason {done!r} is not stop or length")
                if done == "length" and eval_count < limit - 1:
                    _add(found, "eval_count_fits_num_predict",
                         f"configs.{ci}.trials.{ti}.done_reason",
                         f"done_reason length with eval_count {eval_count} < {limit}")

            # durations_coherent
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

            # decode_rate_plausible (rates over a few tokens, or zero time, are not checked)
            if eval_count == 0:
                _add(found, "decode_rate_plausible", f"configs.{ci}.trials.{ti}.eval_count",
                     "the trial decoded no tokens")
            elif eval_count >= RATE_MIN_TOKENS and eval_ns != 0:
                rate = eval_count / eval_ns * 1e9
                if not MIN_DECODE_TPS <= rate <= MAX_DECODE_TPS:
                    _add(found, "decode_rate_plausible",
                         f"configs.{ci}.trials.{ti}.eval_duration_ns",
                         f"decode rate {rate:.4g} tok/s is outside "
                         f"[{MIN_DECODE_TPS}, {MAX_DECODE_TPS:g}]")

        if not in_order and sorted(t.index for t in trials) != list(range(count)):
            _add(found, "trials_fit_schedule", f"configs.{ci}.trials",
                 "trial indices must be 0..n-1, once")
        if misplaced:
            _add_later(found, "trials_fit_schedule", misplaced)

    # configs_match_protocol: a complete submission has every config
    if wanted_configs is not None and complete and len(seen) != len(wanted_configs):
        missing = [name for name in wanted_configs if name not in seen]
        _add(found, "configs_match_protocol", "configs",
             f"a complete submission lacks {', '.join(missing)}")
    if warmup_violations:
        _add_later(found, "durations_coherent", warmup_violations)
    return _in_order(found)


def nul_characters(value: Any, path: str = "") -> Iterator[Violation]:
    """Every string (or key) holding U+0000: PostgreSQL cannot store it, so no store takes
    it (added by the reliability tests: on PostgreSQL it was an endless 503)."""
    if isinstance(value, str):
        if "\x00" in value:
            yield Violation("strings_storable", path or "$", "strings must not contain U+0000")
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                yield Violation("strings_storable", where, "keys must not contain U+0000")
            yield from nul_characters(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from nul_characters(item, f"{path}.{index}")



def check_consistency(submission: Submission, ctx: RuleContext) -> None:
    found = violations(submission, ctx)
    if found:
        first = found[0]
        raise ConsistencyError(
            f"{first.rule}: {first.path}: {first.message}",
            [{"rule": v.rule, "path": v.path, "message": v.message} for v in found],
        )


def server_summaries(submission: Submission) -> list[ConfigSummary]:
    try:
        return summarize(submission)
    except ValueError as exc:  # e.g. a zero baseline median; the rules should prevent it
        raise ConsistencyError(f"summary: {exc}", [{"rule": "summary", "path": "configs",
                                                    "message": str(exc)}]) from None


# --- steps 2-5 together -------------------------------------------------------------------


def check_submission(
    body: bytes, *, now: datetime, max_age: timedelta, max_future_skew: timedelta
) -> Checked:
    """Run checks 2-5 on a body that passed the size limit; raise the first failure."""
    envelope = parse_envelope_json(body)
    verified = verify_envelope(envelope, PAYLOAD_TYPE)  # EnvelopeError 400, SignatureInvalid 401
    submission = parse_submission(verified.payload)  # PayloadParseError 400, SchemaError 422
    if b"\\u0000" in verified.payload:  # strict JSON can carry U+0000 only as this escape
        found = list(nul_characters(submission.model_dump(mode="json")))
        if found:
            raise ConsistencyError(f"strings_storable: {found[0].path}: {found[0].message}",
                                   [{"rule": v.rule, "path": v.path, "message": v.message}
                                    for v in found[:MAX_VIOLATIONS]])
    protocol = check_protocol(submission)
    check_consistency(submission, RuleContext(protocol, now, max_age, max_future_skew))
    return Checked(
        submission=submission,
        submission_id=str(submission.submission_id),
        key_id=verified.key_id,
        body=body,
        body_sha256=hashlib.sha256(body).hexdigest(),
        summaries=server_summaries(submission),
        quarantine=implausible_reason(submission),
    )

