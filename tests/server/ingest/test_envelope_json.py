"""The envelope's JSON: the orjson fast path decides as the definition does (the same value,
or the same refusal), on bodies a client sends and on each way a body can differ."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specserver.errors import Malformed
from specserver.ingest.checks import envelope_json_definition, parse_envelope_json
from tests.support.signed import valid_body

BODIES = [
    valid_body(seed=1),  # compact, as envelope_bytes writes it: the fast path
    valid_body(seed=2)[:-1] + b',"payloadType":"x"}',  # a duplicate key, compact
    json.dumps(json.loads(valid_body(seed=3))).encode(),  # spaces
    b'{"a":"\\u00e9"}', b'{"a":"\xc3\xa9"}', b'{"a":"\\ud800"}',  # escapes, raw, lone surrogate
    b'{"a":18446744073709551616}', b'{"a":9007199254740993}', b'{"a":-0}', b'{"a":1.0}',
    b'{"a":NaN}', b'\xef\xbb\xbf{"a":1}', b'{"a":1} ', b'{"a":1}x', b'\xff', b"",
    b"[" * 2000 + b"]" * 2000,
]


def _decided(parse: Any, body: bytes) -> tuple[str, Any]:
    try:
        return ("value", parse(body))
    except Malformed as exc:
        return ("refused", exc.message)


@pytest.mark.parametrize("body", BODIES)
def test_the_fast_path_decides_as_the_definition(body: bytes) -> None:
    assert _decided(parse_envelope_json, body) == _decided(envelope_json_definition, body)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=12,
)


@given(JSON, st.sampled_from([(",", ":"), (", ", ": ")]), st.booleans())
def test_any_json_value_is_decided_as_the_definition(value: Any, separators: tuple[str, str],
                                                     ascii_only: bool) -> None:
    body = json.dumps(value, separators=separators, ensure_ascii=ascii_only).encode()
    assert _decided(parse_envelope_json, body) == _decided(envelope_json_definition, body)
