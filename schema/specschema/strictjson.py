"""Strict JSON: the one parser both sides use for signed payloads.

The stdlib parser is lenient in ways that matter for signed data: duplicate keys
(last wins, so two verifiers may "see" different objects), NaN/Infinity, integers
that other languages silently round, and trailing garbage. Each is refused here
with a precise message.

Two paths give the same answers. The definition (``_loads_strict_definition``) is the
stdlib parser with refusing hooks. The fast path serves the common case, bytes that are
exactly orjson's compact serialization of the value they parse to (what a client's
``submission_bytes`` and ``json.dumps(..., separators=(",", ":"))`` of plain data write):
such bytes are valid UTF-8 without a BOM or trailing data, have no duplicate keys (a
re-serialized dict has none, so the bytes would differ), no NaN/Infinity or overflowing
number (orjson writes them as ``null``), no integer beyond ±(2^53-1) (refused by
``OPT_STRICT_INTEGER``), and json.loads would read back the same value (orjson's output
is standard JSON: shortest round-trip floats, standard string escapes). Only the
nesting depth is left to check. Anything else takes the definition.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

import orjson

from specschema.errors import PayloadParseError

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 64


def _pairs_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise PayloadParseError(f"duplicate key {key!r} in JSON object")
            seen.add(key)
    return result


def _reject_constant(name: str) -> Any:
    raise PayloadParseError(f"{name} is not valid JSON")


def _bounded_int(text: str) -> int:
    if len(text) > 20:
        raise PayloadParseError(f"integer {text[:24]}... is beyond ±(2^53-1)")
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise PayloadParseError(f"integer {text} is beyond ±(2^53-1)")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise PayloadParseError(f"number {text} overflows to infinity")
    return value


_BRACKETS = re.compile(r"[\[\]{}]")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


# Tokens outside strings that one of the number/constant hooks could refuse: NaN and
# Infinity, integers of 16+ digits (2^53 has 16), exponents of 3+ digits (overflow). A
# text without any of them parses to the same value with or without those hooks. Digits
# are folded to 0 first so that plain substring tests (C speed) find them; a regex
# restarting at every digit of every number cost ~6x more.
_FOLD_DIGITS = str.maketrans("123456789", "000000000")
_SUSPECT_MARKERS = ("NaN", "Infinity", "0" * 16) + tuple(
    f"{e}{sign}000" for e in "eE" for sign in ("", "+", "-")
)


def _suspect(outside: str) -> bool:
    folded = outside.translate(_FOLD_DIGITS)
    return any(marker in folded for marker in _SUSPECT_MARKERS)


def _outside_strings(text: str) -> str:
    """The text with every string literal cut out, in a few C-speed passes.

    Escaped backslashes are removed first, then escaped quotes; every quote left opens or
    closes a string, so the even-numbered pieces between quotes are the text outside
    strings. Exact for valid JSON; invalid JSON is refused by the parser right after.
    """
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    return "".join(unescaped.split('"')[::2])


def _check_depth(data: bytes | str) -> str:
    """Refuse deep nesting before the recursive parser sees it; return the text outside
    strings (only brackets there count)."""
    text = data if isinstance(data, str) else data.decode("utf-8", errors="replace")
    outside = _outside_strings(text)
    # Running depth over the brackets, folded in C (map, accumulate, max): no Python loop.
    depths = accumulate(map(_BRACKET_STEP.__getitem__, _BRACKETS.findall(outside)))
    if max(depths, default=0) > MAX_DEPTH:
        raise PayloadParseError(f"JSON nesting deeper than {MAX_DEPTH} levels")
    return outside


# Bytes outside the set below are deleted and curly brackets folded into square ones, so
# that a document becomes its quotes and brackets only (a few hundred bytes, in one C pass).
_KEEP_BRACKETS_AND_QUOTES = bytes(range(256)).translate(bytes.maketrans(b"{}", b"[]"))
_DELETE_ALL_BUT_BRACKETS_AND_QUOTES = bytes(c for c in range(256) if c not in b'"[]{}')


def _nesting_within_limit(data: bytes) -> bool:
    """Whether a *valid* JSON document nests at most MAX_DEPTH levels, in C-speed passes.

    Fewer brackets than the limit cannot nest deeper. Otherwise: escaped backslashes and
    quotes are cut (every quote left opens or closes a string, as in ``_outside_strings``),
    then everything but quotes and brackets. Two adjacent quotes can go in any order, since
    cutting them keeps the parity of the quotes before every other byte; the rare quotes
    left (strings holding brackets) are cut with the text between them. What remains is
    the structural brackets, balanced; each pass of cutting "[]" removes exactly the
    innermost level, so the document is within the limit iff MAX_DEPTH passes empty it.
    """
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return True
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = data.translate(
        _KEEP_BRACKETS_AND_QUOTES, _DELETE_ALL_BUT_BRACKETS_AND_QUOTES
    ).replace(b'""', b"")
    if b'"' in brackets:
        brackets = b"".join(brackets.split(b'"')[::2])
    for _ in range(MAX_DEPTH):
        if not brackets:
            return True
        brackets = brackets.replace(b"[]", b"")
    return not brackets


def loads_strict(data: bytes) -> Any:
    """Parse UTF-8 JSON bytes strictly, or raise PayloadParseError."""
    # orjson escapes every control character in strings and writes no whitespace, so a
    # newline means "not canonical": indented documents skip the orjson round trip.
    if isinstance(data, bytes) and b"\n" not in data:
        try:
            value = orjson.loads(data)
            canonical = orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER) == data
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            canonical = False
        if canonical and _nesting_within_limit(data):
            return value
    return _loads_strict_definition(data)


def _loads_strict_definition(data: bytes) -> Any:
    """The definition of strict parsing (and the error messages); loads_strict's slow path."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadParseError(f"payload is not valid UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise PayloadParseError("payload starts with a byte-order mark")
    outside = _check_depth(text)
    try:
        if not _suspect(outside):  # fast path: only the duplicate-key hook can refuse
            return json.loads(text, object_pairs_hook=_pairs_no_duplicates)
        return json.loads(
            text,
            object_pairs_hook=_pairs_no_duplicates,
            parse_constant=_reject_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
        )
    except PayloadParseError:
        raise
    except json.JSONDecodeError as exc:
        raise PayloadParseError(
            f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except (RecursionError, ValueError) as exc:
        raise PayloadParseError(f"invalid JSON: {exc}") from None


def dumps_canonical(value: Any) -> bytes:
    """Canonical bytes: sorted keys, no whitespace, UTF-8. Used for hashing definitions."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")
