"""The strict parser refuses every lenient form the stdlib accepts."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specschema import PayloadParseError, loads_strict
from specschema.strictjson import MAX_SAFE_INTEGER


@pytest.mark.parametrize(
    "raw, message",
    [
        (b'{"a": 1, "a": 2}', "duplicate key 'a'"),
        (b'{"a": NaN}', "NaN"),
        (b'{"a": Infinity}', "Infinity"),
        (b'{"a": -Infinity}', "-Infinity"),
        (b'{"a": 9007199254740992}', "beyond"),
        (b'{"a": -9007199254740992}', "beyond"),
        (b'{"a": 1e400}', "infinity"),
        (b'{"a": "\xff"}', "not valid UTF-8"),
        (b'{"a": 1} x', "Extra data"),
        (b'{"a": 1}{"b": 2}', "Extra data"),
        (b"\xef\xbb\xbf{}", "byte-order mark"),
        (b"[" * 100_000 + b"]" * 100_000, "nesting"),
        (b'{"a": ' + b"1" * 5000 + b"}", "beyond"),
        (b"", "invalid JSON"),
    ],
)
def test_rejects(raw: bytes, message: str) -> None:
    with pytest.raises(PayloadParseError, match=message):
        loads_strict(raw)


def test_accepts_boundaries() -> None:
    assert loads_strict(b'{"a": 9007199254740991, "b": -9007199254740991}') == {
        "a": MAX_SAFE_INTEGER,
        "b": -MAX_SAFE_INTEGER,
    }
    assert loads_strict('{"ü": "ß"}'.encode()) == {"ü": "ß"}


def test_nested_duplicate_is_found() -> None:
    with pytest.raises(PayloadParseError, match="duplicate key 'x'"):
        loads_strict(b'{"a": [{"x": 1, "x": 1}]}')


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_round_trips_what_json_dumps_writes(value: object) -> None:
    assert loads_strict(json.dumps(value).encode()) == value


@given(st.text(alphabet=" {}[]\",:0123456789.eE-+tfnrul\\abc", max_size=60))
def test_never_crashes_on_garbage(text: str) -> None:
    try:
        loads_strict(text.encode())
    except PayloadParseError:
        pass
