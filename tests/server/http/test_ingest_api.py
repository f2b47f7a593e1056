"""POST /v1/submissions in-process: every check's status and error, receipts, idempotency,
stored rows, and the envelope kept verbatim. Each test has its own DuckDB file; the tests
on the ``served`` fixture run with and without a check worker process."""

import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from specschema import SCHEMA_VERSIONS
from specschema.envelope import verify_envelope
from specschema.payload import parse_submission
from specschema.protocol import all_protocols
from specschema.summary import summarize
from specserver.store import migrations, tables
from tests.support.served import URL, Served, error_of, settings_for
from tests.support.signed import payload_dict, sign_bytes, sign_dict, signer, valid_body


@pytest.fixture(params=[0, 1], ids=["checks-in-process", "check-worker"])
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Every test with this fixture runs twice: checks in the server process, and in a
    check worker process (``checkpool``): the answers must not differ."""
    with Served(settings_for(tmp_path, check_workers=request.param)) as s:
        yield s


def assert_nothing_stored(s: Served) -> None:
    assert all(count == 0 for count in s.counts().values()), s.counts()


# --- 201, receipt, rows ---------------------------------------------------------------


def test_valid_submission_is_stored_completely(served: Served) -> None:
    body = valid_body(seed=11, key_seed=1)
    response = served.post(body)
    assert response.status_code == 201, response.text
    receipt = response.json()
    submission = parse_submission(verify_envelope(json.loads(body)).payload)
    sid = str(submission.submission_id)
    assert receipt["submission_id"] == sid
    assert receipt["key_id"] == hashlib.sha256(bytes(signer(1).verify_key)).hexdigest()
    assert receipt["url"] == f"http://testserver/submissions/{sid}"
    assert response.headers["location"] == receipt["url"]
    expected = [s.model_dump(mode="json") for s in summarize(submission)]
    assert receipt["summary"] == expected
    counts = served.counts()
    assert counts["submissions"] == counts["envelopes"] == counts["fingerprints"] == 1
    assert counts["configs"] == counts["summaries"] == 3
    assert counts["trials"] == 15


def test_stored_envelope_is_verbatim_and_reverifiable(served: Served) -> None:
    body = valid_body(seed=12)
    sid = served.post(body).json()["submission_id"]
    view = served.get(f"/v1/submissions/{sid}")
    assert view.status_code == 200
    data = view.json()
    raw = base64.b64decode(data["envelope"]["body"])
    assert raw == body
    assert data["envelope"]["sha256"] == hashlib.sha256(body).hexdigest()
    verified = verify_envelope(json.loads(raw))
    assert str(parse_submission(verified.payload).submission_id) == sid
    assert len(data["trials"]) == 15 and len(data["configs"]) == 3
    assert {s["config_name"] for s in data["summary"]} == {c["config_name"]
                                                           for c in data["configs"]}
    assert data["submission"]["key_id"] == verified.key_id
    assert data["fingerprint"]["json"]["chip"] == data["submission"]["chip"]
    etag = view.headers["etag"]
    assert served.get(f"/v1/submissions/{sid}", headers={"If-None-Match": etag}).status_code == 304


def test_stored_rows_match_the_submission(served: Served) -> None:
    body = valid_body(seed=13)
    submission = parse_submission(verify_envelope(json.loads(body)).payload)
    sid = served.post(body).json()["submission_id"]
    data = served.get(f"/v1/submissions/{sid}").json()
    trials = {(t["config_name"], t["trial_index"]): t for t in data["trials"]}
    for config in submission.configs:
        for trial in config.trials:
            row = trials[(config.name, trial.index)]
            assert row["eval_duration_ns"] == trial.eval_duration_ns
            assert row["wall_s"] == trial.wall_s
            assert row["position"] == trial.position
    assert data["submission"]["created_at"] == submission.created_at.replace(
        tzinfo=None).isoformat() + "Z"
    assert data["submission"]["target_model"] == "qwen3:14b"


# --- 200 / 409: idempotency -----------------------------------------------------------


def test_same_bytes_again_is_200_with_the_original_receipt(served: Served) -> None:
    body = valid_body(seed=14)
    first = served.post(body)
    second = served.post(body)
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == first.json()
    assert served.counts()["submissions"] == 1


def test_same_id_other_bytes_is_409_and_keeps_the_original(served: Served) -> None:
    data = payload_dict(15)
    assert served.post(sign_dict(data)).status_code == 201
    data["note"] = "changed after the fact"
    response = served.post(sign_dict(data))
    assert response.status_code == 409
    assert error_of(response)["code"] == "submission_conflict"
    stored = served.get(f"/v1/submissions/{data['submission_id']}").json()
    assert stored["submission"]["note"] is None
    assert served.counts()["trials"] == 15


def test_concurrent_duplicates_in_one_batch_store_once(served: Served) -> None:
    body = valid_body(seed=16)
    other = payload_dict(16)
    other["note"] = "another version"
    responses = served.post_many([body] * 5 + [sign_dict(other)] + [valid_body(seed=17)])
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 200, 200, 200, 201, 201, 409]
    assert served.counts()["submissions"] == 2


# --- 413 / 408: the body --------------------------------------------------------------


def test_body_over_limit_with_content_length_is_413(tmp_path: Path) -> None:
    with Served(settings_for(tmp_path, max_body_bytes=4096)) as s:
        response = s.post(b"{" + b" " * 5000 + b"}")
        assert response.status_code == 413
        assert error_of(response)["code"] == "body_too_large"
        assert_nothing_stored(s)


def test_body_over_limit_without_content_length_is_413_while_reading(tmp_path: Path) -> None:
    pulled: list[int] = []

    def parts() -> Any:
        for _ in range(1000):
            pulled.append(1)
            yield b" " * 1024

    with Served(settings_for(tmp_path, max_body_bytes=4096)) as s:
        response = s.post_stream(parts())
        assert response.status_code == 413
        assert len(pulled) < 50  # refused while reading, not after reading a megabyte
        assert_nothing_stored(s)


def test_trickling_body_times_out_with_408(tmp_path: Path) -> None:
    with Served(settings_for(tmp_path, body_read_timeout_s=0.3)) as s:
        body = valid_body(seed=18)
        response = s.post_stream([body[i:i + 100] for i in range(0, len(body), 100)], delay=0.05)
        assert response.status_code == 408
        assert error_of(response)["code"] == "body_timeout"
        assert_nothing_stored(s)


def test_streamed_body_under_limit_is_accepted(served: Served) -> None:
    body = valid_body(seed=19)
    response = served.post_stream([body[i:i + 1000] for i in range(0, len(body), 1000)])
    assert response.status_code == 201, response.text


# --- 400 / 401: envelope and signature --------------------------------------------------


def _envelope(seed: int = 20) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(valid_body(seed=seed))
    return result


def _tamper_sig(env: dict[str, Any]) -> None:
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[0] ^= 1
    env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()


def _tamper_payload(env: dict[str, Any]) -> None:
    payload = bytearray(base64.b64decode(env["payload"]))
    payload[payload.index(b'"note":null') + 8] = ord("N")  # still JSON-ish, other bytes
    env["payload"] = base64.b64encode(bytes(payload)).decode()


def _other_key(env: dict[str, Any]) -> None:
    forged = json.loads(sign_bytes(base64.b64decode(env["payload"]), key_seed=99))
    env["signatures"][0]["sig"] = forged["signatures"][0]["sig"]


@pytest.mark.parametrize(("name", "mutate", "status", "code"), [
    ("not json", lambda e: "not json {", 400, "bad_envelope"),
    ("array", lambda e: [1, 2], 400, "bad_envelope"),
    ("wrong payloadType", lambda e: {**e, "payloadType": "text/plain"}, 400, "bad_envelope"),
    ("bad base64", lambda e: {**e, "payload": "***"}, 400, "bad_envelope"),
    ("two signatures", lambda e: {**e, "signatures": e["signatures"] * 2}, 400, "bad_envelope"),
    ("unknown field", lambda e: {**e, "extra": 1}, 400, "bad_envelope"),
    ("flipped signature", lambda e: (_tamper_sig(e), e)[1], 401, "bad_signature"),
    ("flipped payload", lambda e: (_tamper_payload(e), e)[1], 401, "bad_signature"),
    ("signed by another key", lambda e: (_other_key(e), e)[1], 401, "bad_signature"),
])
def test_envelope_and_signature_errors(served: Served, name: str, mutate: Any, status: int,
                                       code: str) -> None:
    value = mutate(_envelope())
    body = value.encode() if isinstance(value, str) else json.dumps(value).encode()
    response = served.post(body)
    assert response.status_code == status, (name, response.text)
    assert error_of(response)["code"] == code
    assert_nothing_stored(served)


def test_duplicate_key_in_envelope_is_400(served: Served) -> None:
    body = valid_body(seed=21)
    doubled = body[:-1] + b',"payloadType":"x"}'
    response = served.post(doubled)
    assert response.status_code == 400
    assert "duplicate" in error_of(response)["message"]


def test_deeply_nested_envelope_is_400_not_500(served: Served) -> None:
    response = served.post(b"[" * 100_000 + b"]" * 100_000)
    assert response.status_code in (400, 413)
    error_of(response)


# --- 400 / 422: payload -----------------------------------------------------------------


@pytest.mark.parametrize(("name", "payload", "status", "code"), [
    ("duplicate key", b'{"a":1,"a":2}', 400, "bad_json"),
    ("NaN", b'{"a":NaN}', 400, "bad_json"),
    ("huge integer", b'{"a":9007199254740993}', 400, "bad_json"),
    ("not json", b"{oops", 400, "bad_json"),
    ("schema", b'{"schema_version":1}', 422, "schema_invalid"),
])
def test_payload_errors(served: Served, name: str, payload: bytes, status: int,
                        code: str) -> None:
    response = served.post(sign_bytes(payload))
    assert response.status_code == status, (name, response.text)
    assert error_of(response)["code"] == code


def test_schema_error_lists_failing_paths(served: Served) -> None:
    data = payload_dict(22)
    data["configs"][0]["trials"][0]["eval_count"] = "many"
    data["unknown_field"] = 1
    response = served.post(sign_dict(data))
    assert response.status_code == 422
    paths = {d["path"] for d in error_of(response)["details"]}
    assert "configs.0.trials.0.eval_count" in paths
    assert "unknown_field" in paths


def test_unknown_protocol_and_wrong_hash_are_422(served: Served) -> None:
    data = payload_dict(23)
    data["protocol"]["sha256"] = "0" * 64
    response = served.post(sign_dict(data))
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "unknown_protocol"
    # every shipped identity, older versions too (ollama-draft v1 and v2)
    assert {(p["id"], p["version"]) for p in error["details"]["known"]} == {
        (p.id, p.version) for p in all_protocols()}
    data["protocol"]["id"] = "made-up"
    assert error_of(served.post(sign_dict(data)))["code"] == "unknown_protocol"
    assert_nothing_stored(served)


def test_inconsistent_submission_is_422_naming_the_rule(served: Served) -> None:
    data = payload_dict(24)
    trial = data["configs"][0]["trials"][0]
    trial["wall_s"] = trial["total_duration_ns"] / 1e9 / 3
    response = served.post(sign_dict(data))
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "inconsistent"
    assert error["message"].startswith("durations_coherent:")
    assert error["details"][0]["rule"] == "durations_coherent"
    assert_nothing_stored(served)


def test_created_at_limits_come_from_settings(tmp_path: Path) -> None:
    with Served(settings_for(tmp_path, max_submission_age_days=1)) as s:
        old = valid_body(seed=25, created_at=datetime.now(UTC) - timedelta(days=2))
        response = s.post(old)
        assert response.status_code == 422
        assert error_of(response)["details"][0]["rule"] == "created_at_recent"
        future = valid_body(seed=26, created_at=datetime.now(UTC) + timedelta(minutes=10))
        assert s.post(future).status_code == 422
        assert s.post(valid_body(seed=27)).status_code == 201


# --- 403 / 429 ------------------------------------------------------------------------


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


# --- the one error shape for the framework's own errors --------------------------------


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


# --- health, storage switch, OpenAPI ----------------------------------------------------


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
