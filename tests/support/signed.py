"""Signed example submissions: the bodies most server tests send.

Keys are derived from a seed (``test-key-<seed>``), so a test names its contributor by
number and the same seed always gives the same key, id and bytes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import nacl.signing

from specschema.envelope import envelope_bytes, sign_envelope
from specschema.examples import example_submission
from specschema.payload import submission_bytes


def signer(seed: int) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(hashlib.sha256(f"test-key-{seed}".encode()).digest())


def payload_dict(seed: int = 0, protocol: str = "hardnumbers-m2", **kwargs: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        submission_bytes(example_submission(protocol, seed=seed, **kwargs))
    )
    return data


def sign_bytes(payload: bytes, key_seed: int = 0) -> bytes:
    return envelope_bytes(sign_envelope(payload, signer(key_seed)))


def sign_dict(data: dict[str, Any], key_seed: int = 0) -> bytes:
    return sign_bytes(json.dumps(data).encode(), key_seed)


def valid_body(seed: int = 0, key_seed: int = 0, **kwargs: Any) -> bytes:
    return sign_bytes(submission_bytes(example_submission(seed=seed, **kwargs)), key_seed)
