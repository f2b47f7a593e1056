"""DSSE envelopes signed with Ed25519: one implementation for client and server.

DSSE (https://github.com/secure-systems-lab/dsse) signs PAE(payloadType, payload):
``"DSSEv1" SP len(type) SP type SP len(body) SP body`` with lengths as ASCII decimals.
The verifier checks the signature over the exact payload bytes *before* parsing them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import nacl.bindings
import nacl.exceptions
import nacl.signing

from specschema.errors import EnvelopeError, SignatureInvalid

# The project's name before it became specatlas stays in the wire's payload type: every
# signature covers it (DSSE's PAE), so renaming it would orphan every signed submission.
PAYLOAD_TYPE = "application/vnd.specbench.submission.v1+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's Pre-Authentication Encoding."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(type_bytes), type_bytes, len(payload), payload)


def key_id_of(public_key: bytes) -> str:
    """The contributor's pseudonymous identity: hex sha256 of the raw 32-byte public key."""
    return hashlib.sha256(public_key).hexdigest()


@dataclass(frozen=True)
class VerifiedEnvelope:
    payload: bytes
    payload_type: str
    key_id: str
    public_key: bytes


def sign_envelope(
    payload: bytes, signing_key: nacl.signing.SigningKey, payload_type: str = PAYLOAD_TYPE
) -> dict[str, Any]:
    public_key = bytes(signing_key.verify_key)
    signature = signing_key.sign(pae(payload_type, payload)).signature
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [
            {
                "keyid": key_id_of(public_key),
                "publicKey": base64.b64encode(public_key).decode("ascii"),
                "sig": base64.b64encode(signature).decode("ascii"),
            }
        ],
    }


def envelope_bytes(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, separators=(",", ":")).encode("ascii")


def _b64(value: Any, field: str) -> bytes:
    if not isinstance(value, str):
        raise EnvelopeError(f"envelope field {field} must be a base64 string")
    # Fast path: what binascii's strict mode accepts (alphabet only, padding only at the
    # end and only as much as needed), the definition below accepts as the same bytes; it
    # skips the definition's ASCII copy and regex pass. A refusal here only means "ask the
    # definition" (which words the error, and would decide any odd padding the two judge
    # differently; tests/schema/test_envelope_fast.py enumerates short strings).
    try:
        return binascii.a2b_base64(value, strict_mode=True)
    except ValueError:  # binascii.Error, or a str that is not ASCII
        return _b64_definition(value, field)


def _b64_definition(value: str, field: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise EnvelopeError(f"envelope field {field} is not valid base64") from None


_ENVELOPE_FIELDS = frozenset({"payloadType", "payload", "signatures"})
_SIGNATURE_FIELDS = frozenset({"keyid", "publicKey", "sig"})


def _parse_envelope(data: Any, expected_type: str) -> tuple[str, bytes, bytes, bytes, str]:
    """parse_envelope's checks, in its order; also returns the key id it computed."""
    if not isinstance(data, dict):
        raise EnvelopeError("envelope must be a JSON object")
    unknown = data.keys() - _ENVELOPE_FIELDS
    if unknown:
        raise EnvelopeError(f"unknown envelope fields: {', '.join(sorted(unknown))}")
    payload_type = data.get("payloadType")
    if payload_type != expected_type:
        raise EnvelopeError(f"payloadType must be {expected_type!r}, got {payload_type!r}")
    payload = _b64(data.get("payload"), "payload")
    signatures = data.get("signatures")
    if not isinstance(signatures, list) or len(signatures) != 1:
        raise EnvelopeError("envelope must carry exactly one signature")
    entry = signatures[0]
    if not isinstance(entry, dict) or entry.keys() - _SIGNATURE_FIELDS:
        raise EnvelopeError("signature entry must have keyid, publicKey and sig only")
    public_key = _b64(entry.get("publicKey"), "signatures[0].publicKey")
    signature = _b64(entry.get("sig"), "signatures[0].sig")
    if len(public_key) != 32:
        raise EnvelopeError("publicKey must be a raw 32-byte Ed25519 key")
    if len(signature) != 64:
        raise EnvelopeError("sig must be a 64-byte Ed25519 signature")
    key_id = key_id_of(public_key)
    if entry.get("keyid") != key_id:
        raise EnvelopeError("keyid is not the sha256 of publicKey")
    return payload_type, payload, public_key, signature, key_id


def parse_envelope(data: Any, expected_type: str = PAYLOAD_TYPE) -> tuple[str, bytes, bytes, bytes]:
    """Check the envelope's form; return (payloadType, payload, public key, signature)."""
    payload_type, payload, public_key, signature, _key_id = _parse_envelope(data, expected_type)
    return payload_type, payload, public_key, signature


def verify_envelope(data: Any, expected_type: str = PAYLOAD_TYPE) -> VerifiedEnvelope:
    """Verify the envelope's signature over the exact payload bytes; do not parse them."""
    payload_type, payload, public_key, signature, key_id = _parse_envelope(data, expected_type)
    # What VerifyKey(public_key).verify(pae(...), signature) does, without building the
    # key object: crypto_sign_open over signature + PAE (the lengths are checked above).
    try:
        nacl.bindings.crypto_sign_open(signature + pae(payload_type, payload), public_key)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError):
        raise SignatureInvalid("signature does not verify over the payload") from None
    return VerifiedEnvelope(payload, payload_type, key_id, public_key)
