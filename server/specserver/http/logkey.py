"""The log's signing key: an Ed25519 key in a file of its own, written 0600.

The file holds one line in the signed-note signer format
``PRIVATE+KEY+<name>+<hex key id>+<base64(0x01 || 32-byte seed)>``; its name is the log's
origin. A missing file is created with a new key on first start; a file whose name is not
the configured origin is refused, so that a changed origin is a decision, not an accident.
Keeping and rotating it: docs/deploying.md, "The transparency log's key".
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

import nacl.signing

from specschema.tlog import Signer, key_id
from specserver.errors import SpecServerError

PREFIX = "PRIVATE+KEY+"


class LogKeyError(SpecServerError):
    code = "log_key_invalid"


def signer_line(signer: Signer) -> str:
    public = bytes(signer.key.verify_key)
    seed = base64.b64encode(b"\x01" + bytes(signer.key)).decode()
    return f"{PREFIX}{signer.name}+{key_id(signer.name, public).hex()}+{seed}\n"


def parse_signer(text: str) -> Signer:
    body = text.strip()
    if not body.startswith(PREFIX):
        raise LogKeyError(f"the log key file does not begin with {PREFIX}")
    parts = body[len(PREFIX):].split("+", 2)  # the base64 key may hold "+" itself
    if len(parts) != 3:
        raise LogKeyError("the log key is PRIVATE+KEY+<name>+<hex id>+<base64 key>")
    name, hex_id, material_b64 = parts
    try:
        material = base64.b64decode(material_b64, validate=True)
    except binascii.Error:
        raise LogKeyError("the log key is not base64") from None
    if len(material) != 33 or material[0] != 0x01:
        raise LogKeyError("the log key is not an Ed25519 key")
    signer = Signer(name, nacl.signing.SigningKey(material[1:]))
    if signer.verifier.key_id.hex() != hex_id:
        raise LogKeyError("the log key's id does not match its name and key")
    return signer


def load_or_create(path: Path, origin: str) -> Signer:
    """The signer in ``path``, made (0600) for ``origin`` when the file does not exist."""
    if not path.exists():
        signer = Signer(origin, nacl.signing.SigningKey.generate())
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(signer_line(signer))
        return signer
    signer = parse_signer(path.read_text(encoding="ascii", errors="replace"))
    if signer.name != origin:
        raise LogKeyError(f"the log key in {path} is for {signer.name!r}, not the configured "
                          f"origin {origin!r}")
    return signer
