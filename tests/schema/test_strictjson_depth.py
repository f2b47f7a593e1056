"""The fast nesting check gives the same answers as a character-by-character scan."""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specschema import strictjson
from specschema.errors import PayloadParseError


def _reference_too_deep(text: str) -> bool:
    depth = 0
    in_string = escaped = False
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
            if depth > strictjson.MAX_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _fast_too_deep(text: str) -> bool:
    try:
        strictjson._check_depth(text)
    except PayloadParseError:
        return True
    return False


pieces = st.sampled_from(['"', "\\", "[", "]", "{", "}", "a", ",", '\\"', "[[[[[[[[", "{{{{{{{{"])


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, max_size=200))
def test_same_answer_as_reference_scan(parts: list[str]) -> None:
    text = "".join(parts)
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
