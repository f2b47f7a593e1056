"""loads_strict's canonical-bytes fast path gives the same values and errors as the definition.

The definition is ``strictjson._loads_strict_definition`` (the stdlib parser with refusing
hooks, itself pinned by test_strictjson.py and test_strictjson_depth.py). Documents are
generated as text, so that they can hold what no Python value serializes to: duplicate
keys, NaN, integers past 2^53, numbers that overflow, lone surrogates, odd escapes, deep
nesting, whitespace and trailing data.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specschema import PayloadParseError, strictjson
from specschema.examples import example_submission
from specschema.payload import submission_bytes
from tests.schema.test_strictjson_depth import reference_depth
from tests.support.tiers import examples


def _typed(value: Any) -> Any:
    """A view of a parsed value that tells 1 from 1.0 and 0.0 from -0.0, and keeps key order."""
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, list):
        return ("list", [_typed(item) for item in value])
    assert isinstance(value, dict)
    return ("dict", [(key, _typed(item)) for key, item in value.items()])


def _outcome(parse: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", _typed(parse(data))
    except PayloadParseError as exc:
        return "error", str(exc)


def _assert_same_as_definition(data: bytes) -> None:
    expected = _outcome(strictjson._loads_strict_definition, data)
    assert _outcome(strictjson.loads_strict, data) == expected


# --- documents as text ------------------------------------------------------------------

number_literals = st.one_of(
    st.integers().map(str),
    st.integers(-(2**53) - 3, -(2**53) + 3).map(str),
    st.integers(2**53 - 3, 2**53 + 3).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: orjson.dumps(x).decode()),
    st.sampled_from(
        "1e400 -1e400 1E400 1e-400 2.5E+308 1.7976931348623157e308 1.7976931348623159e308"
        " 0.1234567890123456789 -0 -0.0 1E2 1e+2 1.0 00 01 1. .5 +1 NaN Infinity -Infinity"
        " 12345678901234567.5 9007199254740991 -9007199254740991 1e16 1e+16 1e-7 0.00001".split()
    ),
    st.sampled_from(["1" * 400, "1" * 400 + ".0"]),
)
# Lone and paired surrogates, escapes, raw control characters, brackets inside strings.
ODD_STRING_LITERALS = [
    r'"\ud800"', r'"\udc00\ud800"', r'"\ud83d\ude00"', r'"\ud83d"', r'"\u0000"', r'"\/"',
    r'"\"["', r'"\\"', r'"\\\""', r'"a\nb"', r'"\u00e9"', r'"\x"', r'"\u"', '"]]]}}"',
    '"[[[{{"', '"\ufeff"', '"\x01"', '"\t"', '"\x7f"',
]  # fmt: skip
string_literals = st.one_of(
    st.text().map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.text().map(json.dumps),
    st.text(alphabet='"\\[]{}/aé\x00\x1f\x7f\u2028😀').map(lambda s: orjson.dumps(s).decode()),
    st.sampled_from(ODD_STRING_LITERALS),
)
keys = st.sampled_from(['"a"', '"b"', '"\\u0061"', '"a\\""', '"[["', '""'])
separators = st.sampled_from([(",", ":"), (", ", ": "), (",", " : "), ("\n,", ":\t")])


def _document(seps: tuple[str, str]) -> st.SearchStrategy[str]:
    comma, colon = seps
    leaves = number_literals | string_literals | st.sampled_from(["true", "false", "null"])
    return st.recursive(
        leaves,
        lambda kids: (
            st.lists(kids, max_size=4).map(lambda xs: "[" + comma.join(xs) + "]")
            | st.lists(st.tuples(keys, kids), max_size=4).map(
                lambda kvs: "{" + comma.join(k + colon + v for k, v in kvs) + "}"
            )
        ),
        max_leaves=12,
    )


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    seps = draw(separators)
    text = draw(_document(seps))
    depth = draw(st.integers(0, 70))
    if draw(st.booleans()):
        text = "[" * depth + text + "]" * depth
    else:
        text = '{"k":' * depth + text + "}" * depth
    text = draw(st.sampled_from(["", " ", "\ufeff"])) + text
    text += draw(st.sampled_from(["", " ", "\n", " x", "{}", "\x00"]))
    encoded = text.encode("utf-8", errors="surrogatepass")
    if draw(st.integers(0, 9)) == 0:  # now and then a broken byte
        index = draw(st.integers(0, len(encoded)))
        encoded = (
            encoded[:index]
            + draw(st.sampled_from([b"\xff", b"\xc0\x80", b"\xed"]))
            + (encoded[index:])
        )
    return encoded


@settings(max_examples=examples(800), deadline=None)
@given(documents())
@example(b'{"a":1,"a":2}')
@example(b'{"a":1,"\\u0061":2}')
@example(b"[9007199254740992]")
@example(b"[18446744073709551616]")
@example(b"[1e400]")
@example(b'["\\ud800"]')
@example(b"[" * 65 + b"]" * 65)
@example(b"[" * 64 + b"]" * 64)
@example(b"\xef\xbb\xbf{}")
def test_text_documents_same_as_definition(data: bytes) -> None:
    _assert_same_as_definition(data)


# --- documents as values, serialized canonically (the fast path) ------------------------

def _containers(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # a named function: Hypothesis's check that a multi-line lambda uses its argument
    # misreads this one's source
    return st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=3), kids, max_size=4)


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) - 2, 2**53 + 2)
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    _containers,
    max_leaves=25,
)


def _nest(value: Any, depth: int, siblings: int) -> Any:
    """``value`` under ``depth`` levels, with bracket-heavy siblings so the count test fails."""
    for level in range(depth):
        value = [value, *([[]] * siblings)] if level % 2 else {"k": value, "[": "]]{"}
    return value


@settings(max_examples=examples(400), deadline=None)
@given(values, st.integers(0, 70), st.integers(0, 3))
def test_canonical_documents_same_as_definition(value: Any, depth: int, siblings: int) -> None:
    value = _nest(value, depth, siblings)
    try:
        data = orjson.dumps(value)
    except (orjson.JSONEncodeError, RecursionError):
        return  # ints beyond 64 bits: the text strategy covers them
    _assert_same_as_definition(data)
    if depth <= strictjson.MAX_DEPTH - 5 and all(
        abs(n) <= strictjson.MAX_SAFE_INTEGER for n in _ints(value)
    ):
        assert _typed(strictjson.loads_strict(data)) == _typed(value)


def _ints(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [n for item in value for n in _ints(item)]
    if isinstance(value, dict):
        return [n for item in value.values() for n in _ints(item)]
    return []


# --- the nesting check of the fast path -------------------------------------------------


bracket_strings = st.text(alphabet='[]{}"\\ab/', max_size=6)
nested = st.recursive(
    bracket_strings | st.integers(0, 9),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(bracket_strings, kids, max_size=3),
    max_leaves=10,
)


@settings(max_examples=examples(400), deadline=None)
@given(nested, st.integers(0, 70), st.integers(0, 3), st.sampled_from(["orjson", "ascii", "utf8"]))
def test_nesting_check_matches_a_character_scan(
    value: Any, depth: int, siblings: int, writer: str
) -> None:
    value = _nest(value, depth, siblings)
    if writer == "orjson":
        data = orjson.dumps(value)
    else:
        data = json.dumps(value, ensure_ascii=writer == "ascii").encode()
    expected = reference_depth(data.decode()) <= strictjson.MAX_DEPTH
    assert strictjson._nesting_within_limit(data) == expected


# --- the fast path serves what clients send ---------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_client_payloads_take_the_fast_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """submission_bytes and json.dumps(separators=(",", ":")) write canonical bytes.

    A behaviour pin, not a timing test: if pydantic's and orjson's number formats ever
    drift apart, payloads would silently take the slow definition again.
    """
    payload = submission_bytes(example_submission("hardnumbers-m2", seed=seed))
    compact = json.dumps(json.loads(payload), separators=(",", ":")).encode()
    expected = [_typed(strictjson._loads_strict_definition(p)) for p in (payload, compact)]

    def refuse(data: bytes) -> Any:
        raise AssertionError("took the slow path")

    monkeypatch.setattr(strictjson, "_loads_strict_definition", refuse)
    assert [_typed(strictjson.loads_strict(p)) for p in (payload, compact)] == expected


def test_other_input_types_behave_as_before() -> None:
    assert strictjson.loads_strict(bytearray(b'{"a":1}')) == {"a": 1}  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        strictjson.loads_strict('{"a":1}')  # type: ignore[arg-type]
