"""Hostile submissions for POST /v1/submissions, each with the status it must get.

Every case starts from a valid, realistic submission (``specschema.examples``) and breaks
exactly one thing, so that the only reason for a refusal is the thing that was broken.
``valid_envelope`` builds the untouched control: a test must see it accepted (201), or
every "refused" below would prove nothing.

Statuses follow the order of the server's checks:
413 size -> 400 envelope form -> 401 signature -> 400 strict JSON -> 422 schema ->
422 protocol -> 422 consistency -> 403 banned key -> 429 rate limit -> 409 same id,
other bytes.

Cases whose outcome depends on earlier state (a banned key, an id already stored, a
flood) are described by ``kind`` and set up by the test; the rest are plain bodies.
"""

from __future__ import annotations

import json
from typing import Any

import nacl.signing

from specschema import (
    envelope_bytes,
    key_id_of,
    sign_envelope,
    submission_bytes,
)
from specschema.examples import example_submission

BODY_LIMIT = 256 * 1024  # the server's default; tests pass it in settings too


def signing_key(seed: int) -> nacl.signing.SigningKey:
    """A deterministic Ed25519 key: contributor ``seed``."""
    return nacl.signing.SigningKey(seed.to_bytes(4, "big") * 8)


def valid_payload(seed: int, **kwargs: Any) -> bytes:
    return submission_bytes(example_submission("hardnumbers-m2", seed=seed, **kwargs))


def valid_envelope(seed: int, key: nacl.signing.SigningKey | None = None, **kwargs: Any) -> bytes:
    """The body of an honest submission (contributor ``seed`` unless ``key`` is given)."""
    key = key or signing_key(seed)
    return envelope_bytes(sign_envelope(valid_payload(seed, **kwargs), key))


def signed(payload: bytes, key: nacl.signing.SigningKey) -> bytes:
    return envelope_bytes(sign_envelope(payload, key))


def payload_dict(seed: int, **kwargs: Any) -> dict[str, Any]:
    return json.loads(valid_payload(seed, **kwargs))  # type: ignore[no-any-return]


def dict_bytes(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode("utf-8")


# --- mutations of the signed payload (signature stays valid) ------------------------------


# --- the table ---------------------------------------------------------------------------


def key_id(seed: int) -> str:
    return key_id_of(bytes(signing_key(seed).verify_key))
