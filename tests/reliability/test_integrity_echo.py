"""Errors never echo the whole input: a 422 repeated a bad filter value twice (in its message
and its details: 60 KB in, 120 KB out), and an envelope's unknown field or payloadType came
back whole. Every error answer now quotes at most a few hundred characters of any one string
(``specserver.http.errors.capped``) and counts the rest.

Each request carries a megabyte-long value: the query strings go to the app as a raw ASGI
request (httpx refuses a URL that long; ``specserver serve`` would answer 431 before the app,
so this is the app's own guard), the envelopes as a POST under a raised body limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specserver.http.errors import DETAIL_ITEMS, DETAIL_LIMIT, MESSAGE_LIMIT, capped_details
from tests.reliability.apps import app_on
from tests.reliability.test_hostile_inputs import assert_error_shape
from tests.support.inprocess import InProcessClient

MEGABYTE = 1 << 20
LONG = "x" * MEGABYTE
# The most an error answer may hold here: a message and a few capped strings.
MOST = 4096


@pytest.fixture
def client(tmp_path: Path) -> Iterator[InProcessClient]:
    with app_on("duckdb", tmp_path, max_body_bytes=4 * MEGABYTE) as app, \
            InProcessClient(app) as c:
        yield c


async def _raw_get(app: Any, path: str, query: bytes) -> tuple[int, bytes]:
    """A GET straight into the ASGI app: (status, body)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": query, "root_path": "", "headers": [(b"host", b"testserver")],
             "client": ("203.0.113.10", 50000), "server": ("testserver", 80)}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


@pytest.mark.parametrize(("path", "query"), [
    ("/v1/leaderboard", "chip=" + LONG),
    ("/v1/leaderboard", "view=" + LONG),
    ("/v1/leaderboard", "group_by=" + LONG),
    ("/v1/leaderboard", "group_by=" + ",".join("x" * 3 for _ in range(MEGABYTE // 4))),
    ("/v1/leaderboard", "limit=" + LONG),
    ("/v1/leaderboard", LONG + "=1"),
    ("/v1/aggregates", "target=" + LONG),
    ("/v1/submissions", "cursor=" + LONG),
    ("/v1/export", "format=" + LONG),
], ids=["chip", "view", "group_by", "group_by_many", "limit", "unknown_name", "target",
        "cursor", "format"])
def test_a_megabyte_long_query_value_is_quoted_not_echoed(client: InProcessClient, path: str,
                                                          query: str) -> None:
    status, body = client.run(_raw_get(client.app, path, query.encode()))
    assert status == 422, body[:300]
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message", "details"}
    print(f"{path}?{query[:12]}...: {len(query):,} bytes in, {len(body):,} out ({error['code']})")
    assert len(body) < MOST, (len(body), error["message"][:200])
    assert "\n" not in error["message"]
    if "x" * 100 in error["message"]:  # it quotes the value: a part of it, and says so
        assert "more characters)" in error["message"]


@pytest.mark.parametrize("envelope", [
    {"payload": "e30=", "payloadType": LONG, "signatures": []},
    {LONG: 1},
], ids=["payload_type", "unknown_field"])
def test_a_megabyte_long_envelope_field_is_quoted_not_echoed(client: InProcessClient,
                                                             envelope: dict[str, Any]) -> None:
    response = client.post("/v1/submissions", content=json.dumps(envelope).encode())
    error = assert_error_shape(response)
    assert response.status_code == 400 and error["code"] == "bad_envelope"
    assert len(response.content) < MOST, len(response.content)
    assert "more characters)" in error["message"]
    assert len(error["message"]) < MESSAGE_LIMIT + 40


def test_details_keep_their_shape_and_lose_their_length() -> None:
    details = {"value": LONG, "unknown": ["a"] * 1000, LONG: 1,
               "paths": [{"path": "a", "message": LONG}] * 3, "limit": 5}
    cut = capped_details(details)
    rest = MEGABYTE - DETAIL_LIMIT
    assert cut["value"] == "x" * DETAIL_LIMIT + f"\u2026 ({rest:,} more characters)"
    assert cut["unknown"] == ["a"] * DETAIL_ITEMS + [f"\u2026 ({1000 - DETAIL_ITEMS:,} more)"]
    assert cut["limit"] == 5 and len(cut["paths"]) == 3
    assert all(len(p["message"]) < DETAIL_LIMIT + 40 for p in cut["paths"])
    assert max(len(k) for k in cut) < DETAIL_LIMIT + 40
    assert capped_details({"short": "ok", "n": None}) == {"short": "ok", "n": None}
