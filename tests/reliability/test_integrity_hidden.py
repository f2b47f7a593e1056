"""Hiding is not removal: a hidden submission's free text (note, names) stayed on
its page, in GET /v1/submissions/{id} and in its envelope. Now every public view redacts it
(store/redaction.py), the envelope answers 410 with its sha256, and a maintainer can still
read the signed bytes, which verify and match that sha256.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from specschema import PAYLOAD_TYPE, submission_bytes, verify_envelope
from specschema.examples import example_submission
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import dict_bytes, payload_dict, signed, signing_key
from tests.reliability.test_hostile_inputs import assert_error_shape
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
TOKEN = "h" * 40
ADMIN = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
# What a maintainer hides a submission for: text nobody should keep reading.
NOTE = "call Jane Doe at +1-555-0100, she lives at 12 Elm St"
CHIP = "Jane Doe's stolen laptop"


@pytest.fixture(params=STORES)
def client(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[InProcessClient]:
    with app_on(request.param, tmp_path, admin_token=TOKEN) as app, InProcessClient(app) as c:
        yield c


def _admin(client: InProcessClient, action: str, body: dict[str, Any]) -> Any:
    response = client.post(f"/admin/v1/{action}", content=json.dumps(body).encode(),
                           headers=ADMIN)
    assert response.status_code == 200, response.text
    return response.json()


def _public_texts(client: InProcessClient, sid: str) -> dict[str, str]:
    return {
        "api": client.get(f"{URL}/{sid}").text,
        "page": client.get(f"/submissions/{sid}").text,
        "envelope": client.get(f"{URL}/{sid}/envelope").text,
        "list": client.get(URL).text,
        "export": client.get("/v1/export", params={"format": "jsonl"}).text,
        "board": client.get("/v1/leaderboard", params={"view": "noise_floor"}).text,
    }


def test_a_hidden_submissions_free_text_leaves_every_public_view(
        client: InProcessClient) -> None:
    data = payload_dict(21)
    data["note"] = NOTE
    data["fingerprint"]["chip"] = CHIP
    response = client.post(URL, content=signed(dict_bytes(data), signing_key(21)))
    assert response.status_code == 201, response.text
    sid = response.json()["submission_id"]
    shown = _public_texts(client, sid)
    # Visible: the text is public (the control; the envelope carries it base64-encoded).
    assert all(NOTE in shown[v] for v in ("api", "page", "list")), shown
    assert verify_envelope(json.loads(shown["envelope"]), PAYLOAD_TYPE)
    _admin(client, "hide", {"submission_id": sid, "reason": "personal data in the note"})
    hidden = _public_texts(client, sid)
    for view, text in hidden.items():
        assert NOTE not in text and "Jane Doe" not in text, view  # before: api, page, envelope
    api = client.get(f"{URL}/{sid}").json()
    assert api["submission"]["hidden"] is True
    assert api["submission"]["note"] is None and api["submission"]["chip"] is None
    assert "note" in api["submission"]["redacted"]
    assert api["fingerprint"]["json"] is None and api["envelope"]["body"] is None
    assert api["trials"] and api["summary"]  # the numbers stay
    assert "personal data in the note" in hidden["page"]  # the reason is shown
    gone = client.get(f"{URL}/{sid}/envelope")
    error = assert_error_shape(gone)
    assert gone.status_code == 410 and error["code"] == "redacted"
    sha = error["details"]["envelope_sha256"]
    assert sha == api["submission"]["envelope_sha256"]
    # A maintainer still reads the signed bytes: they verify and match the published sha256.
    rows = _admin(client, "query", {"sql": f"select body from envelopes where submission_id"
                                           f" = '{sid}'"})["rows"]
    body = bytes.fromhex(rows[0][0])
    assert hashlib.sha256(body).hexdigest() == sha
    assert verify_envelope(json.loads(body), PAYLOAD_TYPE).key_id
    # Unhiding restores the public views: nothing was deleted.
    _admin(client, "unhide", {"submission_id": sid, "reason": "the sender removed it"})
    assert client.get(f"{URL}/{sid}/envelope").content == body
    assert client.get(f"{URL}/{sid}").json()["submission"]["note"] == NOTE


TARGET = "janedoe-12-elm-st:latest"  # a target name the sender chose: free text too


def test_after_hide_the_target_name_is_not_public_either(client: InProcessClient) -> None:
    """Before: after ``hide`` the free-text target name stayed in the API and on the page.
    The home page (filter menus, boards) too: it names models from every visible row."""
    sub = example_submission("ollama-draft", seed=22, engine_version="0.30.1",
                             target=TARGET, counters_seen=True,
                             created_at=datetime.now(UTC) - timedelta(minutes=1))
    data = json.loads(submission_bytes(sub))
    data["models"][0]["quantization"] = "Q4 janedoe"
    response = client.post(URL, content=signed(dict_bytes(data), signing_key(22)))
    assert response.status_code == 201, response.text
    sid = response.json()["submission_id"]
    shown = {**_public_texts(client, sid), "home": client.get("/").text}
    assert "janedoe" in shown["api"] and "janedoe" in shown["page"]  # the control
    _admin(client, "hide", {"submission_id": sid, "reason": "a name in the target"})
    hidden = {**_public_texts(client, sid), "home": client.get("/").text,
              "home_filtered": client.get("/", params={"protocol": "ollama-draft"}).text}
    leaked = [view for view, text in hidden.items() if "janedoe" in text.lower()]
    assert leaked == []
    api = client.get(f"{URL}/{sid}").json()
    assert api["submission"]["target_model"] is None
    assert {"target_model", "target_quant"} <= set(api["submission"]["redacted"])
    assert all(c["model"] is None for c in api["configs"])
    assert api["trials"] and api["summary"]  # the numbers stay
    _admin(client, "unhide", {"submission_id": sid, "reason": "renamed"})
    assert client.get(f"{URL}/{sid}").json()["submission"]["target_model"] == "janedoe-12-elm-st"
