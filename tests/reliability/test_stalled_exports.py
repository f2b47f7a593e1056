"""Clients that stop reading an export must not take the server down.

The attack, as reproduced against `specserver serve` (embedded DuckDB, default settings):
16 clients ask for ``GET /v1/export`` and stop reading (a small receive buffer, so the
server's send blocks). Before the fix each held a pooled DuckDB connection while it
stalled; the pool (5 + 10) ran out and /healthz, every read and every POST answered 503
after the 30 s pool timeout, and kept doing so after the attackers closed their sockets
(the connections came back only through the cyclic GC).

Here a real server on a loopback port is attacked the same way. While the stalls last,
/healthz, /v1/stats and a POST must answer (within a 10 s client timeout, three times
shorter than the old pool wait), at most ``export_max_concurrent`` exports run and the rest
get 503 with Retry-After in the one error shape; after the attackers leave, a whole export
downloads and the server holds no export file any more.
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.reliability.hostile import valid_envelope
from tests.reliability.servers import ServerProcess
from tests.reliability.stalling import big_store, close_all, stall, stall_many

STALLED = 16  # one more than the DuckDB pool's 5 + 10 connections
ANSWER_S = 10.0


def _server(tmp_path: Path, **env: str) -> tuple[ServerProcess, int]:
    rows = big_store(tmp_path / "store.duckdb", copies=1000)  # ~18,000 rows, ~11 MB of CSV
    server = ServerProcess(database=str(tmp_path / "store.duckdb"), workdir=tmp_path,
                           env={"SPECSERVER_CHECK_WORKERS": "1", **env})
    server.start()
    return server, rows


def _answer(sock: socket.socket, timeout: float = ANSWER_S) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and the first bytes of the body on a stalled socket (reads a little:
    a 200 export stays stalled; a 503 is short and complete)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    headers = {k.lower(): v for k, v in headers.items()}
    if int(lines[0].split()[1]) != 200:
        while len(body) < int(headers.get("content-length", "0")):
            chunk = sock.recv(4096)
            if not chunk:
                break
            body += chunk
    return int(lines[0].split()[1]), headers, body


def _export_files(pid: int) -> list[str]:
    """The export files the server process has open (they are unlinked once written)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if "specatlas-export-" in target:
            found.append(target)
    return found


def _holds_connection(pid: int, client: socket.socket) -> bool:
    """The server process has a file descriptor for its end of ``client``'s connection
    (/proc/PID/fd inodes against /proc/net/tcp, whose remote port is the client's)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    port = f"{client.getsockname()[1]:04X}"
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[2].endswith(f":{port}") and fields[9] in inodes:
                return True
    return False


def _wait_for(condition, timeout: float = 15.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.slow
def test_stalled_exports_leave_the_server_answering(tmp_path: Path,
                                                   request: pytest.FixtureRequest) -> None:
    server, rows = _server(tmp_path, SPECSERVER_EXPORT_MAX_CONCURRENT="4",
                           SPECSERVER_EXPORT_MAX_PER_CLIENT="16")  # one address attacks
    try:
        socks = stall_many(server.port, STALLED)
        request.addfinalizer(lambda: close_all(socks))
        # Every request answered (the export files are written one at a time: the 4th
        # export's headers wait for three files on a busy machine).
        answers = [_answer(s, timeout=60) for s in socks]
        statuses = [status for status, _, _ in answers]

        # Everyone else is served while the stalls last.
        health = httpx.get(f"{server.url}/healthz", timeout=ANSWER_S)
        assert health.status_code == 200, health.text
        assert httpx.get(f"{server.url}/v1/stats", timeout=ANSWER_S).status_code == 200
        posted = httpx.post(f"{server.url}/v1/submissions", content=valid_envelope(901),
                            headers={"Content-Type": "application/json"}, timeout=ANSWER_S)
        assert posted.status_code == 201, posted.text

        # Exports are bounded: the rest are refused at once, in the one error shape.
        assert statuses.count(200) == 4  # export_max_concurrent
        assert statuses.count(503) == STALLED - 4
        for status, headers, body in answers:
            if status == 503:
                assert int(headers["retry-after"]) >= 1
                error = json.loads(body)["error"]
                assert error["code"] == "exports_busy" and set(error) == {
                    "code", "message", "details"}
        assert len(_export_files(server.proc.pid)) <= 4  # type: ignore[union-attr]

        close_all(socks)
        # The attackers left: their files are closed and a whole export comes down.
        pid = server.proc.pid  # type: ignore[union-attr]
        assert _wait_for(lambda: not _export_files(pid)), _export_files(pid)
        whole = httpx.get(f"{server.url}/v1/export", timeout=60)
        assert whole.status_code == 200, whole.text
        records = list(csv.reader(io.StringIO(whole.text)))
        # The header and the big store: the file the attackers got is reused (no rewrite
        # per attacker), and the POST, an insert, may be export_reuse_s late in it.
        assert len(records) == 1 + rows
        served = {headers["etag"] for status, headers, _ in answers if status == 200}
        assert served == {whole.headers["etag"]}
        assert httpx.get(f"{server.url}/healthz", timeout=ANSWER_S).status_code == 200
        assert not _export_files(pid)
    finally:
        server.stop()


@pytest.mark.slow
def test_a_client_that_stops_reading_is_dropped_and_its_slot_freed(tmp_path: Path) -> None:
    server, _ = _server(tmp_path, SPECSERVER_EXPORT_MAX_CONCURRENT="1",
                        SPECSERVER_EXPORT_SEND_TIMEOUT_S="2")
    try:
        stalled = stall(server.port)
        assert _answer(stalled)[0] == 200
        busy = httpx.get(f"{server.url}/v1/export", timeout=ANSWER_S)
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "exports_busy"
        assert busy.headers["retry-after"]
        pid = server.proc.pid  # type: ignore[union-attr]
        assert _holds_connection(pid, stalled)
        # The server gives up on the stalled client after 2 s without progress: the slot
        # comes back, the next export is whole, and the server's end of the connection is
        # gone (aborted: asyncio's close would wait for the buffered bytes to be read).
        assert _wait_for(lambda: httpx.get(f"{server.url}/v1/export",
                                           timeout=60).status_code == 200)
        assert _wait_for(lambda: not _holds_connection(pid, stalled), timeout=5)
        assert not _export_files(pid)
    finally:
        stalled.close()
        server.stop()


@pytest.mark.slow
def test_one_address_cannot_hold_every_export_slot(tmp_path: Path,
                                                   request: pytest.FixtureRequest) -> None:
    # The default bounds: 2 exports at once, 1 per address. Before the bound per address,
    # an attacker's 2 stalled connections kept every other visitor's export at 503.
    server, rows = _server(tmp_path)
    try:
        socks = stall_many(server.port, 2)
        request.addfinalizer(lambda: close_all(socks))
        # Either request may take the slot first (the route runs in the threadpool).
        held, refused = sorted((_answer(s, timeout=60) for s in socks), key=lambda a: a[0])
        assert held[0] == 200
        status, headers, body = refused
        assert status == 503 and int(headers["retry-after"]) >= 1
        assert json.loads(body)["error"]["details"] == {"max_exports_per_client": 1}
        # Another address (loopback's 127.0.0.2) is served, whole, while the stall lasts.
        other = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"),
                             timeout=60)
        with other:
            whole = other.get(f"{server.url}/v1/export")
        assert whole.status_code == 200, whole.text
        assert len(list(csv.reader(io.StringIO(whole.text)))) == 1 + rows
    finally:
        server.stop()
