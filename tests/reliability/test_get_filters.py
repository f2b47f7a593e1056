"""Every public GET with SQL-looking, oversized and Unicode values: 422 or correct, never 5xx.

The GET routes are discovered from the app itself (so a new page or endpoint is covered
without editing this file). Each query parameter a route documents or reads is sent each
hostile value; path parameters get them too. Equality filters must return only rows that
really equal the value: the store holds submissions whose chip *is* an SQL-looking and a
Unicode string, and filtering by those returns exactly them.
Run with ``-s`` for the figures (requests sent, statuses seen).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from specschema import envelope_bytes, sign_envelope, submission_bytes
from specschema.examples import EXAMPLE_MACHINES, example_submission
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import signing_key
from tests.support.inprocess import InProcessClient

SQL_CHIP = "Robert'); DROP TABLE submissions;--"
UNICODE_CHIP = "芯片 M2 ✓ 🍎 Pro"  # canonical already: stored names are NFKC
STRING_FILTERS = ("target", "draft", "chip", "ollama_version")
# Parameters every listing route reads (public_api reads them from the query string).
KNOWN_PARAMS = ("protocol", "target", "draft", "chip", "memory_gb", "ollama_version", "os",
                "verdict", "group_by", "view", "sort", "limit", "offset", "cursor", "format")

HOSTILE_VALUES = [
    "' OR '1'='1",
    "'; DROP TABLE submissions; --",
    '" OR ""="',
    "1 UNION SELECT key_id, reason FROM bans --",
    "1) OR pg_sleep(5)--",
    "%",
    "_",
    "\\",
    "*",
    "",
    " ",
    "-1",
    "1e308",
    "99999999999999999999999999",
    "NaN",
    "0x10",
    "A" * 5_000,
    "A" * 60_000,  # httpx refuses URLs over 64 KiB; uvicorn stops at its own limit
    "芯片",
    "🍎",
    "\u202egnp.exe",
    "\x00",
    "a\x00b",
    "e\u0301",
    "Ｓｅｌｅｃｔ",
    SQL_CHIP,
    UNICODE_CHIP,
]
# Raw query strings that are not valid UTF-8 once decoded, or not well-formed at all.
RAW_QUERIES = ["chip=%FF%FE", "chip=%ED%A0%80", "chip=%", "chip=%zz", "chip", "=x", "&&&",
               "chip=a&chip=b", "verdict=confirmed,%00", "group_by=chip,%27"]


def _store(client: InProcessClient, seed: int, chip: str) -> str:
    machine = dict(EXAMPLE_MACHINES[0], chip=chip)
    sub = example_submission(seed=seed, machine=machine)
    body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(seed)))
    response = client.post("/v1/submissions", content=body)
    assert response.status_code == 201, response.text
    return str(sub.submission_id)


@pytest.fixture(scope="module", params=STORES)
def loaded(tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[tuple[InProcessClient, Any]]:
    tmp: Path = tmp_path_factory.mktemp("getfilters")
    with app_on(request.param, tmp) as app, InProcessClient(app) as client:
        ids = {
            "plain": [_store(client, 100 + i, "Apple M2") for i in range(3)],
            "sql": [_store(client, 200, SQL_CHIP)],
            "unicode": [_store(client, 300, UNICODE_CHIP)],
        }
        yield client, {"app": app, "ids": ids, "store": request.param}


def _walk(routes: Any, prefix: str = "") -> Iterator[tuple[str, set[str]]]:
    """(path, methods) of every route, including those of included routers."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            yield from _walk(inner.routes, prefix + (getattr(context, "prefix", "") or ""))
        elif getattr(route, "path", None) is not None:
            yield prefix + route.path, set(getattr(route, "methods", None) or ())


def _get_routes(app: Any) -> list[str]:
    skip = {"/docs", "/redoc", "/docs/oauth2-redirect"}
    return sorted({path for path, methods in _walk(app.routes)  # admin: test_schemathesis
                   if "GET" in methods and path not in skip and not path.startswith("/admin")})


def _fill(path: str, value: str) -> str:
    """Put ``value`` in every {param} of a route path."""
    out = path
    while "{" in out:
        start, end = out.index("{"), out.index("}")
        out = out[:start] + quote(value, safe="") + out[end + 1:]
    return out


def _check(response: Any, url: str) -> None:
    assert response.status_code < 500, (
        f"{url[:200]} -> {response.status_code} {response.text[:300]}")
    if response.status_code >= 400:
        ctype = response.headers.get("content-type", "")
        if "json" in ctype:
            body = response.json()
            assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}


@pytest.mark.slow  # ~3,000 requests per store: 20-30 s on the shared 2-core machine
def test_every_get_route_survives_hostile_values(loaded: tuple[InProcessClient, Any]) -> None:
    client, ctx = loaded
    routes = _get_routes(ctx["app"])
    assert {"/v1/leaderboard", "/v1/aggregates", "/v1/submissions", "/v1/export",
            "/v1/stats", "/v1/protocols"} <= set(routes), routes
    statuses: Counter[int] = Counter()
    sent = 0
    for route in routes:
        if "{" in route:
            for value in HOSTILE_VALUES:
                url = _fill(route, value)
                if url.rstrip("/") == route.split("{")[0].rstrip("/"):
                    continue  # an empty value turns the route into another one
                response = client.get(url)
                _check(response, url)
                statuses[response.status_code] += 1
                sent += 1
            continue
        for name in KNOWN_PARAMS:
            probe = client.get(route, params={name: "x"})
            unknown = probe.status_code == 422 and "unknown_parameter" in probe.text
            # A parameter the route refuses by name gets a few values, not all of them.
            for value in HOSTILE_VALUES[:3] if unknown else HOSTILE_VALUES:
                response = client.get(route, params={name: value})
                _check(response, f"{route}?{name}={value[:40]!r}")
                statuses[response.status_code] += 1
                sent += 1
        for raw in RAW_QUERIES:
            response = client.get(f"{route}?{raw}")
            _check(response, f"{route}?{raw}")
            statuses[response.status_code] += 1
            sent += 1
    print(f"GET filters ({ctx['store']}): {len(routes)} routes, {sent} requests, "
          f"statuses {dict(statuses)}")
    assert not any(status >= 500 for status in statuses)


@pytest.mark.parametrize("name", STRING_FILTERS)
def test_string_filters_match_exactly(loaded: tuple[InProcessClient, Any], name: str) -> None:
    """SQL-looking and Unicode values are plain strings: they match nothing they don't equal."""
    client, _ctx = loaded
    for value in HOSTILE_VALUES:
        if value in (SQL_CHIP, UNICODE_CHIP) and name == "chip":
            continue
        response = client.get("/v1/submissions", params={name: value})
        _check(response, f"/v1/submissions?{name}={value[:40]!r}")
        if response.status_code == 200 and value.strip():
            assert response.json()["items"] == [], (name, value[:40])


@pytest.mark.parametrize("chip,which", [(SQL_CHIP, "sql"), (UNICODE_CHIP, "unicode"),
                                        ("Apple M2", "plain")])
def test_chip_filter_returns_exactly_the_matching_submissions(
    loaded: tuple[InProcessClient, Any], chip: str, which: str
) -> None:
    client, ctx = loaded
    response = client.get("/v1/submissions", params={"chip": chip})
    assert response.status_code == 200, response.text
    found = sorted(item["submission_id"] for item in response.json()["items"])
    assert found == sorted(ctx["ids"][which])
    board = client.get("/v1/leaderboard", params={"chip": chip})
    assert board.status_code == 200, board.text
    # Groups need several contributors to be shown, and the speedup view leaves out drafts
    # that were never applied; the verdict counts cover every matched draft result: two
    # draft configs per hardnumbers-m2 submission.
    assert sum(board.json()["verdict_counts"].values()) == 2 * len(ctx["ids"][which])
    export = client.get("/v1/export", params={"chip": chip, "format": "jsonl"})
    assert export.status_code == 200
    lines = [line for line in export.text.splitlines() if line.strip()]
    assert len(lines) == 3 * len(ctx["ids"][which])  # one row per submission x config
    assert all(any(i in line for i in ctx["ids"][which]) for line in lines)


def test_store_intact_after_injection_attempts(loaded: tuple[InProcessClient, Any]) -> None:
    client, ctx = loaded
    for value in HOSTILE_VALUES[:6]:
        for name in STRING_FILTERS:
            client.get("/v1/leaderboard", params={name: value})
    stats = client.get("/v1/stats")
    assert stats.status_code == 200
    listing = client.get("/v1/submissions", params={"limit": "500"}).json()["items"]
    expected = {i for ids in ctx["ids"].values() for i in ids}
    assert {item["submission_id"] for item in listing} >= expected


def test_parquet_export_filters_are_not_injectable(loaded: tuple[InProcessClient, Any]) -> None:
    """The parquet export renders its filters into SQL text (DuckDB COPY): SQL-looking values
    must still only match themselves."""
    import io

    import pyarrow.parquet as pq

    client, ctx = loaded
    for value in HOSTILE_VALUES:
        response = client.get("/v1/export", params={"chip": value, "format": "parquet"})
        _check(response, f"/v1/export?format=parquet&chip={value[:40]!r}")
        if response.status_code != 200:
            continue
        table = pq.read_table(io.BytesIO(response.content))
        ids = set(table.column("submission_id").to_pylist()) if table.num_rows else set()
        if not value.strip():  # a blank filter is no filter
            wanted = {i for group in ctx["ids"].values() for i in group}
        else:
            which = {SQL_CHIP: "sql", UNICODE_CHIP: "unicode"}.get(value)
            wanted = set(ctx["ids"][which]) if which else set()
        assert ids == wanted, value[:40]
