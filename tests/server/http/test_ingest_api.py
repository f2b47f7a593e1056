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

from specschema.envelope import verify_envelope
from specschema.payload import parse_submission
from specschema.protocol_files import all_protocols
from specschema.summary import summarize
from tests.support.served import Served, error_of, settings_for
from tests.support.signed import payload_dict, sign_bytes, sign_dict, signer, valid_body


def assert_nothing_stored(s: Served, refused: int = 0) -> None:
    """Nothing stored but ``refused`` entries of the transparency log (refusals after the
    signature verified are logged: tests/server/http/test_log_refused.py)."""
    counts = s.counts()
    assert counts.pop("log_entries") == refused, counts
    assert all(count == 0 for count in counts.values()), counts


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
    assert_nothing_stored(served, refused=2)


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
    assert_nothing_stored(served, refused=1)


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


# --- the one error shape for the framework's own errors --------------------------------


# --- health, storage switch, OpenAPI ----------------------------------------------------


