"""`specsubmit results list` and `specsubmit fingerprint` from the command line."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from specschema.examples import example_submission
from specsubmit.errors import SubmissionRejected, SubmissionUndelivered
from specsubmit.local import outbox
from specsubmit.local.results import save_result
from specsubmit.send import submit
from specsubmit.send.delivery import RetryPolicy
from tests.client.submit_server import ScriptedServer, error_body, free_port


def run_cli(args, capsys, monkeypatch):
    from specsubmit.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def _at(minutes: int):
    return datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=minutes)


def test_results_list_shows_each_status(capsys, monkeypatch, specsubmit_home):
    fast = RetryPolicy(attempts=1)
    server = ScriptedServer().start()
    try:
        delivered = example_submission(seed=1, created_at=_at(1))
        save_result(delivered)
        submit.send_submission(delivered, server.url, fast)
        waiting = example_submission(seed=2, created_at=_at(2))
        save_result(waiting)
        with pytest.raises(SubmissionUndelivered):
            submit.send_submission(waiting, f"http://127.0.0.1:{free_port()}", fast)
        incomplete = example_submission(seed=3, created_at=_at(3), complete=False)
        save_result(incomplete)
        untouched = example_submission(seed=4, created_at=_at(4))
        save_result(untouched)
        refused = example_submission(seed=5, created_at=_at(5))
        save_result(refused)
        server.then(422, error_body("rule_failed", "decode tok/s 9000 above the bound"))
        with pytest.raises(SubmissionRejected):
            submit.send_submission(refused, server.url, fast)
    finally:
        server.stop()
    (specsubmit_home / "results" / "broken.json").write_text("{")

    code, out, _ = run_cli(["results", "list", "--json"], capsys, monkeypatch)
    assert code == 0
    listed = {entry["submission_id"]: entry for entry in json.loads(out)}
    assert listed[str(delivered.submission_id)]["status"] == "submitted"
    assert listed[str(delivered.submission_id)]["url"] == (
        f"{server.url}/submissions/{delivered.submission_id}")
    assert listed[str(waiting.submission_id)]["status"] == "pending"
    assert listed[str(incomplete.submission_id)]["status"] == "incomplete"
    assert listed[str(untouched.submission_id)]["status"] == "not submitted"
    assert listed[str(refused.submission_id)]["status"] == "not submitted"
    assert "decode tok/s 9000" in listed[str(refused.submission_id)]["detail"]
    assert listed["broken"]["status"] == "unreadable"
    ordered = [entry["submission_id"] for entry in json.loads(out) if entry["created_at"]]
    assert ordered == [str(s.submission_id) for s in
                       (delivered, waiting, incomplete, untouched, refused)]

    code, out, _ = run_cli(["results", "list"], capsys, monkeypatch)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith(str(waiting.submission_id)))
    assert "pending" in line and "hardnumbers-m2 v1" in line
    assert "specsubmit submit --pending" in out


def test_results_list_empty(capsys, monkeypatch):
    code, out, _ = run_cli(["results", "list"], capsys, monkeypatch)
    assert (code, out.strip()) == (0, "no saved results")
    code, out, _ = run_cli(["results", "list", "--json"], capsys, monkeypatch)
    assert json.loads(out) == []


def test_pending_without_a_result_file_still_counts_when_sent(capsys, monkeypatch):
    """`submit --pending` works from pending/ alone: the result file is not needed."""
    submission = example_submission(seed=6)
    with pytest.raises(SubmissionUndelivered):
        submit.send_submission(submission, f"http://127.0.0.1:{free_port()}",
                               RetryPolicy(attempts=1))
    server = ScriptedServer().start()
    try:
        server.then(503)
        server.then(503)
        server.then(503)
        server.then(503)
        server.then(503)
        server.then(503)
        monkeypatch.setenv("SPECSUBMIT_SERVER", server.url)
        monkeypatch.setenv("SPECSUBMIT_RETRY_BASE_S", "0.001")
        code, _, err = run_cli(["submit", "--pending"], capsys, monkeypatch)
        assert code == 75 and "1 of 1 pending results were not delivered" in err
        assert len(outbox.list_pending()) == 1
        code, out, _ = run_cli(["results", "list", "--json"], capsys, monkeypatch)
        assert [(e["submission_id"], e["status"]) for e in json.loads(out)] == [
            (str(submission.submission_id), "pending")]
        code, out, _ = run_cli(["submit", "--pending"], capsys, monkeypatch)
        assert code == 0 and f"submitted: {submission.submission_id}" in out
        assert len(server.stored) == 1 and outbox.list_pending() == []
    finally:
        server.stop()


def test_submit_needs_exactly_one_of_file_or_pending(capsys, monkeypatch, tmp_path):
    code, _, err = run_cli(["submit"], capsys, monkeypatch)
    assert code == 2 and "either a result FILE or --pending" in err
    code, _, err = run_cli(["submit", str(tmp_path / "x.json"), "--pending"], capsys, monkeypatch)
    assert code == 2


def test_fingerprint_command_json_and_text(capsys, monkeypatch):
    code, out, _ = run_cli(["fingerprint", "--json"], capsys, monkeypatch)
    assert code == 0
    data = json.loads(out)
    assert set(data) >= {"chip", "cpu", "memory_bytes", "memory_gb", "gpus", "os"}
    code, out, _ = run_cli(["fingerprint"], capsys, monkeypatch)
    assert code == 0 and out.startswith("chip ")
    if data["memory_gb"]:
        assert f"({data['memory_gb']} GB)" in out
