"""What a specatlas log entry is: one type byte, then a SHA-256 (33 bytes in all).

    0x01  ENVELOPE    an envelope the server verified and stored (accepted or quarantined):
                      the SHA-256 of its exact bytes
    0x02  MODERATION  a maintainer's decision: the SHA-256 of the audit row as the public
                      history shows it plus ``affects``, as sorted, compact JSON
    0x03  REFUSED     an envelope whose signature verified and which the server then
                      refused by a rule (schema, protocol, consistency, a banned key, an id
                      stored with other bytes): the SHA-256 of its exact bytes. The bytes
                      are never served (a refused envelope is not public); its sender, who
                      holds them, proves the refusal was logged by inclusion.
    0x04  PROBE       a cost probe the server verified and stored: the SHA-256 of its exact
                      bytes (no public read serves one probe's bytes; its sender proves it
                      by inclusion, and every prediction is computed from stored probes)

The leaf hash is RFC 6962's SHA-256(0x00 || entry) (``merkle.leaf_hash``). A new kind is a
new type byte: the leaf hashes of the existing kinds never change.
"""

from __future__ import annotations

from specschema.tlog.merkle import HASH_SIZE

ENVELOPE = 0x01
MODERATION = 0x02
REFUSED = 0x03
PROBE = 0x04
ENTRY_SIZE = 1 + HASH_SIZE
# Each type byte's name, as the log's index (``/log/index``) writes it.
ENTRY_KINDS: dict[int, str] = {ENVELOPE: "envelope", MODERATION: "moderation",
                               REFUSED: "refused", PROBE: "probe"}


def typed_entry(kind: int, digest: bytes) -> bytes:
    """The entry of type ``kind`` for a SHA-256 ``digest``."""
    if kind not in ENTRY_KINDS or len(digest) != HASH_SIZE:
        raise ValueError(f"not an entry: type {kind:#04x}, {len(digest)}-byte digest")
    return bytes([kind]) + digest
