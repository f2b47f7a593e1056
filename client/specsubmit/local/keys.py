"""The contributor's Ed25519 key: made on first use, kept 0600, rotated with the old kept.

Layout under ``state_home()/keys/`` (folder 0700):

    current.key                 base64 of the 32-byte seed of the signing key (0600)
    retired/<key_id>.key        earlier keys, same format, kept so old submissions stay yours

The key id (hex sha256 of the raw public key, ``specschema.key_id_of``) is the
contributor's pseudonymous identity; nothing else identifies them.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

import nacl.signing

from specschema import key_id_of
from specsubmit.errors import KeyStoreError
from specsubmit.local.paths import state_home

CURRENT = "current.key"
RETIRED = "retired"


@dataclass(frozen=True)
class KeyInfo:
    key_id: str
    public_key_b64: str
    path: Path

    @classmethod
    def of(cls, key: nacl.signing.SigningKey, path: Path) -> KeyInfo:
        public = bytes(key.verify_key)
        return cls(key_id_of(public), base64.b64encode(public).decode("ascii"), path)


def keys_dir(home: Path | None = None) -> Path:
    folder = (home or state_home()) / "keys"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise KeyStoreError(f"cannot create the key folder {folder}: {exc.strerror}") from None
    return folder


def _check_private(path: Path) -> None:
    if os.name == "nt":
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyStoreError(
            f"key file {path} is readable by others (mode {mode:o}); run: chmod 600 {path}"
        )


def read_key(path: Path) -> nacl.signing.SigningKey:
    try:
        _check_private(path)
        text = path.read_text(encoding="ascii").strip()
        seed = base64.b64decode(text, validate=True)
    except (OSError, UnicodeDecodeError, binascii.Error) as exc:
        message = getattr(exc, "strerror", None) or "not a base64 key"
        raise KeyStoreError(f"cannot read the key file {path}: {message}") from None
    if len(seed) != 32:
        raise KeyStoreError(f"key file {path} does not hold a 32-byte Ed25519 seed")
    return nacl.signing.SigningKey(seed)


def _write_new(path: Path, key: nacl.signing.SigningKey) -> bool:
    """Write `key` to `path` unless it exists; False when another process got there first."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    data = base64.b64encode(bytes(key)).decode("ascii") + "\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)  # atomic, and fails if the file appeared meanwhile
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def load_or_create(home: Path | None = None) -> nacl.signing.SigningKey:
    """The current signing key, made (0600) on first use."""
    path = keys_dir(home) / CURRENT
    if not path.exists():
        try:
            _write_new(path, nacl.signing.SigningKey.generate())
        except OSError as exc:
            raise KeyStoreError(f"cannot write the key file {path}: {exc.strerror}") from None
    return read_key(path)


def current_exists(home: Path | None = None) -> bool:
    """Whether a current key exists (``load_or_create`` would not make one)."""
    return (keys_dir(home) / CURRENT).exists()


def current_info(home: Path | None = None) -> KeyInfo:
    key = load_or_create(home)
    return KeyInfo.of(key, keys_dir(home) / CURRENT)


def retired(home: Path | None = None) -> list[KeyInfo]:
    folder = keys_dir(home) / RETIRED
    if not folder.is_dir():
        return []
    return [KeyInfo.of(read_key(path), path) for path in sorted(folder.glob("*.key"))]


def rotate(home: Path | None = None) -> tuple[KeyInfo, KeyInfo]:
    """Retire the current key (kept under retired/) and make a new one: (old, new)."""
    folder = keys_dir(home)
    old_key = load_or_create(home)
    old = KeyInfo.of(old_key, folder / CURRENT)
    retired_dir = folder / RETIRED
    try:
        retired_dir.mkdir(mode=0o700, exist_ok=True)
        target = retired_dir / f"{old.key_id}.key"
        os.replace(folder / CURRENT, target)
        new_key = nacl.signing.SigningKey.generate()
        if not _write_new(folder / CURRENT, new_key):
            new_key = read_key(folder / CURRENT)  # a concurrent rotate made one
    except OSError as exc:
        raise KeyStoreError(f"cannot rotate the key in {folder}: {exc.strerror}") from None
    return KeyInfo(old.key_id, old.public_key_b64, target), KeyInfo.of(new_key, folder / CURRENT)
