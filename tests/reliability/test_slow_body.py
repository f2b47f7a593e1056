"""A body that trickles in: a real `specserver serve` on a loopback socket.

The attacker sends the headers (a Content-Length for an honest-sized body) and then a few
bytes every 200 ms. The server must give up at its body deadline (408 in the one error
shape, or close the connection), keep serving everyone else meanwhile, and store nothing
from the trickle. Many such connections at once must not stop an honest submission either.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.reliability.hostile import valid_envelope
from tests.reliability.servers import ServerProcess
from tests.reliability.storecount import audit_file

DEADLINE_S = 2.0


def _trickle(port: int, body: bytes, every_s: float, results: list[tuple[float, bytes]]) -> None:
    """Send headers, then 8 bytes every ``every_s``; record when the server answered (or
    closed the connection) and what it said."""
    start = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    try:
        sock.sendall(
            b"POST /v1/submissions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        sock.settimeout(every_s)
        reply = b""
        answered = 0.0
        for offset in range(0, len(body), 8):
            try:
                sock.sendall(body[offset:offset + 8])
            except OSError:
                break  # the server closed the connection
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            reply += data
            answered = answered or time.monotonic() - start
            if not data or b"\r\n\r\n" in reply:
                break
            if time.monotonic() - start > 15:
                break
        sock.settimeout(3)
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except OSError:
            pass
    finally:
        sock.close()
    results.append((answered or time.monotonic() - start, reply))


@pytest.mark.slow  # waits out the server's body timeout: ~20 s, loaded (full tier)
def test_trickled_body_times_out_and_nothing_is_stored(tmp_path: Path) -> None:
    db = str(tmp_path / "store.duckdb")
    server = ServerProcess(db, tmp_path, env={"SPECSERVER_BODY_READ_TIMEOUT_S": str(DEADLINE_S)})
    honest_body = valid_envelope(9100)
    try:
        server.start()
        results: list[tuple[float, bytes]] = []
        slow = [threading.Thread(target=_trickle,
                                 args=(server.port, valid_envelope(9000 + i), 0.2, results))
                for i in range(20)]
        for thread in slow:
            thread.start()
        time.sleep(0.5)
        started = time.monotonic()
        honest = httpx.post(f"{server.url}/v1/submissions", content=honest_body, timeout=10)
        honest_s = time.monotonic() - started
        for thread in slow:
            thread.join(30)
        server.stop()
    finally:
        server.stop()
    statuses = []
    for elapsed, reply in results:
        head, _, rest = reply.partition(b"\r\n\r\n")
        status = head.split(b" ")[1].decode() if head.startswith(b"HTTP/1.1 ") else "closed"
        statuses.append(status)
        assert elapsed < DEADLINE_S + 2, f"held for {elapsed:.1f}s"
        if status != "closed":
            assert status == "408", reply[:300]
            body = json.loads(rest.split(b"\r\n0\r\n")[0] if b"chunked" in head else rest)
            assert set(body["error"]) == {"code", "message", "details"}
    print(f"trickle: 20 slow bodies -> {sorted(statuses)}; held {min(r[0] for r in results):.1f}"
          f"-{max(r[0] for r in results):.1f}s; honest submission meanwhile -> "
          f"{honest.status_code} in {honest_s * 1000:.0f} ms")
    assert len(results) == 20
    assert honest.status_code == 201, honest.text
    audit = audit_file(db, {honest.json()["submission_id"]: honest_body})
    assert audit["problems"] == []
    assert audit["stored"] == 1, "only the honest submission is stored"
