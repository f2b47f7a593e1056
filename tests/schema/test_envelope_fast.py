"""verify_envelope's fast paths give the same results and errors as the plain definition.

The definition is the code they replaced: ``base64.b64decode(..., validate=True)`` for each
field and ``nacl.signing.VerifyKey(key).verify(pae(...), sig)`` for the signature.
"""

from __future__ import annotations

import base64
import binascii
import copy
import itertools
from typing import Any

import nacl.exceptions
import nacl.signing
from hypothesis import given, settings
from hypothesis import strategies as st

from specschema import envelope
from specschema.envelope import PAYLOAD_TYPE, key_id_of, pae, sign_envelope
from specschema.errors import EnvelopeError, SignatureInvalid, SpecSchemaError
from tests.support.tiers import examples

KEY = nacl.signing.SigningKey(b"\x03" * 32)


def _reference_b64(value: Any, field: str) -> bytes:
    if not isinstance(value, str):
        raise EnvelopeError(f"envelope field {field} must be a base64 string")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise EnvelopeError(f"envelope field {field} is not valid base64") from None


def _reference_verify(data: Any, expected_type: str = PAYLOAD_TYPE) -> envelope.VerifiedEnvelope:
    if not isinstance(data, dict):
        raise EnvelopeError("envelope must be a JSON object")
    unknown = set(data) - {"payloadType", "payload", "signatures"}
    if unknown:
        raise EnvelopeError(f"unknown envelope fields: {', '.join(sorted(unknown))}")
    payload_type = data.get("payloadType")
    if payload_type != expected_type:
        raise EnvelopeError(f"payloadType must be {expected_type!r}, got {payload_type!r}")
    payload = _reference_b64(data.get("payload"), "payload")
    signatures = data.get("signatures")
    if not isinstance(signatures, list) or len(signatures) != 1:
        raise EnvelopeError("envelope must carry exactly one signature")
    entry = signatures[0]
    if not isinstance(entry, dict) or set(entry) - {"keyid", "publicKey", "sig"}:
        raise EnvelopeError("signature entry must have keyid, publicKey and sig only")
    public_key = _reference_b64(entry.get("publicKey"), "signatures[0].publicKey")
    signature = _reference_b64(entry.get("sig"), "signatures[0].sig")
    if len(public_key) != 32:
        raise EnvelopeError("publicKey must be a raw 32-byte Ed25519 key")
    if len(signature) != 64:
        raise EnvelopeError("sig must be a 64-byte Ed25519 signature")
    if entry.get("keyid") != key_id_of(public_key):
        raise EnvelopeError("keyid is not the sha256 of publicKey")
    try:
        nacl.signing.VerifyKey(public_key).verify(pae(payload_type, payload), signature)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError):
        raise SignatureInvalid("signature does not verify over the payload") from None
    return envelope.VerifiedEnvelope(payload, payload_type, key_id_of(public_key), public_key)


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except SpecSchemaError as exc:
        return type(exc).__name__, str(exc)


# --- base64 -------------------------------------------------------------------------------


def test_b64_same_as_definition_for_every_short_string() -> None:
    """Every string of up to 5 symbols of the tricky cases, and of up to 8 of padding ones."""
    short = itertools.chain.from_iterable(
        itertools.product("AQg+/=z \n-_é", repeat=length) for length in range(6)
    )
    longer = itertools.chain.from_iterable(
        itertools.product("AQ=\n", repeat=length) for length in range(6, 9)
    )
    for chars in itertools.chain(short, longer):
        value = "".join(chars)
        assert _outcome(envelope._b64, value, "f") == _outcome(_reference_b64, value, "f"), value


def _odd_b64(raw: bytes, cut: int, pad: str, insert: str, where: int) -> str:
    """Base64 of ``raw`` with some characters cut, padding added and a character inserted."""
    text = base64.b64encode(raw).decode()
    text = text[: len(text) - cut] + pad
    return text[:where] + insert + text[where:]


odd_b64 = st.builds(
    _odd_b64,
    st.binary(max_size=64),
    st.integers(0, 3),
    st.sampled_from(["", "=", "==", "==="]),
    st.sampled_from(["", "=", "\n", " ", "-", "_", "é", "A"]),
    st.integers(0, 90),
)


@settings(max_examples=examples(500), deadline=None)
@given(odd_b64 | st.text(max_size=12) | st.none() | st.integers())
def test_b64_same_as_definition(value: Any) -> None:
    assert _outcome(envelope._b64, value, "f") == _outcome(_reference_b64, value, "f")


# --- whole envelopes ----------------------------------------------------------------------

MUTATIONS = (
    "none payload+= payload-pad sig+= sig-byte pk-other pk-short keyid type extra entry-extra"
    " two-sigs not-dict entry-not-dict payload-int"
).split()
OTHER = nacl.signing.SigningKey(b"\x04" * 32)


def _mutate(env: dict[str, Any], how: str) -> Any:
    entry = env["signatures"][0]
    if how == "payload+=":
        env["payload"] += "="
    elif how == "payload-pad":
        env["payload"] = env["payload"].rstrip("=")
    elif how == "sig+=":
        entry["sig"] += "=="
    elif how == "sig-byte":
        raw = bytearray(base64.b64decode(entry["sig"]))
        raw[7] ^= 1
        entry["sig"] = base64.b64encode(bytes(raw)).decode()
    elif how == "pk-other":
        other = bytes(OTHER.verify_key)
        entry["publicKey"] = base64.b64encode(other).decode()
        entry["keyid"] = key_id_of(other)
    elif how == "pk-short":
        entry["publicKey"] = base64.b64encode(b"\x00" * 31).decode()
    elif how == "keyid":
        entry["keyid"] = entry["keyid"].upper()
    elif how == "type":
        env["payloadType"] = "application/json"
    elif how == "extra":
        env["x"] = 1
    elif how == "entry-extra":
        entry["x"] = 1
    elif how == "two-sigs":
        env["signatures"].append(copy.deepcopy(entry))
    elif how == "not-dict":
        return [env]
    elif how == "entry-not-dict":
        env["signatures"] = ["x"]
    elif how == "payload-int":
        env["payload"] = 5
    return env


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=300), st.sampled_from(MUTATIONS))
def test_verify_envelope_same_as_definition(payload: bytes, how: str) -> None:
    env = _mutate(sign_envelope(payload, KEY), how)
    assert _outcome(envelope.verify_envelope, env) == _outcome(_reference_verify, env)
    assert _outcome(envelope.verify_envelope, env, "other/type") == _outcome(
        _reference_verify, env, "other/type"
    )


def test_parse_envelope_still_returns_four_fields() -> None:
    env = sign_envelope(b"{}", KEY)
    assert envelope.parse_envelope(env) == (
        PAYLOAD_TYPE,
        b"{}",
        bytes(KEY.verify_key),
        base64.b64decode(env["signatures"][0]["sig"]),
    )
