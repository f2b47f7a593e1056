"""The fast nesting check gives the same answers as a character-by-character scan."""

import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specschema import strictjson
from specschema.errors import PayloadParseError
from tests.support.tiers import examples


def scan(text: str) -> tuple[int, bool]:
    """The deepest bracket nesting outside strings, and whether a backslash stands outside a
    string (invalid JSON, which the parser refuses right after the depth check), character by
    character (the definition the fast checks are held to)."""
    depth = deepest = 0
    in_string = escaped = stray_backslash = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
        elif ch == "\\":
            stray_backslash = True
    return deepest, stray_backslash


def reference_depth(text: str) -> int:
    return scan(text)[0]


def backslash_outside_strings(text: str) -> bool:
    return scan(text)[1]


def _reference_too_deep(text: str) -> bool:
    return reference_depth(text) > strictjson.MAX_DEPTH


def _fast_too_deep(text: str) -> bool:
    try:
        strictjson._check_depth(text)
    except PayloadParseError:
        return True
    return False


pieces = st.sampled_from(['"', "\\", "[", "]", "{", "}", "a", ",", '\\"', "[[[[[[[[", "{{{{{{{{"])


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(pieces, max_size=200))
def test_same_answer_as_reference_scan(parts: list[str]) -> None:
    text = "".join(parts)
    assume(not backslash_outside_strings(text))
    assert _fast_too_deep(text) == _reference_too_deep(text)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 65,
        '"' + "[" * 100,
        '["' + '\\"' * 50 + '"' + "[" * 64 + "]",
        '{"a":"\\\\"}' + "[" * 64,
    ],
)
def test_known_cases(text: str) -> None:
    assert _fast_too_deep(text) == _reference_too_deep(text)


def test_unterminated_strings_stay_linear() -> None:
    hostile = '"' + '\\"' * 200_000  # one string that never closes, full of escaped quotes
    started = time.perf_counter()
    strictjson._check_depth(hostile)
    assert time.perf_counter() - started < 2.0


# --- the fast path of loads_strict gives the same values and errors as the full hooks ------


def _reference_loads(data: bytes) -> object:
    import json

    text = data.decode("utf-8")
    strictjson._check_depth(text)
    try:
        return json.loads(text, object_pairs_hook=strictjson._pairs_no_duplicates,
                          parse_constant=strictjson._reject_constant,
                          parse_int=strictjson._bounded_int,
                          parse_float=strictjson._finite_float)
    except PayloadParseError:
        raise
    except json.JSONDecodeError as exc:
        raise PayloadParseError(
            f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (RecursionError, ValueError) as exc:
        raise PayloadParseError(f"invalid JSON: {exc}") from None


def _outcome(fn: object, data: bytes) -> tuple[str, object]:
    try:
        return "ok", fn(data)  # type: ignore[operator]
    except PayloadParseError as exc:
        return "error", str(exc)


json_tokens = st.sampled_from([
    "{", "}", "[", "]", ",", ":", '"a"', '"b"', '"NaN"', "NaN", "-Infinity", "Infinity", "1",
    "-0", "9007199254740991", "9007199254740992", "12345678901234567890", "1.5", "1e308",
    "1e309", "2.5E-400", "0.1234567890123456789", "true", "null", " ", '"\\"[["',
])


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(json_tokens, max_size=30))
def test_loads_strict_same_as_full_hooks(tokens: list[str]) -> None:
    data = "".join(tokens).encode()
    assert _outcome(strictjson.loads_strict, data) == _outcome(_reference_loads, data)


@pytest.mark.parametrize("text", [
    '{"a": 1, "a": 2}', '{"x": NaN}', '[9007199254740992]', '[1e400]', '{"a": [1, 2.5]}',
    '{"a": {"b": 1, "c": 2, "b": 3}}',
])
def test_loads_strict_known_cases_match(text: str) -> None:
    data = text.encode()
    assert _outcome(strictjson.loads_strict, data) == _outcome(_reference_loads, data)
