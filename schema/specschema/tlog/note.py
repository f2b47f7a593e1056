"""C2SP signed notes with Ed25519 signatures, and checkpoints (C2SP tlog-checkpoint).

A note is text ending in a newline, a blank line, then signature lines
``— <key name> <base64(key id || signature)>``; the Ed25519 key id is the first four
bytes of SHA-256(key name || 0x0A || 0x01 || public key). A verifier key is written
``<name>+<hex key id>+<base64(0x01 || public key)>``. Signatures by unknown keys are
ignored (they may be a rotated key's or a witness's); a known key's signature must verify.

A checkpoint's text is the origin line, the tree size in decimal, the root in base64,
and optional extension lines.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

import nacl.exceptions
import nacl.signing

from specschema.errors import NoteInvalid
from specschema.tlog.merkle import HASH_SIZE

ED25519 = 0x01
MAX_SIGNATURES = 16
MAX_NOTE_BYTES = 64 * 1024
_SIG_PREFIX = "\u2014 "
_NAME = re.compile(r"[^\s+]+")
_SIZE = re.compile(r"0|[1-9]\d{0,19}")


def key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([ED25519]) + public_key).digest()[:4]


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise NoteInvalid(f"a key name is non-empty, without spaces or '+': {name!r}")


@dataclass(frozen=True)
class Verifier:
    name: str
    public_key: bytes

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public_key)

    @property
    def vkey(self) -> str:
        material = base64.b64encode(bytes([ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{material}"

    def verifies(self, text: bytes, signature: bytes) -> bool:
        try:
            nacl.signing.VerifyKey(self.public_key).verify(text, signature)
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError):
            return False
        return True


def parse_vkey(vkey: str) -> Verifier:
    parts = vkey.split("+", 2)  # the base64 key may hold "+" itself
    if len(parts) != 3:
        raise NoteInvalid("a verifier key is <name>+<hex key id>+<base64 key>")
    name, hex_id, material_b64 = parts
    _check_name(name)
    try:
        material = base64.b64decode(material_b64, validate=True)
        wanted_id = bytes.fromhex(hex_id)
    except (binascii.Error, ValueError):
        raise NoteInvalid("a verifier key's id or key is not hex / base64") from None
    if len(material) != 33 or material[0] != ED25519:
        raise NoteInvalid("only Ed25519 verifier keys (type 0x01, 32 bytes) are known")
    verifier = Verifier(name, material[1:])
    if verifier.key_id != wanted_id or len(hex_id) != 8:
        raise NoteInvalid("a verifier key's id does not match its name and key")
    return verifier


@dataclass(frozen=True)
class Signer:
    name: str
    key: nacl.signing.SigningKey

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def verifier(self) -> Verifier:
        return Verifier(self.name, bytes(self.key.verify_key))

    def sign(self, text: str) -> str:
        """The note: ``text`` (ending in a newline), a blank line, this key's signature."""
        if not text.endswith("\n") or "\n\n" in text:
            raise NoteInvalid("a note's text ends in a newline and has no blank line here")
        signature = self.key.sign(text.encode()).signature
        line = base64.b64encode(self.verifier.key_id + signature).decode()
        return f"{text}\n{_SIG_PREFIX}{self.name} {line}\n"


def open_note(note: bytes, verifier: Verifier) -> str:
    """The note's text once ``verifier``'s signature on it verifies; else ``NoteInvalid``."""
    if len(note) > MAX_NOTE_BYTES:
        raise NoteInvalid(f"a note is at most {MAX_NOTE_BYTES} bytes")
    try:
        decoded = note.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteInvalid("a note is UTF-8") from None
    if any(ord(c) < 0x20 and c != "\n" for c in decoded):
        raise NoteInvalid("a note has no control characters but newlines")
    split = decoded.rfind("\n\n")
    if split < 0 or not decoded.endswith("\n"):
        raise NoteInvalid("a note is text, a blank line and signature lines")
    text, lines = decoded[:split + 1], decoded[split + 2:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteInvalid(f"a note has at most {MAX_SIGNATURES} signatures here")
    found = False
    for line in lines:
        name, _, sig_b64 = line.removeprefix(_SIG_PREFIX).partition(" ")
        if not line.startswith(_SIG_PREFIX) or not _NAME.fullmatch(name):
            raise NoteInvalid(f"not a signature line: {line[:80]!r}")
        try:
            raw = base64.b64decode(sig_b64, validate=True)
        except binascii.Error:
            raise NoteInvalid("a signature is not base64") from None
        if len(raw) < 4:
            raise NoteInvalid("a signature is shorter than its key id")
        if name != verifier.name or raw[:4] != verifier.key_id:
            continue  # an unknown key's: ignored, as the spec asks
        if not verifier.verifies(text.encode(), raw[4:]):
            raise NoteInvalid(f"the signature of {name} does not verify")
        found = True
    if not found:
        raise NoteInvalid(f"the note is not signed by {verifier.name}")
    return text


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(),
                 *self.extensions]
        return "\n".join(lines) + "\n"


def parse_checkpoint(text: str) -> Checkpoint:
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
        raise NoteInvalid("a checkpoint is origin, size and root lines, each non-empty")
    origin, size_text, root_text, *extensions = lines[:-1]
    if not _SIZE.fullmatch(size_text):
        raise NoteInvalid(f"not a tree size: {size_text[:30]!r}")
    try:
        root = base64.b64decode(root_text, validate=True)
    except binascii.Error:
        raise NoteInvalid("the root hash is not base64") from None
    if len(root) != HASH_SIZE:
        raise NoteInvalid(f"the root hash is not {HASH_SIZE} bytes")
    return Checkpoint(origin, int(size_text), root, tuple(extensions))


def sign_checkpoint(checkpoint: Checkpoint, signer: Signer) -> str:
    return signer.sign(checkpoint.text())


def open_checkpoint(note: bytes, verifier: Verifier, origin: str | None = None) -> Checkpoint:
    """The checkpoint a signed note holds, once signed by ``verifier`` (and, if given, of
    ``origin``: a log's key signs only its own checkpoints, but a name is cheap to copy)."""
    checkpoint = parse_checkpoint(open_note(note, verifier))
    if origin is not None and checkpoint.origin != origin:
        raise NoteInvalid(f"the checkpoint is of {checkpoint.origin!r}, not {origin!r}")
    return checkpoint
