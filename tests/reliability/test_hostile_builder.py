"""The hostile cases break exactly the layer they claim to, checked with specschema alone.

Without this, a case meant to test the consistency rules could be refused earlier (say by
the schema) and the server test would pass for the wrong reason.
"""

from __future__ import annotations

import json

import pytest

from specschema import (
    EnvelopeError,
    PayloadParseError,
    PayloadSchemaError,
    SignatureInvalid,
    find_protocol,
    loads_strict,
    parse_submission,
    verify_envelope,
)
from tests.reliability.hostile import BODY_LIMIT, valid_envelope
from tests.reliability.hostile_cases import HostileCase, hostile_cases

CASES = hostile_cases()


def _body(case: HostileCase) -> bytes:
    return b"".join(case.stream()) if case.stream else case.content()


def _stage_reached(body: bytes) -> str:
    """The first layer that refuses ``body``, or 'accepted' if specschema accepts it."""
    if len(body) > BODY_LIMIT:
        return "size"
    try:
        envelope = loads_strict(body)
        verified = verify_envelope(envelope)
    except (PayloadParseError, EnvelopeError):
        return "envelope"
    except SignatureInvalid:
        return "signature"
    try:
        submission = parse_submission(verified.payload)
    except PayloadParseError:
        return "json"
    except PayloadSchemaError:
        return "schema"
    ref = submission.protocol
    if find_protocol(ref.id, ref.version, ref.sha256) is None:
        return "protocol"
    return "consistency"


def test_at_least_thirty_cases_cover_every_stage() -> None:
    assert len(CASES) >= 30
    assert {c.stage for c in CASES} == {
        "size",
        "envelope",
        "signature",
        "json",
        "schema",
        "protocol",
        "consistency",
    }
    expected = {
        "size": 413,
        "envelope": 400,
        "signature": 401,
        "json": 400,
        "schema": 422,
        "protocol": 422,
        "consistency": 422,
    }
    assert all(c.expected == expected[c.stage] for c in CASES)


def test_the_control_passes_every_layer() -> None:
    assert _stage_reached(valid_envelope(1)) == "consistency"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_breaks_its_own_layer(case: HostileCase) -> None:
    assert _stage_reached(_body(case)) == case.stage


def test_bodies_without_content_length_are_really_streamed() -> None:
    streamed = [c for c in CASES if c.stream]
    assert len(streamed) >= 2
    for case in streamed:
        assert case.stream is not None
        chunks = list(case.stream())
        assert len(chunks) > 2 and sum(map(len, chunks)) > BODY_LIMIT


def test_consistency_cases_change_one_trial_field_only() -> None:
    """Spot check: the eval_count case differs from its control in the trial only."""
    case = next(c for c in CASES if c.name == "eval_count_above_num_predict")
    envelope = json.loads(case.body)
    payload = parse_submission(verify_envelope(envelope).payload)
    assert payload.configs[0].trials[0].eval_count > 200
    assert all(t.eval_count == 200 for t in payload.configs[0].trials[1:])
