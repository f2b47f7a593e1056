"""Envelopes refused after their signature verified are entries of the transparency log
(type 0x03 and the SHA-256 of their bytes), committed before the answer, which says where
(``Log-Entry``): a rule's refusal, a banned key, an id stored with other bytes, for results
and cost probes alike. Refusals before verification (a bad signature, bytes that are no
envelope) are not logged. The index says ``refused`` and names nothing: the bytes are not
public. A stored cost probe is an entry too (0x04), named by its id, its receipt carrying
it. DuckDB and PostgreSQL."""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import re
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from specschema.envelope import key_id_of
from specschema.tlog import decode_entries, leaf_hash
from specserver.ingest import CheckLimits
from specserver.ingest.workers import answer_for, encode_request, error_from_parts
from specserver.store import LogReceipt, logentries
from tests.support.crowd import M2, cost_probe, map_result, signed_probe, target_of
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, error_of, settings_for
from tests.support.signed import payload_dict, sign_dict, signer, valid_body

AUTH = {"Authorization": "Bearer t0ken"}
HEADER = re.compile(r"index=(\d+), leaf-hash=:([A-Za-z0-9+/=]+):")


@pytest.fixture(params=STORES)
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    settings = settings_for(tmp_path, database_url=store_url_for(request.param, tmp_path,
                                                                 request),
                            admin_token="t0ken", log_key_file=str(tmp_path / "log-key"),
                            log_checkpoint_s=0.001)
    with Served(settings) as s:
        yield s


def refused_entry(body: bytes) -> bytes:
    return b"\x03" + hashlib.sha256(body).digest()


def logged_at(response: httpx.Response, body: bytes) -> int:
    """The index the answer's Log-Entry names, checked against the entry's leaf hash."""
    found = HEADER.fullmatch(response.headers["log-entry"])
    assert found is not None, response.headers["log-entry"]
    assert base64.b64decode(found[2]) == leaf_hash(refused_entry(body))
    return int(found[1])


def broken_rule(seed: int) -> bytes:
    """Signed by a valid key, refused by a consistency rule (a config's trials removed)."""
    data = payload_dict(seed=seed)
    data["configs"][1]["trials"] = data["configs"][1]["trials"][:1]
    return sign_dict(data, key_seed=seed)


def one_bit_off(body: bytes) -> bytes:
    """The envelope with one bit of its signature flipped, still valid base64 (a flipped
    base64 character can stop being one, and the server rightly answers 400 for that)."""
    envelope = json.loads(body)
    signature = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    signature[0] ^= 1
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(signature)).decode()
    return json.dumps(envelope, separators=(",", ":")).encode()


def entries(served: Served, size: int) -> list[bytes]:
    return decode_entries(served.get(f"/log/tile/entries/000.p/{size}").content)


def test_refusals_after_verification_are_logged_and_not_published(served: Served) -> None:
    stored = valid_body(seed=1, key_seed=1)
    assert served.post(stored).status_code == 201
    rule = broken_rule(2)
    refused = served.post(rule)
    assert refused.status_code == 422 and error_of(refused)["code"] == "inconsistent"
    assert logged_at(refused, rule) == 1

    bad_signature = served.post(one_bit_off(valid_body(seed=3, key_seed=3)))
    not_json = served.post(b"{not an envelope")
    assert (bad_signature.status_code, not_json.status_code) == (401, 400)
    assert "log-entry" not in bad_signature.headers and "log-entry" not in not_json.headers

    other = json.loads(base64.b64decode(json.loads(stored)["payload"]))
    other["note"] = "the same id, other bytes"
    conflicting = sign_dict(other, key_seed=1)
    conflict = served.post(conflicting)
    assert conflict.status_code == 409 and logged_at(conflict, conflicting) == 2

    again = served.post(rule)  # each refusal is an event: the same bytes again, a new entry
    assert again.status_code == 422 and logged_at(again, rule) == 3
    assert entries(served, 4) == [b"\x01" + hashlib.sha256(stored).digest(),
                                  refused_entry(rule), refused_entry(conflicting),
                                  refused_entry(rule)]
    items = served.get("/log/index/000.p/4").json()["items"]
    assert [i["kind"] for i in items] == ["envelope", "refused", "refused", "refused"]
    assert items[1] == {"index": 1, "kind": "refused"}  # no id, no key: the hash alone
    assert served.counts()["submissions"] == 1


def test_a_banned_key_and_a_refused_probe_are_logged(served: Served) -> None:
    first = served.post(valid_body(seed=4, key_seed=4)).json()
    assert served.request("POST", "/admin/v1/ban", headers=AUTH, json={
        "key_id": first["key_id"], "reason": "fabricated"}).status_code == 200
    banned = valid_body(seed=5, key_seed=4)
    answer = served.post(banned)
    assert answer.status_code == 403 and error_of(answer)["code"] == "key_banned"
    assert logged_at(answer, banned) == 2  # after the envelope and the ban's decision

    target = target_of(map_result(0, M2))
    late = cost_probe(target, M2).model_copy(
        update={"created_at": datetime.now(UTC) + timedelta(days=2)})
    probe = signed_probe(late, 6)
    refused = served.client.post("/v1/probes", content=probe)
    assert refused.status_code == 422 and logged_at(refused, probe) == 3
    wrong_type = signed_probe(cost_probe(target, M2), 6, payload_type="application/x-other")
    assert "log-entry" not in served.client.post("/v1/probes", content=wrong_type).headers
    assert [i["kind"] for i in served.get("/log/index/000.p/4").json()["items"]] == [
        "envelope", "moderation", "refused", "refused"]


def test_a_check_worker_says_which_refusals_came_after_verification() -> None:
    limits = CheckLimits(max_age=timedelta(days=30), max_future_skew=timedelta(minutes=5))
    now = datetime.now(UTC)
    for body, key in ((broken_rule(7), key_id_of(bytes(signer(7).verify_key))), (b"[]", None)):
        kind, parts = pickle.loads(answer_for(encode_request(body, now), limits))
        assert kind == "error" and error_from_parts(parts).signed_by == key


def test_refusals_arriving_together_each_get_their_own_entry(served: Served) -> None:
    bodies = [broken_rule(20 + i) for i in range(12)]
    answers = served.post_many(bodies)
    assert [a.status_code for a in answers] == [422] * 12
    indexes = [logged_at(answer, body) for answer, body in zip(answers, bodies, strict=True)]
    assert sorted(indexes) == list(range(12))
    logged = entries(served, 12)
    assert all(logged[i] == refused_entry(body) for i, body in zip(indexes, bodies,
                                                                   strict=True))


def test_refusals_queued_while_the_writer_is_busy_share_one_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    jobs: list[tuple[Any, Future[Any]]] = []

    def run_job(fn: Any) -> Future[Any]:
        jobs.append((fn, Future()))
        return jobs[-1][1]

    seen: list[list[str]] = []

    def recorded(conn: Any, digests: list[str]) -> list[LogReceipt]:  # instead of writing
        seen.append(list(digests))
        return [LogReceipt(7 + i, b"\x00" * 32) for i in range(len(digests))]

    monkeypatch.setattr(logentries, "log_refused", recorded)
    refusals = logentries.RefusalLog(run_job)
    futures = [refusals.log(f"{i:064x}") for i in range(3)]
    assert len(jobs) == 1  # the writer has not started the first job: the others joined it
    fn, job = jobs[0]
    job.set_result(fn(None))
    assert seen == [[f"{i:064x}" for i in range(3)]]
    assert [f.result().index for f in futures] == [7, 8, 9]
    late = refusals.log("f" * 64)  # after the job: a job of its own
    assert len(jobs) == 2 and not late.done()
    jobs[1][1].set_exception(RuntimeError("the store is closed"))  # it never ran
    with pytest.raises(RuntimeError, match="closed"):
        late.result(timeout=1)


def test_a_stored_probe_is_logged_with_its_receipt(served: Served) -> None:
    target = target_of(map_result(0, M2))
    body = signed_probe(cost_probe(target, M2), 9)
    first = served.client.post("/v1/probes", content=body)
    assert first.status_code == 201, first.text
    log = first.json()["log"]
    entry = b"\x04" + hashlib.sha256(body).digest()
    assert log["index"] == 0 and base64.b64decode(log["leaf_hash"]) == leaf_hash(entry)
    again = served.client.post("/v1/probes", content=body)  # the same bytes: the same entry
    assert again.status_code == 200 and again.json()["log"] == log
    assert served.post(valid_body(seed=30)).json()["log"]["index"] == 1
    assert entries(served, 2)[0] == entry
    items = served.get("/log/index/000.p/2").json()["items"]
    assert items[0] == {"index": 0, "kind": "probe", "probe_id": first.json()["probe_id"]}
    assert items[1]["kind"] == "envelope"
