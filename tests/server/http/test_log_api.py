"""The transparency log end to end, in-process: every stored envelope gets an index and a
leaf hash on its receipt, in order and without gaps; /log/checkpoint is a checkpoint signed
by the key /log/key names; the tiles and entry bundles hold exactly the receipts' leaves;
and every receipt's inclusion, and consistency between two checkpoints, verify from the
tiles alone, by the project's verifier and by the reference written from RFC 6962 in
tests/schema/tlog/test_merkle.py. On DuckDB and PostgreSQL."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from specschema.errors import NoteInvalid
from specschema.tlog import (
    Checkpoint,
    TileNodeReader,
    TileRef,
    consistency_proof,
    decode_entries,
    inclusion_proof,
    open_checkpoint,
    parse_vkey,
    verify_consistency,
    verify_inclusion,
)
from specserver.http.logkey import LogKeyError
from tests.schema.tlog.test_merkle import ref_accepts_consistency, ref_mth, ref_root_from_path
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, error_of, settings_for
from tests.support.signed import valid_body


@pytest.fixture(params=STORES)
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    url = store_url_for(request.param, tmp_path, request)
    settings = settings_for(tmp_path, database_url=url, log_checkpoint_s=0.001,
                            log_key_file=str(tmp_path / "keys" / "log-key"))
    with Served(settings) as s:
        yield s


def entry_of(body: bytes) -> bytes:
    return b"\x01" + hashlib.sha256(body).digest()


def checkpoint_of(served: Served) -> Checkpoint:
    key = served.get("/log/key")
    note = served.get("/log/checkpoint")
    assert note.status_code == 200 and note.headers["content-type"].startswith("text/plain")
    assert "max-age=2" in note.headers["cache-control"]
    return open_checkpoint(note.content, parse_vkey(key.text.strip()), "testserver/log")


def fetch_from(served: Served) -> Any:
    def fetch(ref: TileRef) -> bytes:
        response = served.get("/log/" + ref.path)
        assert response.status_code == 200, (ref.path, response.text)
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
        return response.content
    return fetch


def test_receipts_checkpoints_tiles_and_proofs_agree(served: Served) -> None:
    bodies = [valid_body(seed=40 + i, key_seed=i) for i in range(3)]
    first = served.post(bodies[0])
    assert first.status_code == 201, first.text
    one = checkpoint_of(served)
    assert one.size == 1
    answers = [first, *served.post_many(bodies[1:])]
    receipts = [a.json()["log"] for a in answers]
    assert sorted(r["index"] for r in receipts) == [0, 1, 2]
    by_index = {r["index"]: bodies[i] for i, r in enumerate(receipts)}
    for receipt, body in zip(receipts, bodies, strict=True):
        leaf = base64.b64decode(receipt["leaf_hash"])
        assert leaf == hashlib.sha256(b"\x00" + entry_of(body)).digest()

    again = served.post(bodies[1])  # the same bytes again: 200, the same entry
    assert again.status_code == 200 and again.json()["log"] == receipts[1]

    three = checkpoint_of(served)
    entries = [entry_of(by_index[i]) for i in range(3)]
    assert three.size == 3 and three.root == ref_mth(entries)  # the RFC's own MTH
    assert decode_entries(served.get("/log/tile/entries/000.p/3").content) == entries
    assert served.get("/log/tile/0/000.p/3").content == b"".join(
        hashlib.sha256(b"\x00" + e).digest() for e in entries)

    reader = TileNodeReader(three.size, fetch_from(served))
    for receipt in receipts:
        leaf = base64.b64decode(receipt["leaf_hash"])
        path = inclusion_proof(receipt["index"], three.size, reader.node)
        verify_inclusion(receipt["index"], three.size, leaf, path, three.root)
        assert ref_root_from_path(receipt["index"], three.size, leaf, path) == three.root
    proof = consistency_proof(one.size, three.size, reader.node)
    verify_consistency(one.size, three.size, one.root, three.root, proof)
    assert ref_accepts_consistency(one.size, three.size, one.root, three.root, proof)


def test_tiles_the_log_does_not_hold_are_404(served: Served) -> None:
    served.post(valid_body(seed=50))
    assert served.get("/log/tile/0/000.p/1").status_code == 200
    for path in ("0/000.p/2", "0/000", "entries/000", "1/000.p/1", "0/001.p/1",
                 "0/0000.p/1", "00/000.p/1", "0/000.p/01", "entries/x000/000.p/1"):
        response = served.get("/log/tile/" + path)
        assert response.status_code == 404, path
        assert error_of(response)["code"] == "not_found"


def test_the_empty_log_has_a_signed_checkpoint(served: Served) -> None:
    empty = checkpoint_of(served)
    assert empty.size == 0 and empty.root == hashlib.sha256(b"").digest()


def test_the_key_file_is_private_kept_and_bound_to_its_origin(tmp_path: Path) -> None:
    key_file = tmp_path / "log-key"
    settings = settings_for(tmp_path, log_key_file=str(key_file))
    with Served(settings) as s:
        vkey = s.get("/log/key").text
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    assert key_file.read_text().startswith("PRIVATE+KEY+testserver/log+")
    with Served(settings) as s:
        assert s.get("/log/key").text == vkey  # the same key after a restart
        with pytest.raises(NoteInvalid):  # another origin's checkpoint is not this log's
            open_checkpoint(s.get("/log/checkpoint").content, parse_vkey(vkey.strip()),
                            "elsewhere/log")
    moved = settings_for(tmp_path, log_key_file=str(key_file), log_origin="other.example/log")
    with Served(moved) as s, pytest.raises(LogKeyError, match="not the configured origin"):
        s.app.state.log.checkpoint()


@pytest.mark.parametrize("kind", STORES)
def test_three_results_and_a_hide_make_four_entries_each_checkable(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A maintainer's decision is an entry naming what it affects; anyone recomputes it
    from the public moderation history (``GET /v1/submissions/{id}``)."""
    settings = settings_for(tmp_path, database_url=store_url_for(kind, tmp_path, request),
                            log_checkpoint_s=0.001, admin_token="t0ken",
                            log_key_file=str(tmp_path / "log-key"))
    with Served(settings) as s:
        bodies = [valid_body(seed=80 + i, key_seed=i) for i in range(3)]
        receipts = [s.post(b).json() for b in bodies]
        hidden = receipts[1]
        answer = s.request("POST", "/admin/v1/hide", json={
            "submission_id": hidden["submission_id"], "reason": "a duplicate machine"},
            headers={"Authorization": "Bearer t0ken"})
        assert answer.status_code == 200, answer.text
        checkpoint = checkpoint_of(s)
        assert checkpoint.size == 4
        entries = decode_entries(s.get("/log/tile/entries/000.p/4").content)
        history = s.get(f"/v1/submissions/{hidden['submission_id']}").json()["moderation"]
        assert [h["action"] for h in history] == ["hide"]
        decision = {**history[0], "affects": [hidden["log"]["index"]]}
        text = json.dumps(decision, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert entries[3] == b"\x02" + hashlib.sha256(text.encode()).digest()
        assert ref_mth(entries) == checkpoint.root
        for receipt in receipts:  # the receipts still verify after the decision
            path = inclusion_proof(receipt["log"]["index"], 4,
                                   TileNodeReader(4, fetch_from(s)).node)
            verify_inclusion(receipt["log"]["index"], 4,
                             base64.b64decode(receipt["log"]["leaf_hash"]), path,
                             checkpoint.root)
        assert s.post(valid_body(seed=90)).json()["log"]["index"] == 4  # numbering goes on


def test_a_timer_signs_checkpoints_while_nobody_asks(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, log_checkpoint_s=0.001, log_checkpoint_timer_s=0.05,
                            log_key_file=str(tmp_path / "log-key"))
    with Served(settings) as served:
        service = served.app.state.log
        assert served.post(valid_body(seed=70)).status_code == 201
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            latest = service.latest
            if latest is not None and b"\n1\n" in latest:
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"no checkpoint of size 1 was signed: {service.latest!r}")
        assert checkpoint_of(served).size == 1
    off = settings_for(tmp_path / "off", log_checkpoint_timer_s=0,
                       log_key_file=str(tmp_path / "off-key"))
    with Served(off) as served:
        served.post(valid_body(seed=71))
        time.sleep(0.2)
        assert served.app.state.log.latest is None  # only on request
