"""Hostile submissions against the in-process app, on a tmp DuckDB file and on a private
PostgreSQL schema.

Each case asserts its status, the one JSON error shape, and that no table gained a row.
Run with ``-s`` to see the table of cases, statuses and error codes (RELIABILITY.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from specschema import envelope_bytes, key_id_of, sign_envelope, submission_bytes
from specschema.examples import example_submission
from specserver.http.app import create_app
from tests.reliability.apps import STORES, app_on, make_settings
from tests.reliability.hostile import (
    BODY_LIMIT,
    dict_bytes,
    payload_dict,
    signed,
    signing_key,
    valid_envelope,
    valid_payload,
)
from tests.reliability.hostile_cases import HostileCase, hostile_cases
from tests.reliability.storecount import app_engine, count_rows, refused_entries
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
CASES = hostile_cases()


def assert_error_shape(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"].strip()
    assert "\n" not in error["message"]
    assert "Traceback" not in response.text
    return error  # type: ignore[no-any-return]


@pytest.fixture(scope="module", params=STORES)
def served(tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[tuple[InProcessClient, Any]]:
    with app_on(request.param, tmp_path_factory.mktemp("hostile")) as app, \
            InProcessClient(app) as client:
        yield client, app


def _counted_stream(case: HostileCase, pulled: list[int]) -> Iterator[bytes]:
    assert case.stream is not None
    for chunk in case.stream():
        pulled.append(len(chunk))
        yield chunk


def test_control_is_accepted_once(served: tuple[InProcessClient, Any]) -> None:
    """The unbroken submission is stored (201), and the same bytes again answer 200."""
    client, app = served
    before = count_rows(app_engine(app))
    body = valid_envelope(1000)
    first = client.post(URL, content=body)
    assert first.status_code == 201, first.text
    receipt = first.json()
    assert receipt["submission_id"] == str(example_submission(seed=1000).submission_id)
    assert receipt["key_id"] == key_id_of(bytes(signing_key(1000).verify_key))
    after = count_rows(app_engine(app))
    assert after["submissions"] == before["submissions"] + 1
    assert after["trials"] == before["trials"] + 15
    again = client.post(URL, content=body)
    assert again.status_code == 200, again.text
    assert again.json()["submission_id"] == receipt["submission_id"]
    assert count_rows(app_engine(app)) == after


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_case(served: tuple[InProcessClient, Any], case: HostileCase) -> None:
    client, app = served
    before = count_rows(app_engine(app))
    refused_before = refused_entries(app_engine(app))
    pulled: list[int] = []
    if case.stream is not None:
        response = client.post(URL, stream=_counted_stream(case, pulled),
                               headers={"content-type": "application/json"})
    else:
        response = client.post(URL, content=case.content(), headers=case.headers)
    error = assert_error_shape(response)
    print(f"{case.name:45s} expected {case.expected} got {response.status_code} "
          f"{error['code']}: {error['message'][:90]}")
    assert response.status_code == case.expected, response.text
    assert count_rows(app_engine(app)) == before
    # refused after the signature verified: logged (its hash), and nothing else
    logged = case.stage in ("json", "schema", "protocol", "consistency")
    assert refused_entries(app_engine(app)) - refused_before == (1 if logged else 0)
    if case.stage == "signature":
        assert error["code"] == "bad_signature"
    if case.expected == 413:
        assert error["code"] == "body_too_large"
    if pulled:  # refused while reading: the server stopped pulling soon after the limit
        assert sum(pulled) <= BODY_LIMIT + 2 * max(pulled), sum(pulled)


def test_declared_content_length_over_limit_refused_before_reading(
    served: tuple[InProcessClient, Any],
) -> None:
    """Content-Length above the limit is refused up front; the body is never pulled."""
    client, app = served
    pulled: list[int] = []

    def body() -> Iterator[bytes]:
        for _ in range(64):
            pulled.append(1)
            yield b"A" * 16384

    response = client.post(URL, stream=body(),
                           headers={"content-length": str(64 * 16384)})
    assert response.status_code == 413
    assert_error_shape(response)
    assert sum(pulled) <= 2


# --- cases that need state: a stored id, a banned key ------------------------------------


def test_same_id_with_other_bytes_is_409(served: tuple[InProcessClient, Any]) -> None:
    client, app = served
    original = valid_envelope(2000)
    assert client.post(URL, content=original).status_code == 201
    before = count_rows(app_engine(app))
    data = payload_dict(2000)
    data["note"] = "changed after the fact"
    response = client.post(URL, content=signed(dict_bytes(data), signing_key(2000)))
    error = assert_error_shape(response)
    print(f"same_id_other_bytes -> {response.status_code} {error['code']}")
    assert response.status_code == 409
    assert count_rows(app_engine(app)) == before
    stored = client.get(f"{URL}/{example_submission(seed=2000).submission_id}")
    assert stored.status_code == 200
    assert "changed after the fact" not in stored.text


def test_same_payload_signed_by_another_key_takes_nothing_over(
    served: tuple[InProcessClient, Any],
) -> None:
    """Key B re-signs key A's stored payload: refused, and the stored owner stays A."""
    client, app = served
    payload = valid_payload(2001)
    assert client.post(URL, content=signed(payload, signing_key(2001))).status_code == 201
    before = count_rows(app_engine(app))
    response = client.post(URL, content=signed(payload, signing_key(2002)))
    error = assert_error_shape(response)
    print(f"same_payload_other_key -> {response.status_code} {error['code']}")
    # 409 (other envelope bytes) or 200 with A's original receipt (same payload bytes):
    # either way B gains nothing.
    assert response.status_code in (200, 409)
    if response.status_code == 200:
        assert response.json()["key_id"] == key_id_of(bytes(signing_key(2001).verify_key))
    assert count_rows(app_engine(app)) == before
    stored = client.get(f"{URL}/{example_submission(seed=2001).submission_id}").json()
    assert key_id_of(bytes(signing_key(2001).verify_key)) in json.dumps(stored)
    assert key_id_of(bytes(signing_key(2002).verify_key)) not in json.dumps(stored)


def _ban(app: Any, key_id: str) -> None:
    from datetime import UTC, datetime

    from sqlalchemy import insert

    from specserver.store import tables

    app.state.store.write(lambda conn: conn.execute(insert(tables.bans).values(
        key_id=key_id, reason="reliability test",
        banned_at=datetime.now(UTC).replace(tzinfo=None))))
    app.state.store.invalidate_bans()


def test_banned_key_is_403_and_nothing_stored(served: tuple[InProcessClient, Any]) -> None:
    client, app = served
    key = signing_key(3000)
    _ban(app, key_id_of(bytes(key.verify_key)))
    before = count_rows(app_engine(app))
    response = client.post(URL, content=valid_envelope(3000))
    error = assert_error_shape(response)
    print(f"banned_key -> {response.status_code} {error['code']}")
    assert response.status_code == 403
    assert count_rows(app_engine(app)) == before
    # Checks run in order: a banned key's inconsistent submission gets its 422 first.
    data = payload_dict(3002)
    data["configs"][0]["trials"][0]["eval_count"] = 999
    invalid = client.post(URL, content=signed(dict_bytes(data), key))
    assert invalid.status_code == 422, invalid.text
    # An unbanned key is still served.
    assert client.post(URL, content=valid_envelope(3001)).status_code == 201


# --- floods ------------------------------------------------------------------------------


def _distinct(seed: int, key_seed: int) -> bytes:
    return envelope_bytes(sign_envelope(
        submission_bytes(example_submission(seed=seed)), signing_key(key_seed)))


def test_flood_from_one_key_and_one_address(tmp_path: Path) -> None:
    """One key from one address floods: 429 with Retry-After; another contributor is served."""
    settings = make_settings(tmp_path, rate_key_per_minute=6, rate_key_burst=5,
                             rate_addr_per_minute=12, rate_addr_burst=10)
    app = create_app(settings)
    flooder = ("198.51.100.7", 40000)
    statuses: list[int] = []
    retry_after: list[str] = []
    with InProcessClient(app) as client:
        for i in range(40):
            response = client.post(URL, content=_distinct(5000 + i, 77), peer=flooder)
            statuses.append(response.status_code)
            if response.status_code == 429:
                assert_error_shape(response)
                retry_after.append(response.headers.get("retry-after", ""))
        accepted = statuses.count(201)
        other = client.post(URL, content=_distinct(6000, 78), peer=("192.0.2.55", 41000))
        rows = count_rows(app_engine(app))
    print(f"flood one key+address: 40 sent, {accepted} x 201, {statuses.count(429)} x 429; "
          f"other contributor -> {other.status_code}; Retry-After seen {sorted(set(retry_after))}")
    assert set(statuses) == {201, 429}
    assert accepted == 5  # the key's burst
    assert statuses[:5] == [201] * 5
    assert all(v.isdigit() and int(v) >= 1 for v in retry_after)
    assert other.status_code == 201, other.text
    assert rows["submissions"] == accepted + 1


def test_flood_of_many_keys_from_one_address(tmp_path: Path) -> None:
    """A new key per request does not escape the per-address limit, nor does a forged
    X-Forwarded-For from a peer that is not a trusted proxy."""
    settings = make_settings(tmp_path, rate_key_per_minute=60, rate_key_burst=50,
                             rate_addr_per_minute=6, rate_addr_burst=5)
    app = create_app(settings)
    flooder = ("198.51.100.8", 40000)
    statuses: list[int] = []
    with InProcessClient(app) as client:
        for i in range(20):
            forged = {"x-forwarded-for": f"10.9.{i}.1"}
            response = client.post(URL, content=_distinct(7000 + i, 100 + i), peer=flooder,
                                   headers=forged)
            statuses.append(response.status_code)
        other = client.post(URL, content=_distinct(7100, 200), peer=("192.0.2.56", 41000))
        rows = count_rows(app_engine(app))
    print(f"flood many keys one address: 20 sent, {statuses.count(201)} x 201, "
          f"{statuses.count(429)} x 429; other -> {other.status_code}")
    assert statuses.count(201) == 5
    assert statuses.count(429) == 15
    assert other.status_code == 201
    assert rows["submissions"] == 6


def test_trusted_proxy_forwarded_address_is_used(tmp_path: Path) -> None:
    """Behind a trusted proxy the limit applies per forwarded client, not per proxy."""
    settings = make_settings(tmp_path, rate_key_per_minute=60, rate_key_burst=50,
                             rate_addr_per_minute=6, rate_addr_burst=2,
                             trusted_proxies=["10.0.0.0/8"])
    app = create_app(settings)
    proxy = ("10.0.0.2", 40000)
    statuses: list[tuple[str, int]] = []
    with InProcessClient(app) as client:
        for i in range(6):
            client_ip = f"198.51.100.{i % 3 + 20}"
            response = client.post(URL, content=_distinct(8000 + i, 300 + i), peer=proxy,
                                   headers={"x-forwarded-for": client_ip})
            statuses.append((client_ip, response.status_code))
        flood = [client.post(URL, content=_distinct(8100 + i, 400 + i), peer=proxy,
                             headers={"x-forwarded-for": "198.51.100.99"}).status_code
                 for i in range(4)]
    assert all(status == 201 for _, status in statuses), statuses
    assert flood == [201, 201, 429, 429]


@pytest.mark.parametrize("forwarded", [
    "", "garbage", "1.2.3.4, garbage", "999.1.1.1", "::1, ::ffff:1.2.3.4", "[::1]:80",
    "1.2.3.4\u0000", "🍎", ",,,,", "1.2.3.4, " * 2000,
])
def test_garbage_forwarded_for_from_a_trusted_proxy(tmp_path: Path, forwarded: str) -> None:
    """X-Forwarded-For is parsed, never trusted blindly and never a 5xx."""
    settings = make_settings(tmp_path, trusted_proxies=["10.0.0.0/8"], rate_addr_per_minute=60,
                             rate_addr_burst=50)
    app = create_app(settings)
    with InProcessClient(app) as client:
        response = client.post(URL, content=valid_envelope(9500), peer=("10.0.0.3", 40000),
                               headers={"x-forwarded-for": forwarded.encode("utf-8")})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("store", STORES)
def test_concurrent_duplicates_are_stored_once(tmp_path: Path, store: str) -> None:
    """The same envelope 20 times at once: one 201, nineteen 200. The same id with ten
    different bodies at once: one 201, nine 409. Stored once each, complete."""
    with app_on(store, tmp_path) as app:
        _concurrent_duplicates(app)


def _concurrent_duplicates(app: Any) -> None:
    same = valid_envelope(9600)
    rivals = []
    for i in range(10):
        data = payload_dict(9601)
        data["note"] = f"variant {i}"
        rivals.append(signed(dict_bytes(data), signing_key(9601)))
    with InProcessClient(app) as client, ThreadPoolExecutor(20) as pool:
        first = list(pool.map(lambda body: client.post(URL, content=body).status_code,
                              [same] * 20))
        second = list(pool.map(lambda body: client.post(URL, content=body).status_code, rivals))
        rows = count_rows(app_engine(app))
    print(f"concurrent duplicates: same bytes x20 -> {sorted(first)}; same id, 10 bodies -> "
          f"{sorted(second)}")
    assert sorted(first) == [200] * 19 + [201]
    assert sorted(second) == [201] + [409] * 9
    assert rows["submissions"] == 2 and rows["trials"] == 30 and rows["envelopes"] == 2


def test_ten_mb_string_past_a_raised_limit_reaches_the_parser(tmp_path: Path) -> None:
    """With the body limit raised to 16 MiB, a signed payload whose note is a 10 MB string
    gets through size, envelope and signature, and is refused by the schema (note <= 500
    characters): 422, nothing stored."""
    import time

    payload = payload_dict(9700)
    payload["note"] = "x" * (10 * 1024 * 1024)
    body = signed(dict_bytes(payload), signing_key(9700))
    with app_on("duckdb", tmp_path, max_body_bytes=16 * 1024 * 1024) as app, \
            InProcessClient(app) as client:
        before = count_rows(app_engine(app))
        started = time.monotonic()
        response = client.post(URL, content=body)
        took = time.monotonic() - started
        after = count_rows(app_engine(app))
    error = assert_error_shape(response)
    print(f"10 MB string, limit 16 MiB: {len(body)} bytes -> {response.status_code} "
          f"{error['code']} in {took:.2f}s")
    assert response.status_code == 422 and error["code"] == "schema_invalid"
    assert "note" in error["message"]
    assert after == before
