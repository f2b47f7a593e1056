"""The request-head deadline, the head's bounds and the connection bounds (in all and per
client address) over both of uvicorn's HTTP/1.1 parsers (``specserver serve`` picks
httptools where installed, as uvicorn does; h11 otherwise), on a real socket with a tiny
ASGI app. Other addresses are 127.0.0.2 and 127.0.0.3: Linux routes all of 127/8 to the
loopback interface."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from specserver.cli.connections import (
    FD_RESERVE,
    MAX_HEAD_FIELDS,
    H11Bounded,
    HttpToolsBounded,
    PeerLimits,
    connection_bound,
    head_prefix,
    raise_open_file_limit,
)

HEAD_TIMEOUT_S = 0.6


async def _app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _serve(protocol: type, max_head_bytes: int | None = None) -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app, http=protocol, log_level="critical", lifespan="off",
                            timeout_keep_alive=5,
                            h11_max_incomplete_event_size=max_head_bytes)
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


@pytest.fixture(params=[HttpToolsBounded, H11Bounded], ids=["httptools", "h11"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    protocol = type("P", (request.param,), {"head_timeout_s": HEAD_TIMEOUT_S,
                                            "max_connections": 20})
    yield from _serve(protocol)


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


# --- the head's bounds and the bounds per address ------------------------------------------

MAX_HEAD = 2048
PER_ADDRESS = 4
SLOW_PER_ADDRESS = 2


@pytest.fixture(params=[HttpToolsBounded, H11Bounded], ids=["httptools", "h11"])
def limited(request: pytest.FixtureRequest) -> Iterator[int]:
    """A server with a 2 KiB head bound, 4 connections and 2 slow heads per address (a
    head is slow after HEAD_TIMEOUT_S / 2 here), 100 connections in all."""
    protocol = type("P", (request.param,), {
        "head_timeout_s": HEAD_TIMEOUT_S, "max_connections": 100, "max_head_bytes": MAX_HEAD,
        "peers": PeerLimits(PER_ADDRESS, SLOW_PER_ADDRESS)})
    yield from _serve(protocol, MAX_HEAD)


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def _answer(sock: socket.socket, timeout: float = 5) -> bytes:
    """What the server sends until it closes (a reset after its answer ends it too)."""
    sock.settimeout(timeout)
    data = b""
    with sock:
        try:
            while chunk := sock.recv(4096):
                data += chunk
                if data.endswith(b"\r\n\r\nok"):
                    break
        except ConnectionResetError:
            pass
    return data


def _head(size: int, fields: int = 1) -> bytes:
    """A GET head of exactly ``size`` bytes with ``fields`` header fields."""
    start = b"GET / HTTP/1.1\r\nHost: x\r\n"
    pads = [b"X-P%d: " % i for i in range(fields - 1)]
    room = size - len(start) - sum(len(p) + 2 for p in pads) - 2
    assert room >= 0
    pads = [p + b"a" * (room // len(pads) + (i < room % len(pads))) for i, p in enumerate(pads)] \
        if pads else []
    return start + b"".join(p + b"\r\n" for p in pads) + b"\r\n"


def test_head_prefix_stops_at_the_bytes_or_the_line_ends_allowed() -> None:
    assert head_prefix(b"abcdef", 4, 10) == 4
    assert head_prefix(b"a\nb\nc\nd", 100, 2) == 4  # up to and with the 2nd line end
    assert head_prefix(b"a\nb\nc\nd", 3, 2) == 3
    assert head_prefix(b"abc", 10, 0) == 0
    assert head_prefix(b"abc", 0, 10) == 0
    # A whole head within both bounds: the rest of the read may follow (its body's line
    # ends are not the head's); one line end too many: cut where the slow path cuts.
    read = b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody\nwith\nlines"
    assert head_prefix(read, 1000, 3) == len(read)
    assert head_prefix(read, 20, 3) == 20
    assert head_prefix(read, 1000, 2) == read.index(b"\r\n\r\n") + 2


def test_a_head_of_the_bound_is_answered_one_byte_more_is_431(limited: int) -> None:
    for size, status in ((MAX_HEAD, b"HTTP/1.1 200"), (MAX_HEAD + 1, b"HTTP/1.1 431")):
        head = _head(size, fields=5)
        assert len(head) == size
        sock = _connect(limited)
        sock.sendall(head)
        assert _answer(sock).startswith(status), size


def test_one_header_field_too_many_is_431(limited: int) -> None:
    for fields, status in ((MAX_HEAD_FIELDS, b"HTTP/1.1 200"),
                           (MAX_HEAD_FIELDS + 1, b"HTTP/1.1 431")):
        head = _head(MAX_HEAD, fields=fields)
        sock = _connect(limited)
        sock.sendall(head)
        assert _answer(sock).startswith(status), fields


def test_header_lines_without_end_are_cut_at_the_bound(limited: int) -> None:
    sock = _connect(limited)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    sent = 0
    sock.settimeout(5)
    try:
        while sent < 50 * 1024 * 1024:  # far beyond any kernel buffer: the server cut it
            sent += sock.send(b"X-Flood: " + b"a" * 1000 + b"\r\n")
    except OSError:
        pass
    assert sent < 50 * 1024 * 1024
    assert _answer(sock).startswith(b"HTTP/1.1 431")


def test_each_head_of_a_kept_alive_connection_has_the_whole_bound(limited: int) -> None:
    sock = _connect(limited)
    sock.settimeout(5)
    for _ in range(3):  # 3 x 2 KiB on one connection: each head is bounded, not their sum
        sock.sendall(_head(MAX_HEAD, fields=3))
        answer = b""
        while not answer.endswith(b"\r\n\r\nok"):
            answer += sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200")
    sock.close()


def test_a_pipelined_head_after_a_body_is_bounded_too(limited: int) -> None:
    """A body's end and the next head in one read: a small next head is answered, a
    large one is not (httptools: cut at the bound, charged the whole read it began in;
    h11 holds a pipelined request until the answer before it is sent, then its own
    ``max_incomplete_event_size``, set to the same bound, refuses it with 400)."""
    body = b"x" * 100
    post = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + body
    sock = _connect(limited)
    sock.sendall(post + _head(300))
    answer = _answer_count(sock, 2)
    assert answer.count(b"HTTP/1.1 200") == 2, answer
    sock = _connect(limited)
    sock.sendall(post + b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD * 2))
    answer = _answer_count(sock, 2)
    assert answer.count(b"HTTP/1.1 200") <= 1, answer  # the POST's, if sent before the cut
    assert b"HTTP/1.1 431" not in answer[:12]  # never read as the POST's answer


def _answer_count(sock: socket.socket, count: int) -> bytes:
    sock.settimeout(5)
    data = b""
    with sock:
        while data.count(b"\r\n\r\nok") < count:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return data


def _closed_now(sock: socket.socket, within: float = 0.2) -> bool:
    """The server closed ``sock`` (without answering) within ``within`` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_one_address_holds_its_share_of_connections_and_no_more(limited: int) -> None:
    held = [_connect(limited) for _ in range(PER_ADDRESS)]
    try:
        time.sleep(0.05)
        extra = _connect(limited)
        assert _closed_now(extra)  # closed at once: nothing was read
        extra.close()
        assert not any(_closed_now(sock, 0.01) for sock in held)
        other = _connect(limited, "127.0.0.2")  # another address is answered meanwhile
        other.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _answer(other).startswith(b"HTTP/1.1 200")
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.1)  # their connection_lost has run: the address has room again
    again = _connect(limited)
    again.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _answer(again).startswith(b"HTTP/1.1 200")


def test_slow_heads_beyond_the_share_get_503_and_new_connections_are_closed(
        limited: int) -> None:
    socks = [_connect(limited) for _ in range(SLOW_PER_ADDRESS + 1)]
    for sock in socks:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    time.sleep(HEAD_TIMEOUT_S / 2 + 0.1)  # past the slow mark, before the deadline
    answers = {}
    for sock in socks:
        sock.settimeout(0.05)
        with contextlib.suppress(TimeoutError):
            answers[sock] = sock.recv(4096)
    assert len(answers) == 1, answers
    [(refused, answer)] = answers.items()
    assert answer.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in answer, answer
    refused.close()
    newcomer = _connect(limited)  # the address holds its share of slow heads
    assert _closed_now(newcomer)
    newcomer.close()
    other = _connect(limited, "127.0.0.3")
    other.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _answer(other).startswith(b"HTTP/1.1 200")
    for sock in socks:  # the others end at the head deadline as before
        if sock is not refused:
            assert _answer(sock).startswith(b"HTTP/1.1 408")


def test_a_burst_of_honest_connections_from_one_address_is_not_slow() -> None:
    """20 connections from one address accepted before any head is read: none is slow,
    so none is refused although only 2 slow heads are allowed per address."""
    protocol = type("P", (HttpToolsBounded,), {
        "head_timeout_s": HEAD_TIMEOUT_S, "max_connections": 100,
        "peers": PeerLimits(64, SLOW_PER_ADDRESS)})
    for port in _serve(protocol):
        socks = [_connect(port) for _ in range(20)]
        for sock in socks:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert all(_answer(sock).startswith(b"HTTP/1.1 200") for sock in socks)


def test_a_trusted_proxy_is_not_counted_as_one_address() -> None:
    protocol = type("P", (HttpToolsBounded,), {
        "head_timeout_s": HEAD_TIMEOUT_S, "max_connections": 100,
        "peers": PeerLimits(PER_ADDRESS, SLOW_PER_ADDRESS,
                            exempt=[ipaddress.ip_network("127.0.0.1/32")])})
    for port in _serve(protocol):
        socks = [_connect(port) for _ in range(PER_ADDRESS * 3)]
        for sock in socks:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert all(_answer(sock).startswith(b"HTTP/1.1 200") for sock in socks)


def test_addresses_are_counted_by_range_and_released() -> None:
    peers = PeerLimits(2, 1)
    v6 = peers.key(("2001:db8::1", 1))
    assert v6 == peers.key(("2001:db8::ffff", 2)) != peers.key(("2001:db8:0:1::1", 3))
    assert peers.key(("::ffff:192.0.2.1", 1)) == peers.key(("192.0.2.1", 2)) == "192.0.2.1"
    assert peers.key(None) is None
    assert v6 is not None and peers.admit(v6) and peers.admit(v6) and not peers.admit(v6)
    assert peers.slow_head(v6) and not peers.slow_head(v6)
    peers.slow_head_done(v6)
    peers.release(v6)
    peers.release(v6)
    assert peers.held(v6) == (0, 0)
    assert peers.admit(v6)
