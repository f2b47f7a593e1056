"""DuckDB's ``hash``, written out, and strings chosen to collide under it.

DuckDB hashes a string eight bytes at a time (xor, then multiply by an odd constant) and
finishes with a murmur-style mix; it combines the hashes of several columns by mixing the
left one and xoring the right one in. Every step can be undone, so a string with any
chosen hash is found by fixing all of it but its last sixteen bytes and solving for those
(``string_with_hash``: a millisecond in Python; the review took 0.6 s). Written from
DuckDB 2.0's ``common/types/hash.cpp``, and checked against ``duckdb`` itself by every test
that uses it (``check_against_duckdb``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import duckdb

MASK = (1 << 64) - 1
MULTIPLIER = 0xD6E8FEB86659FD93
INVERSE = pow(MULTIPLIER, -1, 1 << 64)
SEED = 0xE17A1465
LENGTH_MULTIPLIER = 0xC6A4A7935BD1E995
DIGITS = b"0123456789"
UPPER = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LETTERS = UPPER + UPPER.lower() + DIGITS  # a name's characters, stored as they are
QUANT = UPPER + DIGITS + b"_"  # a quantization is stored upper case


def _xorshift(value: int) -> int:  # its own inverse on 64 bits
    return value ^ (value >> 32)


def murmur(value: int) -> int:
    for _ in range(2):
        value = (_xorshift(value) * MULTIPLIER) & MASK
    return _xorshift(value)


def unmurmur(value: int) -> int:
    for _ in range(2):
        value = (_xorshift(value) * INVERSE) & MASK
    return _xorshift(value)


def string_hash(data: bytes) -> int:
    state = (SEED ^ (len(data) * LENGTH_MULTIPLIER)) & MASK
    whole = len(data) - len(data) % 8
    for at in range(0, whole, 8):
        state = ((state ^ int.from_bytes(data[at:at + 8], "little")) * MULTIPLIER) & MASK
    if whole < len(data):
        state = ((state ^ int.from_bytes(data[whole:], "little")) * MULTIPLIER) & MASK
    return murmur(state)


def combine(left: int, right: int) -> int:
    """``hash(a, b)`` from ``hash(a)`` and ``hash(b)``."""
    return ((_xorshift(left) * MULTIPLIER) & MASK) ^ right


def uncombine(combined: int, right: int) -> int:
    """The ``left`` that ``combine`` turned into ``combined`` with ``right``."""
    return _xorshift(((combined ^ right) * INVERSE) & MASK)


def string_with_hash(wanted: int, alphabet: bytes = LETTERS, length: int = 24,
                     seed: int = 0) -> str:
    """A string of ``length`` bytes (a multiple of 8, at least 16) from ``alphabet`` whose
    hash is ``wanted``: any head, then two blocks solved a byte at a time (the low bytes of
    a product depend only on the low bytes of its factors)."""
    assert length % 8 == 0 and length >= 16
    rng = random.Random(seed)
    allowed = set(alphabet)
    head = bytes(rng.choice(alphabet) for _ in range(length - 16))
    state = (SEED ^ (length * LENGTH_MULTIPLIER)) & MASK
    for at in range(0, len(head), 8):
        state = ((state ^ int.from_bytes(head[at:at + 8], "little")) * MULTIPLIER) & MASK
    # Wanted: ((state ^ first) * MULTIPLIER ^ second) * MULTIPLIER == before the finish.
    target = (unmurmur(wanted) * INVERSE) & MASK
    order = list(alphabet)

    def search(byte: int, first: int) -> int | None:
        if byte == 8:
            return first
        low = (1 << (8 * (byte + 1))) - 1
        rng.shuffle(order)
        for char in list(order):
            chosen = first | (char << (8 * byte))
            product = (((state ^ chosen) & low) * MULTIPLIER) & low
            if ((target ^ product) >> (8 * byte)) & 0xFF in allowed:
                found = search(byte + 1, chosen)
                if found is not None:
                    return found
        return None

    first = search(0, 0)
    assert first is not None, "no string from this alphabet"
    second = target ^ (((state ^ first) * MULTIPLIER) & MASK)
    text = head + first.to_bytes(8, "little") + second.to_bytes(8, "little")
    assert string_hash(text) == wanted
    return text.decode("ascii")


def value_for(hashes: Sequence[int], position: int, wanted: int) -> int:
    """The hash that column ``position`` must have for the columns' combined hash to be
    ``wanted`` (``hashes``: every column's own hash; the one at ``position`` is ignored)."""
    state = wanted
    for right in reversed(hashes[position + 1:]):
        state = uncombine(state, right)
    if position == 0:
        return state
    prefix = hashes[0]
    for right in hashes[1:position]:
        prefix = combine(prefix, right)
    return ((_xorshift(prefix) * MULTIPLIER) & MASK) ^ state


def check_against_duckdb(*texts: str) -> None:
    """This module's ``string_hash`` is DuckDB's, for these strings."""
    with duckdb.connect() as conn:
        for text in texts:
            found = conn.execute("SELECT hash(?::VARCHAR)", [text]).fetchone()
            assert found is not None and found[0] == string_hash(text.encode()), text
