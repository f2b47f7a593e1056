"""A hostile HTTP peer on a loopback port: each request is answered by a test's function
writing raw bytes to the socket, so an answer can stall, trickle, break off, never end
its line, or carry terminal escape sequences, as no well-behaved server would.

``RawPeer(answer)``: ``answer(method, path, sock)`` writes whatever it likes; the peer
counts requests (``requests``) and closes the connection when ``answer`` returns.
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from typing import Any

Answer = Callable[[str, str, socket.socket], None]


def response_head(status: int, reason: str = "X", headers: dict[str, str] | None = None,
                  length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def json_response(status: int, body: Any) -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return response_head(status, headers={"Content-Type": "application/json"},
                         length=len(data)) + data


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        length = 0
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        with self.server.lock:
            self.server.requests.append((method, path))
        with contextlib.suppress(OSError):
            self.server.answer(method, path, sock)
            sock.shutdown(socket.SHUT_WR)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    answer: Answer
    lock: threading.Lock
    requests: list[tuple[str, str]]


class RawPeer:
    def __init__(self, answer: Answer) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.answer = answer
        self._server.lock = threading.Lock()
        self._server.requests = []
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        with self._server.lock:
            return list(self._server.requests)

    def __enter__(self) -> RawPeer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def raw_peer(answer: Answer) -> Iterator[RawPeer]:
    with RawPeer(answer) as peer:
        yield peer
