"""The request-head deadline and the connection bound over both of uvicorn's HTTP/1.1
parsers (``specserver serve`` picks httptools where installed, as uvicorn does; h11
otherwise), on a real socket with a tiny ASGI app."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from specserver.cli.connections import (
    FD_RESERVE,
    H11Bounded,
    HttpToolsBounded,
    connection_bound,
    raise_open_file_limit,
)

HEAD_TIMEOUT_S = 0.6


async def _app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(params=[HttpToolsBounded, H11Bounded], ids=["httptools", "h11"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    protocol = type("P", (request.param,), {"head_timeout_s": HEAD_TIMEOUT_S,
                                            "max_connections": 20})
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app, http=protocol, log_level="critical", lifespan="off",
                            timeout_keep_alive=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])),
                              daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def _closed_within(sock: socket.socket, seconds: float) -> tuple[float, bytes]:
    """Read until the server closes ``sock`` (then closed here too)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    data = b""
    with sock:
        while chunk := sock.recv(4096):
            data += chunk
    return time.monotonic() - started, data


def test_an_unfinished_head_is_closed_at_the_deadline(port: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    for _ in range(3):  # still trickling: no timeout per read would fire
        time.sleep(0.1)
        sock.sendall(b"a")
    seconds, data = _closed_within(sock, 5)
    assert data.startswith(b"HTTP/1.1 408")
    assert seconds < HEAD_TIMEOUT_S + 0.5


def test_a_silent_connection_is_closed_at_the_deadline(port: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    seconds, data = _closed_within(sock, 5)
    assert data.startswith(b"HTTP/1.1 408") and seconds < HEAD_TIMEOUT_S + 0.5


def test_kept_alive_requests_each_get_their_own_deadline(port: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(5)
    for _ in range(3):  # 3 x 0.4 s: past one deadline from the connection's start
        time.sleep(0.4)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b"\r\n\r\nok"):
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200")
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # a later head that never ends
    seconds, data = _closed_within(sock, 5)
    assert data.startswith(b"HTTP/1.1 408") and seconds < HEAD_TIMEOUT_S + 0.5


def test_connections_beyond_the_bound_are_closed_at_once(port: int) -> None:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(25)]
    try:
        time.sleep(0.2)
        closed = 0
        for sock in socks:
            sock.settimeout(0.05)
            try:
                closed += sock.recv(4096) == b""
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed += 1
        assert closed == 5
    finally:
        for sock in socks:
            sock.close()


def test_the_bound_stays_below_the_open_file_limit() -> None:
    assert connection_bound(10_000, 1024) == 1024 - FD_RESERVE
    assert connection_bound(500, 65536) == 500
    assert connection_bound(10_000, 0) == 10_000  # no such limit (Windows)
    assert raise_open_file_limit() >= 1024
