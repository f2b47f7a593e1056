"""DSSE signing: round trips, single-byte flips, wrong keys, envelope form."""

import base64
import json

import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specschema import (
    PAYLOAD_TYPE,
    EnvelopeError,
    SignatureInvalid,
    SpecSchemaError,
    key_id_of,
    pae,
    sign_envelope,
    verify_envelope,
)

KEY = nacl.signing.SigningKey(b"\x01" * 32)
OTHER = nacl.signing.SigningKey(b"\x02" * 32)


def test_pae_matches_the_dsse_spec() -> None:
    # The DSSE spec's own example: PAE("http://example.com/HelloWorld", "hello world")
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_key_id_is_sha256_of_raw_public_key() -> None:
    envelope = sign_envelope(b"{}", KEY)
    raw = bytes(KEY.verify_key)
    assert envelope["signatures"][0]["keyid"] == key_id_of(raw)
    assert base64.b64decode(envelope["signatures"][0]["publicKey"]) == raw


@given(st.binary(max_size=512))
def test_sign_verify_round_trip(payload: bytes) -> None:
    verified = verify_envelope(sign_envelope(payload, KEY))
    assert verified.payload == payload
    assert verified.key_id == key_id_of(bytes(KEY.verify_key))


def _flip(data: bytes, index: int, bit: int) -> bytes:
    mutable = bytearray(data)
    mutable[index] ^= 1 << bit
    return bytes(mutable)


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=256), st.data())
def test_flipping_any_payload_byte_fails(payload: bytes, data: st.DataObject) -> None:
    envelope = sign_envelope(payload, KEY)
    index = data.draw(st.integers(0, len(payload) - 1))
    bit = data.draw(st.integers(0, 7))
    envelope["payload"] = base64.b64encode(_flip(payload, index, bit)).decode()
    with pytest.raises(SignatureInvalid):
        verify_envelope(envelope)


@settings(max_examples=200)
@given(st.data())
def test_flipping_any_signature_byte_fails(data: st.DataObject) -> None:
    envelope = sign_envelope(b'{"a":1}', KEY)
    sig = base64.b64decode(envelope["signatures"][0]["sig"])
    index = data.draw(st.integers(0, len(sig) - 1))
    bit = data.draw(st.integers(0, 7))
    envelope["signatures"][0]["sig"] = base64.b64encode(_flip(sig, index, bit)).decode()
    with pytest.raises(SignatureInvalid):
        verify_envelope(envelope)


@settings(max_examples=100)
@given(st.data())
def test_flipping_any_payload_type_byte_fails(data: st.DataObject) -> None:
    envelope = sign_envelope(b'{"a":1}', KEY)
    raw_type = PAYLOAD_TYPE.encode()
    index = data.draw(st.integers(0, len(raw_type) - 1))
    bit = data.draw(st.integers(0, 6))  # stay in ASCII
    flipped = _flip(raw_type, index, bit).decode()
    envelope["payloadType"] = flipped
    with pytest.raises(EnvelopeError):
        verify_envelope(envelope)
    # Even a verifier that expects the flipped type refuses: PAE binds the type.
    with pytest.raises(SignatureInvalid):
        verify_envelope(envelope, expected_type=flipped)


def test_another_key_fails() -> None:
    envelope = sign_envelope(b'{"a":1}', KEY)
    forged = sign_envelope(b'{"a":1}', OTHER)
    # A valid signature by another key, presented under the first key's identity.
    envelope["signatures"][0]["sig"] = forged["signatures"][0]["sig"]
    with pytest.raises(SignatureInvalid):
        verify_envelope(envelope)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda e: e.pop("payload"), "payload"),
        (lambda e: e.update(extra=1), "unknown envelope fields"),
        (lambda e: e.update(payload="not base64!"), "not valid base64"),
        (lambda e: e.update(signatures=[]), "exactly one signature"),
        (lambda e: e["signatures"][0].update(keyid="0" * 64), "keyid"),
        (lambda e: e["signatures"][0].update(publicKey="AAAA"), "32-byte"),
    ],
)
def test_envelope_form_errors(mutate: object, message: str) -> None:
    envelope = json.loads(json.dumps(sign_envelope(b"{}", KEY)))
    mutate(envelope)  # type: ignore[operator]
    with pytest.raises(EnvelopeError, match=message):
        verify_envelope(envelope)


def test_non_object_envelope() -> None:
    with pytest.raises(SpecSchemaError):
        verify_envelope([1, 2])
