"""The client checks a server's transparency log on every contact, not only on `specsubmit
verify` (against the real specserver under uvicorn): `specsubmit submit` pins the log's
key, keeps the newest checkpoint and proves each later one consistent with it; a log
rewritten behind the kept checkpoint is caught on the next submission, which is delivered
all the same, with exit 3 and the proof printed; a cost probe sent and the pending results
delivered check it too. A log that does not answer is one line and no failure; a server
without a log is not checked. A refusal the server logged (its Log-Entry) is recorded and
proven included by `specsubmit verify`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from specschema.examples import example_submission
from specschema.payload import parse_submission, submission_bytes
from specserver.store import tables
from specsubmit.errors import LogUnchecked, SubmissionRejected
from specsubmit.local import logstate, outbox
from specsubmit.local.results import save_result
from specsubmit.send import check_on_contact, offer_probe
from specsubmit.send.delivery import RetryPolicy
from specsubmit.send.logwatch import NoLog
from specsubmit.send.submit import send_submission
from tests.client.cli.test_verify_cmd import edit_store, run_cli, running
from tests.support.crowd import M2, cost_probe, map_result, target_of
from tests.support.ports import free_port


def result_file(seed: int) -> Path:
    return save_result(example_submission(seed=seed,
                                          created_at=datetime.now(UTC) - timedelta(minutes=1)))


def kept_size(url: str) -> int:
    kept = logstate.load(url)
    assert kept is not None and kept.checkpoint is not None
    return int(kept.checkpoint.split(b"\n")[1])


def test_each_submission_checks_the_log_and_a_fork_exits_3_after_delivery(
        tmp_path: Path, capsys: Any) -> None:
    port = free_port()
    with running(tmp_path, port) as url:
        code, out, err = run_cli(["submit", str(result_file(81)), "--server", url, "--yes"],
                                 capsys)
        assert code == 0, err
        assert "submitted:" in out and "pinned its log key" in err
        assert kept_size(url) == 1
        code, out, err = run_cli(["submit", str(result_file(82)), "--server", url, "--yes"],
                                 capsys)
        assert code == 0 and "pinned" not in err, err
        assert kept_size(url) == 2
    # The operator rewrites the first entry behind the checkpoint this client kept.
    edit_store(tmp_path, update(tables.log_entries).where(tables.log_entries.c.idx == 0)
               .values(entry=b"\x01" + b"\x07" * 32))
    with running(tmp_path, port) as url:
        third = result_file(83)
        code, out, err = run_cli(["submit", str(third), "--server", url, "--yes"], capsys)
        assert code == 3
        assert "submitted:" in out  # delivered: the log's misbehaviour does not undo it
        assert "SERVER MISBEHAVIOUR: the log of 3 entries does not extend the one of 2" in err
        assert "kept checkpoint:" in err and "consistency proof from the tiles:" in err
        assert kept_size(url) == 2  # a checkpoint that did not verify is never kept


def test_pending_results_and_a_probe_check_the_log(tmp_path: Path, capsys: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing listens for the first submit: its retries' backoff (0.5 s doubling, random
    # jitter: 7.75 s on average) is not what this tests, so it is kept to milliseconds.
    monkeypatch.setenv("SPECSUBMIT_RETRY_BASE_S", "0.001")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    code, _, err = run_cli(["submit", str(result_file(84)), "--server", url, "--yes"], capsys)
    assert code == 75 and outbox.list_pending()  # nothing listens yet: it waits
    with running(tmp_path, port):
        code, out, err = run_cli(["submit", "--pending"], capsys)
        assert code == 0, err
        assert "pinned its log key" in err and kept_size(url) == 1
        lines: list[str] = []
        probe = cost_probe(target_of(map_result(0, M2)), M2)
        assert offer_probe(probe, tmp_path / "probe.json", assume_yes=True, no_submit=False,
                           server=url, echo=lines.append)
        # the probe is the log's second entry: its contact kept the checkpoint holding it
        assert kept_size(url) == 2 and not any("not checked" in line for line in lines)


class _Failing:
    def __init__(self, error: LogUnchecked) -> None:
        self.error = error

    def __enter__(self) -> Any:
        def fetch(path: str) -> bytes:
            raise self.error
        return fetch

    def __exit__(self, *exc: object) -> None:
        return None


@contextmanager
def _failing(error: LogUnchecked) -> Iterator[Any]:
    with _Failing(error) as fetch:
        yield fetch


@pytest.mark.parametrize(("error", "said"), [
    (LogUnchecked("the log at http://h did not answer: ConnectError"), True),
    (NoLog("http://h/log/checkpoint answered 404"), False),
])
def test_a_log_that_does_not_answer_is_one_line_and_no_log_is_silent(
        error: LogUnchecked, said: bool) -> None:
    lines: list[str] = []
    assert check_on_contact("http://h", lines.append, lambda url: _failing(error)) is None
    if said:
        assert len(lines) == 1 and "its transparency log was not checked this time" in lines[0]
        assert "what was delivered stays delivered" in lines[0]
    else:
        assert lines == []
    assert logstate.load("http://h") is None


def test_a_refusal_the_server_logged_is_proven_included_by_verify(
        tmp_path: Path, capsys: Any) -> None:
    data = json.loads(submission_bytes(example_submission(
        seed=86, created_at=datetime.now(UTC) - timedelta(minutes=1))))
    data["configs"][1]["trials"] = data["configs"][1]["trials"][:1]  # a server rule breaks
    broken = parse_submission(json.dumps(data).encode())
    with running(tmp_path, free_port()) as url:
        with pytest.raises(SubmissionRejected) as refused:
            send_submission(broken, url, RetryPolicy(attempts=1))
        assert refused.value.status == 422 and refused.value.log_entry is not None
        record = outbox.rejected_record(str(broken.submission_id))
        assert record is not None and record["log"]["index"] == 0
        code, out, err = run_cli(["verify", "--server", url], capsys)
        assert code == 0, out + err
        assert f"{broken.submission_id}: entry 0, included" in out
