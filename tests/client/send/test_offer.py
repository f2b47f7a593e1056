"""The run's consent step (offer_submission) and the --server check before any trial, against
the scripted server on loopback (tests/client/submit_server.py)."""

from __future__ import annotations

import io
import json

import pytest

from specschema import (
    submission_bytes,
    verify_envelope,
)
from specschema.examples import example_submission
from specsubmit.errors import (
    ServerUnreachable,
    SubmissionRejected,
    SubmissionUndelivered,
)
from specsubmit.local import keys, outbox
from specsubmit.send import delivery, submit
from tests.client.submit_server import error_body, free_port


def offer(submission, tmp_path, lines, **kwargs):
    defaults = {"assume_yes": False, "no_submit": False, "print_payload": False}
    defaults.update(kwargs)
    submit.offer_submission(submission, tmp_path / "r.json", echo=lines.append, **defaults)


def test_offer_no_submit_never_sends(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSUBMIT_SERVER", server.url)
    lines = []
    offer(example_submission(seed=16), tmp_path, lines, no_submit=True, assume_yes=True)
    assert server.posts == [] and "--no-submit" in lines[-1]


def test_offer_without_tty_and_without_yes_does_not_send(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSUBMIT_SERVER", server.url)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    lines = []
    offer(example_submission(seed=17), tmp_path, lines)
    assert server.posts == [] and "no terminal to ask for consent" in lines[-1]


def test_offer_asks_and_respects_no(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSUBMIT_SERVER", server.url)
    questions = []
    lines = []
    offer(example_submission(seed=18), tmp_path, lines,
          ask=lambda q: questions.append(q) or False)
    assert questions == ["Send this result?"] and server.posts == []


def test_offer_consent_screen_then_yes_sends_and_prints_receipt(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSUBMIT_SERVER", server.url)
    submission = example_submission(seed=19)
    lines = []
    offer(submission, tmp_path, lines, ask=lambda q: True)
    text = "\n".join(lines)
    assert submission.fingerprint.chip in text and submission.engine.version in text
    assert f"{submission.protocol.id} v{submission.protocol.version}" in text
    for config in submission.configs:
        assert f"config    {config.name}: {len(config.trials)} trials" in text
    assert keys.current_info().key_id[:16] in text
    assert "Not in it: host name, user name, serial numbers" in text
    assert lines[-2] == f"submitted: {submission.submission_id}"
    assert lines[-1].strip() == f"{server.url}/submissions/{submission.submission_id}"
    assert len(server.stored) == 1


def test_offer_print_payload_shows_the_exact_bytes_signed(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSUBMIT_SERVER", server.url)
    submission = example_submission(seed=20)
    lines = []
    offer(submission, tmp_path, lines, assume_yes=True, print_payload=True)
    payload = submission_bytes(submission).decode()
    assert payload in lines
    assert verify_envelope(json.loads(server.posts[0])).payload.decode() == payload


def test_offer_incomplete_or_no_server_sends_nothing(server, tmp_path, monkeypatch):
    lines = []
    offer(example_submission(seed=21), tmp_path, lines, assume_yes=True)
    assert "no server configured" in lines[-1]
    monkeypatch.setenv("SPECSUBMIT_SERVER", server.url)
    offer(example_submission(seed=22, complete=False), tmp_path, lines, assume_yes=True)
    assert "incomplete" in lines[-1] and server.posts == []


def test_offer_undeliverable_raises_exit_75_and_waits_in_pending(tmp_path, monkeypatch, policy):
    monkeypatch.setenv("SPECSUBMIT_SERVER", f"http://127.0.0.1:{free_port()}")
    lines = []
    with pytest.raises(SubmissionUndelivered, match="waits in .*specsubmit submit --pending") as e:
        offer(example_submission(seed=23), tmp_path, lines, assume_yes=True, policy=policy)
    assert e.value.exit_code == 75
    assert len(outbox.list_pending()) == 1


def test_check_server_accepts_a_specatlas_server_and_one_whose_store_is_down(server):
    delivery.check_server(server.url)
    server.health_status = 503
    delivery.check_server(server.url)  # it is ours; delivery retries and pending/ waits


@pytest.mark.parametrize("status", [404, 500])
def test_check_server_refuses_what_is_not_a_specatlas_server(server, status):
    server.health_status = status
    with pytest.raises(ServerUnreachable, match=rf"is not a specatlas server \(GET /healthz "
                                                rf"answered {status} "):
        delivery.check_server(server.url)
    server.health_status, server.health_plain_text = 200, True
    with pytest.raises(ServerUnreachable, match="is not a specatlas server"):
        delivery.check_server(server.url)


def test_check_server_nothing_listening_is_one_line_exit_69():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnreachable, match=rf"^--server {url} does not answer \(Connect") as e:
        delivery.check_server(url, timeout_s=2)
    assert e.value.exit_code == 69 and "\n" not in e.value.message


def test_offer_rejection_raises_with_the_message(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSUBMIT_SERVER", server.url)
    server.then(403, error_body("banned", "this key id is banned"))
    with pytest.raises(SubmissionRejected, match=r"\(403\): this key id is banned$"):
        offer(example_submission(seed=24), tmp_path, [], assume_yes=True)
