"""POST /v1/submissions in-process, its limits and edges: banned keys, rates per key and per
address, forwarded addresses, the one error shape for the framework's errors, health,
OpenAPI, the storage switch, restarts."""

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from specschema import SCHEMA_VERSIONS
from specserver.store import migrations, tables
from tests.server.http.test_ingest_api import assert_nothing_stored
from tests.support.served import URL, Served, error_of, settings_for
from tests.support.signed import payload_dict, sign_dict, signer, valid_body


def _ban(s: Served, key_seed: int) -> None:
    key_id = hashlib.sha256(bytes(signer(key_seed).verify_key)).hexdigest()
    with s.store.engine.begin() as conn:
        conn.execute(insert(tables.bans).values(key_id=key_id, reason="test",
                                                banned_at=datetime(2026, 1, 1)))


def test_banned_key_is_403_after_the_validity_checks(served: Served) -> None:
    _ban(served, 5)
    response = served.post(valid_body(seed=28, key_seed=5))
    assert response.status_code == 403
    assert error_of(response)["code"] == "key_banned"
    broken = payload_dict(29)
    broken["configs"][0]["trials"][0]["eval_count"] = 999
    assert served.post(sign_dict(broken, key_seed=5)).status_code == 422  # checks 1-5 first
    assert served.post(valid_body(seed=30, key_seed=6)).status_code == 201
    assert served.counts()["submissions"] == 1


def test_ban_through_the_writer_invalidates_the_cache(tmp_path: Path) -> None:
    with Served(settings_for(tmp_path, ban_cache_s=3600)) as s:
        assert s.post(valid_body(seed=31, key_seed=7)).status_code == 201
        key_id = hashlib.sha256(bytes(signer(7).verify_key)).hexdigest()
        s.store.write(lambda conn: conn.execute(insert(tables.bans).values(
            key_id=key_id, reason="spam", banned_at=datetime(2026, 1, 1))))
        assert s.post(valid_body(seed=32, key_seed=7)).status_code == 201  # still cached
        s.store.invalidate_bans()
        assert s.post(valid_body(seed=33, key_seed=7)).status_code == 403


def test_rate_limit_per_key_is_429_with_retry_after(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, rate_key_per_minute=1, rate_key_burst=2)
    with Served(settings) as s:
        statuses = [s.post(valid_body(seed=40 + i, key_seed=8),
                           peer=(f"198.51.100.{i}", 1)).status_code for i in range(4)]
        assert statuses == [201, 201, 429, 429]
        limited = s.post(valid_body(seed=45, key_seed=8))
        assert int(limited.headers["retry-after"]) >= 1
        assert error_of(limited)["details"] == {"scope": "key"}
        assert s.post(valid_body(seed=46, key_seed=9)).status_code == 201  # another key
        assert s.counts()["submissions"] == 3


def test_rate_limit_per_address(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, rate_addr_per_minute=1, rate_addr_burst=2)
    with Served(settings) as s:
        flood = [s.post(valid_body(seed=50 + i, key_seed=100 + i),
                        peer=("198.51.100.9", 1)).status_code for i in range(3)]
        assert flood == [201, 201, 429]
        assert s.post(valid_body(seed=55, key_seed=200), peer=("192.0.2.1", 1)).status_code == 201


def test_forwarded_for_only_from_trusted_proxies(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, rate_addr_per_minute=1, rate_addr_burst=1,
                            trusted_proxies=["10.0.0.0/8"])
    with Served(settings) as s:
        def post(seed: int, peer: str, forwarded: str) -> int:
            return s.post(valid_body(seed=seed, key_seed=seed), peer=(peer, 1),
                          headers={"X-Forwarded-For": forwarded}).status_code
        # Through the trusted proxy: one bucket per forwarded client.
        assert [post(60, "10.0.0.2", "192.0.2.10"), post(61, "10.0.0.2", "192.0.2.11")] == [
            201, 201]
        assert post(62, "10.0.0.2", "192.0.2.10") == 429
        # From an untrusted peer the header is ignored: the peer's own bucket counts.
        assert post(63, "198.51.100.50", "192.0.2.12") == 201
        assert post(64, "198.51.100.50", "192.0.2.13") == 429


def test_framework_errors_use_the_one_shape(served: Served) -> None:
    missing = served.get("/nowhere")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    wrong_method = served.request("DELETE", URL)
    assert wrong_method.status_code == 405
    assert error_of(wrong_method)["code"] == "method_not_allowed"
    bad_id = served.get("/v1/submissions/not-a-uuid")
    assert bad_id.status_code == 422 and error_of(bad_id)["code"] == "invalid_request"
    unknown = served.get("/v1/submissions/00000000-0000-4000-8000-000000000000")
    assert unknown.status_code == 404 and error_of(unknown)["code"] == "not_found"


def test_unexpected_exception_is_500_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specserver.http import submissions

    def explode(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(submissions, "prepare_submission", explode)
    with Served(settings_for(tmp_path)) as s:
        response = s.post(valid_body(seed=70))
        assert response.status_code == 500
        error = error_of(response)
        assert error["code"] == "internal"
        assert "secret" not in response.text


def test_healthz_and_openapi(served: Served) -> None:
    health = served.get("/healthz")
    assert health.status_code == 200
    # store_version is the store's migration, named for what it is; schema_version is the
    # same number under its first name (the docs had it as the wire version 1).
    assert health.json() == {"status": "ok", "store": "duckdb",
                             "store_version": migrations.LATEST,
                             "submission_schema_versions": list(SCHEMA_VERSIONS),
                             "schema_version": migrations.LATEST}
    spec = served.get("/openapi.json").json()
    post = spec["paths"][URL]["post"]
    assert {"200", "201", "400", "401", "403", "409", "413", "422", "429"} <= set(post["responses"])
    assert served.get("/docs").status_code == 200


def test_store_disabled_validates_but_stores_nothing(tmp_path: Path) -> None:
    with Served(settings_for(tmp_path, store_enabled=False)) as s:
        assert s.post(valid_body(seed=71)).status_code == 201
        bad = payload_dict(72)
        bad["configs"][0]["trials"][0]["eval_count"] = 999
        assert s.post(sign_dict(bad)).status_code == 422
        assert_nothing_stored(s)


def test_nothing_connects_at_import_and_create_app(tmp_path: Path) -> None:
    from specserver.http.app import create_app

    create_app(settings_for(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_data_survives_a_restart(tmp_path: Path) -> None:
    body = valid_body(seed=73)
    with Served(settings_for(tmp_path)) as s:
        assert s.post(body).status_code == 201
    with Served(settings_for(tmp_path)) as s:
        assert s.post(body).status_code == 200
        assert s.counts()["trials"] == 15


def test_documented_route_answers_like_the_fast_path(tmp_path: Path) -> None:
    """The FastAPI route (what OpenAPI documents) and the bare ASGI fast path share one
    implementation; drive the route by calling FastAPI's own __call__."""

    import httpx
    from fastapi import FastAPI

    with Served(settings_for(tmp_path)) as s:
        async def plain(scope: Any, receive: Any, send: Any) -> None:
            await FastAPI.__call__(s.app, scope, receive, send)

        async def post(body: bytes) -> httpx.Response:
            transport = httpx.ASGITransport(app=plain)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                return await c.post(URL, content=body)

        body = valid_body(seed=80)
        first = s.run(post(body))
        assert first.status_code == 201
        assert s.post(body).json() == first.json()  # fast path: 200, same receipt
        bad = s.run(post(b"[]"))
        assert bad.status_code == 400 and error_of(bad)["code"] == "bad_envelope"
