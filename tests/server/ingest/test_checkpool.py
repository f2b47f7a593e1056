"""Check workers (``specserver.ingest.workers``): real worker processes give the same answers as
checks in the server process, a worker that dies costs only the submissions it held (503)
and is replaced, and workers do not outlive the server."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from specschema.summary import ConfigSummary
from specserver.errors import SpecServerError, Unavailable
from specserver.http.errors import response_for, status_of
from specserver.http.submissions import Receipt
from specserver.ingest.prepare import CheckLimits, Prepared, prepare_submission, receipt_json
from specserver.ingest.workers import (
    _HEADER,
    READY,
    CheckPool,
    _read_frame,
    answer_for,
    decode_request,
    encode_request,
    error_from_parts,
    serve_frames,
    split_frames,
    with_envelope,
)
from tests.support.liveserver import free_port
from tests.support.signed import payload_dict, sign_dict, valid_body

# Each test reads its own clock (`when`): the bodies are created "now", so a clock read at
# import would put them in the future of a long test session.
LIMITS = CheckLimits(max_age=timedelta(days=30), max_future_skew=timedelta(minutes=5))


def refusal_in_process(body: bytes) -> tuple[int, bytes]:
    """(status, JSON body) that the server answers when the checks run in its process."""
    try:
        prepare_submission(body, datetime.now(UTC), LIMITS)
    except Exception as exc:  # noqa: BLE001 - what the server would answer
        response = response_for(exc)
        return response.status_code, bytes(response.body)
    raise AssertionError("expected a refusal")


BAD_BODIES = {
    "not json": b"{nope",
    "bad signature": valid_body(seed=3)[:-20] + b'AAAAAAAAAAAAAAAAA="}]}',
    "schema": sign_dict({**payload_dict(seed=4), "created_at": "yesterday"}),
    "rule": sign_dict({**payload_dict(seed=5), "created_at": "2001-01-01T00:00:00Z"}),
}


def test_request_frames_round_trip_to_the_microsecond() -> None:
    when = datetime(2026, 11, 30, 10, 48, 2, 123456, tzinfo=UTC)
    assert decode_request(encode_request(b"body", when)) == (b"body", when)


def test_worker_loop_answers_frames_in_order_until_end_of_file() -> None:
    """``serve_frames`` (the worker's loop, here in a thread) against the server side's
    framing: ready first, then one answer per request in order, and it returns on EOF."""
    when = datetime.now(UTC)
    ours, theirs = socket.socketpair()
    worker = threading.Thread(target=serve_frames, args=(theirs, LIMITS))
    worker.start()
    bodies = [valid_body(seed=50), BAD_BODIES["schema"], valid_body(seed=51)]

    async def exchange() -> list[Any]:
        reader, writer = await asyncio.open_connection(sock=ours)
        assert await _read_frame(reader) == READY
        for body in bodies:
            frame = encode_request(body, when)
            writer.write(_HEADER.pack(len(frame)) + frame)
        answers = [pickle.loads(await _read_frame(reader)) for _ in bodies]
        writer.close()
        return answers

    answers = asyncio.run(exchange())
    worker.join(10)
    assert not worker.is_alive()
    theirs.close()
    assert [kind for kind, _ in answers] == ["ok", "error", "ok"]
    assert answers[0][1].rows.rows["envelopes"] == [(answers[0][1].submission_id, None)]
    for (_kind, prepared), body in ((answers[0], bodies[0]), (answers[2], bodies[2])):
        assert with_envelope(prepared, body) == prepare_submission(body, when, LIMITS)
    assert status_of(error_from_parts(answers[1][1])) == 422


def test_answer_for_a_valid_body_is_the_in_process_result() -> None:
    when = datetime.now(UTC)
    body = valid_body(seed=1)
    status, prepared = pickle.loads(answer_for(encode_request(body, when), LIMITS))
    assert status == "ok"
    assert with_envelope(prepared, body) == prepare_submission(body, when, LIMITS)


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
def test_refusals_cross_the_process_boundary_unchanged(name: str) -> None:
    when = datetime.now(UTC)
    body = BAD_BODIES[name]
    kind, parts = pickle.loads(answer_for(encode_request(body, when), LIMITS))
    assert kind == "error"
    response = response_for(error_from_parts(parts))
    assert (response.status_code, bytes(response.body)) == refusal_in_process(body)


def test_receipt_json_is_the_receipt_model_byte_for_byte() -> None:
    when = datetime.now(UTC)
    prepared = prepare_submission(valid_body(seed=2), when, LIMITS)
    summaries = TypeAdapter(list[ConfigSummary]).validate_json(prepared.summary_json)
    for received_at in (when, when.replace(microsecond=0), when.replace(tzinfo=None)):
        url = f"https://bench.example/submissions/{prepared.submission_id}"
        model = Receipt(submission_id=prepared.submission_id, key_id=prepared.key_id,
                        received_at=received_at.replace(tzinfo=UTC), url=url,
                        summary=summaries)
        assert receipt_json(prepared, received_at, url) == model.model_dump_json().encode()


# --- real worker processes ------------------------------------------------------------


def run_with_pool(workers: int, test: Any) -> Any:
    async def main() -> Any:
        pool = CheckPool(workers, LIMITS)
        await pool.start()
        try:
            return await test(pool)
        finally:
            await pool.stop()

    return asyncio.run(main())


def test_pool_answers_like_the_server_process() -> None:
    when = datetime.now(UTC)
    bodies = [valid_body(seed=20 + i) for i in range(12)]

    async def test(pool: CheckPool) -> None:
        assert len(pool.pids()) == 2 and os.getpid() not in pool.pids()
        results = await asyncio.gather(*(pool.prepare(b, when) for b in bodies))
        assert results == [prepare_submission(b, when, LIMITS) for b in bodies]
        for name, body in BAD_BODIES.items():
            with pytest.raises(SpecServerError) as caught:
                await pool.prepare(body, when)
            response = response_for(caught.value)
            assert (response.status_code, bytes(response.body)) == refusal_in_process(body), name

    run_with_pool(2, test)


def test_a_killed_worker_fails_what_it_held_with_503_and_is_replaced() -> None:
    when = datetime.now(UTC)
    body = valid_body(seed=30)

    async def test(pool: CheckPool) -> None:
        (victim,) = pool.pids()
        os.kill(victim, signal.SIGKILL)
        outcome: Prepared | SpecServerError
        try:  # held by the dead worker, or no worker yet: both are a retryable 503
            outcome = await asyncio.wait_for(pool.prepare(body, when), 30)
        except Unavailable as exc:
            outcome = exc
        if isinstance(outcome, SpecServerError):
            assert status_of(outcome) == 503 and outcome.retry_after
        deadline = time.monotonic() + 60
        while True:  # a replacement takes over
            try:
                prepared = await asyncio.wait_for(pool.prepare(body, when), 30)
                break
            except Unavailable:
                assert time.monotonic() < deadline, "no replacement worker"
                await asyncio.sleep(0.2)
        assert prepared.submission_id
        assert pool.pids() and victim not in pool.pids()

    run_with_pool(1, test)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out.append(int(entry.name))
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # an orphan's zombie is not running


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_workers_exit_when_the_server_is_killed(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "SPECSERVER_CHECK_WORKERS": "2"}
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("specserver")), "serve", "--port", str(port),
         "--database", str(tmp_path / "store.duckdb")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        response = httpx.post(f"http://127.0.0.1:{port}/v1/submissions",
                              content=valid_body(seed=40))
        assert response.status_code == 201, response.text
        workers = _children(server.pid)  # the check workers
        assert len(workers) == 2
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait(10)
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in workers):
        assert time.monotonic() < deadline, "check workers outlived the server"
        time.sleep(0.1)


def test_split_frames_takes_complete_frames_and_keeps_the_rest() -> None:
    frames = [b"a", b"", b"x" * 70_000]
    wire = b"".join(_HEADER.pack(len(f)) + f for f in frames)
    buffer = bytearray()
    taken: list[bytes] = []
    for cut in range(0, len(wire), 4_999):  # arriving in odd pieces
        buffer += wire[cut:cut + 4_999]
        taken += split_frames(buffer)
    assert taken == frames and buffer == bytearray()
    partial = bytearray(wire[:-1])
    assert split_frames(partial) == frames[:2] and len(partial) == _HEADER.size + 69_999
