"""The checks a submission passes before it is stored: pure functions, no I/O.

Order (each step's status in docs/server.md):
    1. body size                                  413   (ingest_api, while reading)
    2. envelope form, payloadType / signature     400 / 401
    3. strict JSON / schema                       400 / 422
    4. protocol known, hash matching              422
    5. consistency rules (``ingest.rules``)       422 naming the rule
    6. banned key / rate limits                   403 / 429   (ingest_api)
    7. idempotency by submission id               200 / 409   (store)

The consistency rules (``ingest.rules``: one function per rule, one pass over the
submission) come back as a list; ``check_consistency`` reports every violation (up to a
limit), the first one in the message.

What this module imports stays light (the schema, pydantic, ICU through ``ingest.names``):
a check worker process runs it and never loads SQLAlchemy or DuckDB.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from specschema.envelope import PAYLOAD_TYPE, verify_envelope
from specschema.errors import EnvelopeError, SpecSchemaError
from specschema.models import Submission
from specschema.payload import parse_submission
from specschema.protocol import Protocol
from specschema.protocol_files import all_protocols, shipped_protocols
from specschema.summary import ConfigSummary, summarize
from specserver.errors import Invalid, Malformed, SpecServerError, signed_refusal
from specserver.ingest.plan import protocols_by_identity
from specserver.ingest.plausibility import implausible_reason
from specserver.ingest.rulebook import MAX_VIOLATIONS
from specserver.ingest.rules import RuleContext, Violation, violations


class ConsistencyError(Invalid):
    code = "inconsistent"


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
    """The envelope's JSON (not the payload's): UTF-8, no duplicate keys, bounded nesting.

    Fast path (specschema.strictjson's reasoning): bytes that are exactly orjson's compact
    serialization of what they parse to have no duplicate key (a dict re-serialized has
    none) and parse to the same value with the definition below, which decides (and
    words) everything else. What clients send is such bytes (``envelope_bytes``)."""
    try:
        value = orjson.loads(body)
        if orjson.dumps(value) == body:
            return value
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass
    return envelope_json_definition(body)


def envelope_json_definition(body: bytes) -> Any:
    """What ``parse_envelope_json`` decides, and its messages: the stdlib parser with a
    refusing hook (its slow path)."""
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


def check_protocol(submission: Submission) -> Protocol:
    ref = submission.protocol
    protocol = protocols_by_identity().get((ref.id, ref.version, ref.sha256))
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
    try:
        return _check_verified(body, verified.payload, verified.key_id, now, max_age,
                               max_future_skew)
    except (SpecServerError, SpecSchemaError) as exc:  # refused by a rule: logged
        raise signed_refusal(exc, verified.key_id) from None


def _check_verified(body: bytes, payload: bytes, key_id: str, now: datetime,
                    max_age: timedelta, max_future_skew: timedelta) -> Checked:
    """Checks 3-5, on a payload whose signature verified."""
    submission = parse_submission(payload)  # PayloadParseError 400, SchemaError 422
    if b"\\u0000" in payload:  # strict JSON can carry U+0000 only as this escape
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
        key_id=key_id,
        body=body,
        body_sha256=hashlib.sha256(body).hexdigest(),
        summaries=server_summaries(submission),
        quarantine=implausible_reason(submission),
    )

