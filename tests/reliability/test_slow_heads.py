"""Unfinished request heads (slowloris) against a real `specserver serve`.

The attack of the issue: 1,500 connections that never finish their headers stayed open
33 s (server file descriptors 20 -> 1,520), and with the open-file limit at 1,024 the
server refused every other client until the attacker left. Here the server starts with
a soft open-file limit of 1,024 (as a login shell or Docker's default gives it) and a
head deadline of ``HEAD_TIMEOUT_S``; the attacker opens 1,500 connections: a third send
nothing, a third send only a request line, a third send part of a header and then keep
trickling its value (a byte every 0.5 s, so no timeout per read would ever fire). Meanwhile honest
``/healthz`` requests on new connections; afterwards, when each attacker connection was
closed. The figures are printed (``-s``) for RELIABILITY.md.
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import statistics
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.reliability.hostile import valid_envelope
from tests.reliability.servers import ServerProcess

HEAD_TIMEOUT_S = 4.0
ATTACKERS = 1500
# These tests are about the deadline and the bound on all connections, so their attacker
# (one address, 127.0.0.1) is given more than the bounds per address, which would
# otherwise close most of its connections first (test_head_floods.py tests those).
ONE_ADDRESS_UNBOUND = {"SPECSERVER_MAX_CONNECTIONS_PER_ADDRESS": "100000",
                       "SPECSERVER_MAX_UNFINISHED_HEADS_PER_ADDRESS": "100000"}


def _soft_nofile_1024() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))


def _server_fds(server: ServerProcess) -> int:
    assert server.proc is not None
    return len(list(Path(f"/proc/{server.proc.pid}/fd").iterdir()))


def _server_soft_nofile(server: ServerProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc/PID/limits")


@contextlib.contextmanager
def _own_fd_limit(needed: int):  # type: ignore[no-untyped-def]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the open-file hard limit here is {hard}, the attack needs {needed}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _attack(port: int, count: int) -> list[socket.socket]:
    socks = []
    for i in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i % 3 == 1:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        elif i % 3 == 2:
            sock.sendall(b"POST /v1/submissions HTTP/1.1\r\n")
        sock.setblocking(False)
        socks.append(sock)
    return socks


def _trickle(socks: list[socket.socket], stop: threading.Event) -> None:
    """One header byte every 0.5 s on every third connection, until it is closed."""
    while not stop.wait(0.5):
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.send(b"a")


def _closed_after(socks: list[socket.socket], started: float, wait_s: float
                  ) -> tuple[list[float], dict[str, int]]:
    """When the server closed each connection (seconds after ``started``) and what it
    sent first; connections still open after ``wait_s`` are left out of the times."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    closed: list[float] = []
    answers = {"408": 0, "nothing": 0}
    seen: dict[int, bytes] = {}
    deadline = started + wait_s
    while selector.get_map() and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if data:
                seen[sock.fileno()] = seen.get(sock.fileno(), b"") + data
                continue
            first = seen.get(sock.fileno(), b"")
            answers["408" if first.startswith(b"HTTP/1.1 408") else "nothing"] += 1
            closed.append(time.monotonic() - started)
            selector.unregister(sock)
    selector.close()
    return closed, answers


@pytest.mark.slow
def test_1500_unfinished_heads_are_closed_at_the_deadline_and_honest_requests_answered(
        tmp_path: Path) -> None:
    server = ServerProcess(str(tmp_path / "store.duckdb"), tmp_path,
                           env={"SPECSERVER_HEAD_TIMEOUT_S": str(HEAD_TIMEOUT_S),
                                "SPECSERVER_CHECK_WORKERS": "1", **ONE_ADDRESS_UNBOUND},
                           preexec_fn=_soft_nofile_1024)
    stop = threading.Event()
    socks: list[socket.socket] = []
    try:
        with _own_fd_limit(ATTACKERS + 512):
            server.start()
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            raised_to = _server_soft_nofile(server)
            assert raised_to == (hard if hard != resource.RLIM_INFINITY else 65536)
            fds_before = _server_fds(server)
            started = time.monotonic()
            socks = _attack(server.port, ATTACKERS)
            opened_s = time.monotonic() - started
            trickler = threading.Thread(target=_trickle, args=(socks[1::3], stop), daemon=True)
            trickler.start()
            time.sleep(0.3)
            fds_attacked = _server_fds(server)
            # Honest requests while every attacker connection is open.
            latencies = []
            with httpx.Client(timeout=5.0) as client:
                for _ in range(100):
                    begin = time.perf_counter()
                    answer = client.get(f"{server.url}/healthz",
                                        headers={"Connection": "close"})
                    latencies.append(time.perf_counter() - begin)
                    assert answer.status_code == 200
                posted = client.post(f"{server.url}/v1/submissions",
                                     content=valid_envelope(7100))
                assert posted.status_code == 201, posted.text
            honest_done_s = time.monotonic() - started
            closed, answers = _closed_after(socks, started, HEAD_TIMEOUT_S + opened_s + 10)
            stop.set()
            fds_after = _server_fds(server)
    finally:
        stop.set()
        for sock in socks:
            sock.close()
        server.stop()
    p99 = statistics.quantiles(latencies, n=100)[98]
    print(f"\nserver soft open-file limit 1024 -> {raised_to}; {ATTACKERS} unfinished heads "
          f"opened in {opened_s:.1f} s; server fds {fds_before} -> {fds_attacked} -> "
          f"{fds_after}; 100 /healthz meanwhile: median "
          f"{statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max "
          f"{max(latencies) * 1000:.1f} ms (done {honest_done_s:.1f} s into the attack); a "
          f"POST 201; attackers closed: {len(closed)} of {ATTACKERS} ({answers['408']} with "
          f"408), the last {max(closed):.1f} s after the first opened (deadline "
          f"{HEAD_TIMEOUT_S:g} s from each connection's start)")
    assert fds_attacked >= fds_before + ATTACKERS - 10  # the attack really held them
    assert len(closed) == ATTACKERS, answers  # every stalled connection was closed ...
    # ... within the head deadline of its own start (connections opened over opened_s).
    assert max(closed) <= HEAD_TIMEOUT_S + opened_s + 1.5, max(closed)
    assert min(closed) >= HEAD_TIMEOUT_S - 0.5, min(closed)
    assert fds_after <= fds_before + 5
    # The target is p99 <= 100 ms; on this shared machine, pass/fail is kept loose (the
    # figure is what RELIABILITY.md records).
    assert p99 < 1.0, p99


def test_a_complete_head_is_untouched_by_the_deadline(tmp_path: Path) -> None:
    """The deadline ends at the head: a body that takes longer than the head deadline is
    the body deadline's business, and a kept-alive connection serves a second request
    after the first connection's deadline would have passed."""
    server = ServerProcess(str(tmp_path / "store.duckdb"), tmp_path,
                           env={"SPECSERVER_HEAD_TIMEOUT_S": "1",
                                "SPECSERVER_BODY_READ_TIMEOUT_S": "5",
                                "SPECSERVER_BODY_MIN_RATE_BYTES_S": "0",
                                "SPECSERVER_CHECK_WORKERS": "0"})
    try:
        server.start()
        body = valid_envelope(7200)
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(b"POST /v1/submissions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode())
        for start in range(0, len(body), len(body) // 3 + 1):
            time.sleep(0.6)  # 1.8 s in all: past the head deadline, within the body's
            sock.sendall(body[start:start + len(body) // 3 + 1])
        reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 201"), reply[:200]
        sock.close()
        with httpx.Client(timeout=5.0) as client:
            assert client.get(f"{server.url}/healthz").status_code == 200
            time.sleep(1.5)
            # uvicorn's keep-alive (5 s) still holds the connection; the second head is
            # timed from its own first byte.
            assert client.get(f"{server.url}/healthz").status_code == 200
    finally:
        server.stop()


def test_connections_beyond_the_bound_are_closed_at_once(tmp_path: Path) -> None:
    server = ServerProcess(str(tmp_path / "store.duckdb"), tmp_path,
                           env={"SPECSERVER_HEAD_TIMEOUT_S": "3",
                                "SPECSERVER_MAX_CONNECTIONS": "40",
                                "SPECSERVER_CHECK_WORKERS": "0", **ONE_ADDRESS_UNBOUND})
    socks: list[socket.socket] = []
    try:
        server.start()
        started = time.monotonic()
        socks = _attack(server.port, 60)
        time.sleep(0.5)
        held = _server_fds(server)
        times, _ = _closed_after(socks, started, 6)
        closed = [t for t in times if t < 1.5]
        closed_later = [t for t in times if t >= 1.5]
        # The 20 beyond the bound are closed at once (well before the deadline) ...
        assert len(closed) == 20, times
        # ... the 40 held, at the head deadline (3 s).
        assert len(closed_later) == 40 and min(closed_later) >= 2.5, times
        with httpx.Client(timeout=5.0) as client:
            assert client.get(f"{server.url}/healthz").status_code == 200
        print(f"\nbound 40, 60 stalled connections: 20 closed within {max(closed):.2f} s, "
              f"server fds while held {held}, the other 40 closed at "
              f"{min(closed_later):.1f}-{max(closed_later):.1f} s")
    finally:
        for sock in socks:
            sock.close()
        server.stop()


def _complete(reply: bytes) -> bool:
    """An HTTP/1.1 answer whose head and Content-Length body are both in ``reply``."""
    head, found, body = reply.partition(b"\r\n\r\n")
    if not found:
        return False
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                   if line.lower().startswith(b"content-length:")), 0)
    return len(body) >= length


def test_a_trickled_body_is_cut_at_the_minimum_rate(tmp_path: Path) -> None:
    """8 bytes every 0.2 s (40 B/s) with a 10 s body deadline: cut after the 2 s grace,
    with 408, at the minimum rate's deadline, not the total's."""
    server = ServerProcess(str(tmp_path / "store.duckdb"), tmp_path,
                           env={"SPECSERVER_BODY_READ_TIMEOUT_S": "10",
                                "SPECSERVER_CHECK_WORKERS": "0"})
    try:
        server.start()
        body = valid_envelope(7300)
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        started = time.monotonic()
        sock.sendall(b"POST /v1/submissions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode())
        sock.settimeout(0.2)
        reply = b""
        seconds = 0.0
        for offset in range(0, len(body), 8):
            try:
                sock.sendall(body[offset:offset + 8])
                reply += sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break  # closed by the server: its answer may still be there to read
            if reply:
                break
        seconds = time.monotonic() - started
        sock.settimeout(3)
        with contextlib.suppress(OSError):
            # The head and the body may arrive in separate segments: read until the server
            # closes (it does after a 408) or the whole body is there.
            while not _complete(reply) and (chunk := sock.recv(65536)):
                reply += chunk
        sock.close()
    finally:
        server.stop()
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"slower than 2048 bytes per second" in reply
    assert seconds < 7, seconds  # the minimum rate's 2 s, not the total deadline's 10 s
    print(f"\n40 B/s body: 408 after {seconds:.1f} s (minimum rate 2048 B/s after 2 s; "
          "total deadline 10 s)")
