"""Signing and sending against real HTTP servers on loopback.

The scripted server (tests/client/submit_server.py) verifies every envelope and can be
told to answer 503, 429 with Retry-After or 422; the last tests go to the real specserver.
"""

from __future__ import annotations

import base64
import io
import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from specschema import (
    key_id_of,
    parse_submission,
    submission_bytes,
    verify_envelope,
)
from specschema.examples import example_submission
from specsubmit.errors import (
    SubmissionRejected,
    SubmissionUndelivered,
    UsageError,
)
from specsubmit.local import keys, outbox
from specsubmit.local.results import save_result
from specsubmit.send import delivery, submit
from specsubmit.send.delivery import RetryPolicy
from tests.client.submit_server import ScriptedServer, error_body, free_port


def run_cli(args, capsys, monkeypatch, stdin=""):
    from specsubmit.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


# --- envelope and key handling ------------------------------------------------------------


def test_signed_envelope_verifies_and_carries_the_exact_payload():
    submission = example_submission(seed=1)
    key = keys.load_or_create()
    envelope = json.loads(submit.sign(submission, key))
    verified = verify_envelope(envelope)
    assert verified.payload == submission_bytes(submission)
    assert verified.key_id == key_id_of(bytes(key.verify_key)) == keys.current_info().key_id
    assert parse_submission(verified.payload) == submission


def test_tampered_payload_does_not_verify():
    envelope = json.loads(submit.sign(example_submission(seed=1), keys.load_or_create()))
    payload = base64.b64decode(envelope["payload"]).replace(b'"complete":true',
                                                            b'"complete":false')
    envelope["payload"] = base64.b64encode(payload).decode()
    with pytest.raises(Exception, match="signature does not verify"):
        verify_envelope(envelope)


@pytest.mark.parametrize(
    ("header", "expected"),
    [("7", 7.0), ("0", 0.0), ("soon", None), (None, None),
     ("Wed, 21 Oct 2026 07:28:30 GMT", 30.0)],
)
def test_retry_after_forms(header, expected):
    now = datetime(2026, 10, 21, 7, 28, 0, tzinfo=UTC)
    assert delivery.parse_retry_after(header, now) == expected


def test_backoff_is_exponential_capped_and_jittered():
    policy = RetryPolicy(base_s=0.5, cap_s=4.0, rand=lambda: 1.0)
    assert [delivery.backoff_delay(n, policy) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert delivery.backoff_delay(3, RetryPolicy(base_s=0.5, rand=lambda: 0.25)) == 1.0


@pytest.mark.parametrize("bad", ["ftp://host", "host:8000", "http://", "http://h/?q=1"])
def test_bad_server_url_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="--server must be an http"):
        delivery.normalize_server(bad)


# --- delivery -------------------------------------------------------------------------------


def test_delivered_first_time_records_receipt_and_empties_pending(server, policy):
    submission = example_submission(seed=2)
    receipt, again = submit.send_submission(submission, server.url, policy)
    assert not again and receipt.status == 201
    assert receipt.submission_id == str(submission.submission_id)
    assert receipt.url == f"{server.url}/submissions/{submission.submission_id}"
    assert len(server.posts) == 1 and list(server.stored) == [receipt.submission_id]
    assert outbox.list_pending() == []
    record = outbox.submitted_record(receipt.submission_id)
    assert record["receipt"]["url"] == receipt.url and record["server"] == server.url


def test_503_then_success_retries_with_backoff(server, policy, sleeps):
    server.then(503, error_body("store_unavailable", "busy"))
    server.then(502)
    receipt, _ = submit.send_submission(example_submission(seed=3), server.url, policy)
    assert receipt.status == 201
    assert len(server.posts) == 3 and len(server.stored) == 1
    assert sleeps == [0.5, 1.0]  # rand 0.5 * 1 s, 0.5 * 2 s
    assert len(set(server.posts)) == 1  # the same bytes each time


def test_429_honours_retry_after(server, policy, sleeps):
    server.then(429, error_body("rate_limited", "slow down"), Retry_After="3")
    receipt, _ = submit.send_submission(example_submission(seed=4), server.url, policy)
    assert receipt.status == 201 and sleeps == [3.0]


def test_retry_after_too_long_leaves_it_pending(server, sleeps):
    policy = RetryPolicy(max_retry_after_s=60, sleep=sleeps.append)
    server.then(503, error_body("store_unavailable", "maintenance"), Retry_After="3600")
    submission = example_submission(seed=5)
    with pytest.raises(SubmissionUndelivered, match="asked to wait 3600 s"):
        submit.send_submission(submission, server.url, policy)
    assert sleeps == [] and len(server.posts) == 1
    assert [p.submission_id for p in outbox.list_pending()] == [str(submission.submission_id)]


def test_5xx_every_time_gives_up_after_the_attempts(server, policy, sleeps):
    for _ in range(4):
        server.then(500)
    with pytest.raises(SubmissionUndelivered, match="after 4 attempts"):
        submit.send_submission(example_submission(seed=6), server.url, policy)
    assert len(server.posts) == 4 and len(sleeps) == 3 and server.stored == {}
    assert len(outbox.list_pending()) == 1


def test_422_is_final_and_its_message_is_kept_verbatim(server, policy, sleeps):
    message = "configs[1].trials[2]: eval_count 900 exceeds num_predict 512 (rule eval_count)"
    server.then(422, error_body("rule_failed", message, [{"path": "configs.1"}]))
    submission = example_submission(seed=7)
    with pytest.raises(SubmissionRejected) as rejected:
        submit.send_submission(submission, server.url, policy)
    assert rejected.value.message == f"server rejected the submission (422): {message}"
    assert rejected.value.status == 422 and sleeps == [] and len(server.posts) == 1
    assert outbox.list_pending() == []
    assert outbox.rejected_record(str(submission.submission_id))["message"].endswith(message)


def test_a_redirect_is_not_followed_and_says_where(server, policy):
    server.then(308, {"moved": True}, Location="https://new.example/v1/submissions")
    with pytest.raises(SubmissionRejected, match=r"answered 308 \(moved to https://new\.example"):
        submit.send_submission(example_submission(seed=30), server.url, policy)
    assert len(server.posts) == 1


def test_signature_is_checked_by_the_server(server, policy):
    submission = example_submission(seed=8)
    envelope = json.loads(submit.sign(submission, keys.load_or_create()))
    envelope["signatures"][0]["sig"] = base64.b64encode(b"\0" * 64).decode()
    outbox.put_pending(str(submission.submission_id), json.dumps(envelope).encode())
    with pytest.raises(SubmissionRejected, match=r"\(401\): signature does not verify"):
        submit.send_submission(submission, server.url, policy)


def test_connection_refused_then_pending_then_delivered_exactly_once(
        policy, sleeps, capsys, monkeypatch):
    port = free_port()  # nothing listens here yet
    url = f"http://127.0.0.1:{port}"
    submission = example_submission(seed=9)
    path = save_result(submission)
    with pytest.raises(SubmissionUndelivered, match="cannot reach") as undelivered:
        submit.send_submission(submission, url, policy)
    assert "specsubmit submit --pending" in undelivered.value.message
    assert len(sleeps) == 3
    pending = outbox.list_pending()
    assert [p.submission_id for p in pending] == [str(submission.submission_id)]
    parked = pending[0].read()
    assert verify_envelope(json.loads(parked)).payload == submission_bytes(submission)

    server = ScriptedServer(port).start()
    try:
        code, out, err = run_cli(["submit", "--pending", "--server", url], capsys, monkeypatch)
        assert code == 0, err
        assert f"submitted: {submission.submission_id}" in out
        assert f"{url}/submissions/{submission.submission_id}" in out
        assert server.posts == [parked] and len(server.stored) == 1
        # Again: nothing is pending, nothing is sent.
        code, out, _ = run_cli(["submit", "--pending", "--server", url], capsys, monkeypatch)
        assert (code, out.strip()) == (0, "nothing pending")
        # The saved result again: already submitted, shown from the record, not re-sent.
        code, out, _ = run_cli(["submit", str(path), "--server", url, "--yes"], capsys,
                               monkeypatch)
        assert code == 0 and f"already submitted: {submission.submission_id}" in out
        assert len(server.posts) == 1
    finally:
        server.stop()


def test_pending_envelope_is_resent_byte_for_byte_even_after_key_rotation(server, policy):
    submission = example_submission(seed=10)
    server.then(503)
    server.then(503)
    server.then(503)
    server.then(503)
    with pytest.raises(SubmissionUndelivered):
        submit.send_submission(submission, server.url, policy)
    first = server.posts[0]
    keys.rotate()
    receipt, _ = submit.send_submission(submission, server.url, policy)
    assert server.posts[-1] == first and receipt.status == 201


# --- the CLI ----------------------------------------------------------------------------


def test_cli_422_prints_the_servers_message_on_one_line(server, capsys, monkeypatch):
    message = "created_at is 40 days old; the limit is 30 days (rule created_at_recent)"
    server.then(422, error_body("rule_failed", message))
    path = save_result(example_submission(seed=11))
    code, out, err = run_cli(["submit", str(path), "--server", server.url, "--yes"], capsys,
                             monkeypatch)
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        f"specsubmit: error: server rejected the submission (422): {message}")


def test_cli_refuses_incomplete_results(server, capsys, monkeypatch):
    path = save_result(example_submission(seed=12, complete=False))
    code, _, err = run_cli(["submit", str(path), "--server", server.url, "--yes"], capsys,
                           monkeypatch)
    assert code == 1 and "is incomplete (the run stopped early)" in err
    assert server.posts == []


def test_cli_unreadable_file_and_missing_server(capsys, monkeypatch, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1')
    code, _, err = run_cli(["submit", str(bad), "--server", "http://127.0.0.1:9"], capsys,
                           monkeypatch)
    assert code == 1 and "is not a specsubmit result" in err
    path = save_result(example_submission(seed=13))
    code, _, err = run_cli(["submit", str(path)], capsys, monkeypatch)
    assert code == 1 and "no server to submit to" in err and "SPECSUBMIT_SERVER" in err


def test_cli_without_tty_or_yes_sends_nothing(server, capsys, monkeypatch):
    path = save_result(example_submission(seed=14))
    code, _, err = run_cli(["submit", str(path), "--server", server.url], capsys, monkeypatch)
    assert code == 1 and "no terminal to ask for consent" in err and server.posts == []


def test_cli_server_from_environment(server, capsys, monkeypatch):
    monkeypatch.setenv("SPECSUBMIT_SERVER", server.url + "/")
    path = save_result(example_submission(seed=15))
    code, out, _ = run_cli(["submit", str(path), "--yes"], capsys, monkeypatch)
    assert code == 0 and "submitted:" in out and len(server.stored) == 1


# --- offer_submission: the run's consent step ------------------------------------------------


def test_cli_submit_undeliverable_exits_75(capsys, monkeypatch):
    monkeypatch.setenv("SPECSUBMIT_RETRY_ATTEMPTS", "2")
    monkeypatch.setenv("SPECSUBMIT_RETRY_BASE_S", "0")
    path = save_result(example_submission(seed=25))
    code, _, err = run_cli(["submit", str(path), "--server", f"http://127.0.0.1:{free_port()}",
                            "--yes"], capsys, monkeypatch)
    assert code == 75
    assert err.count("specsubmit: error:") == 1
    assert "retry with `specsubmit submit --pending`" in err
    assert len(outbox.list_pending()) == 1


def test_cli_submit_pending_exits_75_while_waiting_and_1_when_refused(server, capsys,
                                                                      monkeypatch, policy):
    monkeypatch.setenv("SPECSUBMIT_RETRY_ATTEMPTS", "1")
    submission = example_submission(seed=26)
    server.then(503)
    with pytest.raises(SubmissionUndelivered):
        submit.send_submission(submission, server.url, RetryPolicy(attempts=1))
    server.then(503)
    code, _, err = run_cli(["submit", "--pending", "--server", server.url], capsys, monkeypatch)
    assert code == 75 and "1 of 1 pending results were not delivered; they wait" in err
    server.then(403, error_body("banned", "this key id is banned"))
    code, _, err = run_cli(["submit", "--pending", "--server", server.url], capsys, monkeypatch)
    assert code == 1 and "1 of 1 pending results were refused by the server" in err


# --- check_server: the --server check before any trial -----------------------------------


# --- the real specserver --------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    pytest.importorskip("specserver.http.app")
    from tests.client.submit_server import RealServer

    server = RealServer(tmp_path_factory.mktemp("specserver")).start()
    yield server
    server.stop()


def test_real_specserver_accepts_then_is_idempotent(real_server, policy, capsys, monkeypatch):
    submission = example_submission(seed=25, created_at=datetime.now(UTC) - timedelta(minutes=1))
    receipt, again = submit.send_submission(submission, real_server.url, policy)
    assert receipt.status == 201 and not again
    assert receipt.url and str(submission.submission_id) in receipt.url
    public = httpx.get(f"{real_server.url}/v1/submissions/{submission.submission_id}")
    assert public.status_code == 200
    # Re-sending the same envelope (as `submit --pending` would after a lost answer): 200.
    # Ed25519 signatures are deterministic, so signing again gives the same bytes.
    again_receipt = delivery.post_envelope(
        submit.sign(submission, keys.load_or_create()), real_server.url,
        receipt.submission_id, policy)
    assert again_receipt.status == 200 and again_receipt.submission_id == receipt.submission_id


def test_real_specserver_refusal_is_shown_verbatim(real_server, capsys, monkeypatch):
    old = example_submission(seed=26, created_at=datetime.now(UTC) - timedelta(days=400))
    path = save_result(old)
    code, _, err = run_cli(["submit", str(path), "--server", real_server.url, "--yes"], capsys,
                           monkeypatch)
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith("specsubmit: error: server rejected the submission (422): ")
    assert "created_at" in line


def test_retry_policy_from_environment(monkeypatch):
    monkeypatch.setenv("SPECSUBMIT_RETRY_ATTEMPTS", "2")
    monkeypatch.setenv("SPECSUBMIT_RETRY_BASE_S", "0.25")
    policy = delivery.retry_policy_from_env()
    assert (policy.attempts, policy.base_s, policy.cap_s) == (2, 0.25, RetryPolicy().cap_s)
    monkeypatch.setenv("SPECSUBMIT_RETRY_ATTEMPTS", "0")
    with pytest.raises(UsageError, match="SPECSUBMIT_RETRY_ATTEMPTS must be between 1 and 100"):
        delivery.retry_policy_from_env()
    monkeypatch.setenv("SPECSUBMIT_RETRY_ATTEMPTS", "many")
    with pytest.raises(UsageError, match="must be a number"):
        delivery.retry_policy_from_env()


def test_pending_remembers_its_server_so_the_printed_command_works_as_printed(
        policy, sleeps, capsys, monkeypatch):
    """The "not delivered" message says `specsubmit submit --pending`: exactly that, with no
    --server and no variable, sends it where it was meant to go."""
    monkeypatch.delenv("SPECSUBMIT_SERVER", raising=False)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    submission = example_submission(seed=19)
    with pytest.raises(SubmissionUndelivered) as undelivered:
        submit.send_submission(submission, url, policy)
    assert undelivered.value.message.endswith("retry with `specsubmit submit --pending`")
    assert outbox.list_pending()[0].server == url
    server = ScriptedServer(port).start()
    try:
        code, out, err = run_cli(["submit", "--pending"], capsys, monkeypatch)
        assert code == 0, err
        assert f"submitted: {submission.submission_id}" in out and len(server.stored) == 1
        assert list((outbox.folder(outbox.PENDING)).iterdir()) == []  # sidecar gone too
    finally:
        server.stop()


def test_a_pending_result_without_a_remembered_server_says_what_to_pass(capsys, monkeypatch):
    monkeypatch.delenv("SPECSUBMIT_SERVER", raising=False)
    submission = example_submission(seed=20)
    outbox.put_pending(str(submission.submission_id), b"{}")  # parked by an older client
    code, out, err = run_cli(["submit", "--pending"], capsys, monkeypatch)
    assert code == 75
    assert "no server is remembered for it: pass --server URL" in out
