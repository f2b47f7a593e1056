"""Two attacks on a server's connections from one address, and the measurements around
them, shared by ``test_head_floods.py`` (a small scale, asserting the behaviour) and
``bench/head_floods.py`` (the review's scale, printing the figures).

- ``hold_heads``: keep N connections open whose request head never ends (a request line
  and half a header, then a byte now and then), and open a new one for each the server
  closes, as fast as one process can. The review's finding: one address doing this
  filled the whole connection cap, and another address's ``/healthz`` failed 28 of 28.
- ``endless_headers``: N connections each send header lines without end, as fast as the
  socket takes them, and reconnect when the server closes them. The review's finding:
  8 connections sent ~1 GB of headers inside the 10 s head deadline and the server's
  resident memory went 236 -> 1,116 MiB (503 MiB after).

``probe_healthz`` asks ``GET /healthz`` on a new connection from another loopback
address (127.0.0.2: Linux routes the whole of 127/8 to the loopback interface), and
``resident_mib`` reads a process's resident memory.
"""

from __future__ import annotations

import contextlib
import errno
import resource
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# Linux: choose the local port at connect(), not at bind(), so that binding a source
# address does not use up the ephemeral ports faster than connecting from the default one.
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
UNFINISHED_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def raise_own_fd_limit(needed: int) -> None:
    """This process may hold ``needed`` descriptors (the soft limit raised, up to the hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _socket(source: str) -> socket.socket:
    sock = socket.socket()
    if source != "127.0.0.1":
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((source, 0))
    return sock


@dataclass
class HoldResult:
    opened: int = 0  # connections the attacker opened (connect succeeded)
    refused: int = 0  # connect failed (backlog full, reset during the handshake)
    closed: int = 0  # connections the server closed
    answers: dict[str, int] = field(default_factory=dict)  # first line of what it sent


def hold_heads(port: int, count: int, seconds: float, *, source: str = "127.0.0.1",
               trickle_s: float = 1.0, stop: threading.Event | None = None) -> HoldResult:
    """Keep ``count`` unfinished heads open to 127.0.0.1:``port`` from ``source`` for
    ``seconds``, replacing each the server closes at once; a byte of the header value
    every ``trickle_s`` on each, so that no timeout per read would ever fire."""
    result = HoldResult()
    selector = selectors.DefaultSelector()
    connecting: set[socket.socket] = set()
    held: dict[socket.socket, bytes] = {}
    until = time.monotonic() + seconds
    next_trickle = time.monotonic()

    def drop(sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(sock)
        connecting.discard(sock)
        sock.close()

    try:
        while time.monotonic() < until and not (stop is not None and stop.is_set()):
            # Open up to 200 at a time, so that closed ones are seen and replaced in between.
            for _ in range(min(200, count - len(connecting) - len(held))):
                sock = _socket(source)
                sock.setblocking(False)
                code = sock.connect_ex(("127.0.0.1", port))
                if code not in (0, errno.EINPROGRESS):
                    result.refused += 1
                    sock.close()
                    continue
                connecting.add(sock)
                selector.register(sock, selectors.EVENT_WRITE)
            for key, _ in selector.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock in connecting:
                    connecting.discard(sock)
                    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                        result.refused += 1
                        drop(sock)
                        continue
                    result.opened += 1
                    try:
                        sock.send(UNFINISHED_HEAD)
                    except OSError:
                        result.closed += 1
                        drop(sock)
                        continue
                    held[sock] = b""
                    selector.modify(sock, selectors.EVENT_READ)
                    continue
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if data:
                    held[sock] += data
                    continue
                answer = held.pop(sock).split(b"\r\n", 1)[0].decode("latin-1") or "nothing"
                result.answers[answer] = result.answers.get(answer, 0) + 1
                result.closed += 1
                drop(sock)
            now = time.monotonic()
            if now >= next_trickle:
                next_trickle = now + trickle_s
                for sock in list(held):
                    with contextlib.suppress(OSError):
                        sock.send(b"a")
    finally:
        for sock in list(connecting) + list(held):
            drop(sock)
        selector.close()
    return result


@dataclass
class FloodResult:
    connections: int = 0  # connections opened in all
    bytes_sent: int = 0
    answers: dict[str, int] = field(default_factory=dict)


def _flood_one(port: int, until: float, line: bytes, result: FloodResult,
               lock: threading.Lock) -> None:
    block = line * max(1, 65536 // len(line))
    while time.monotonic() < until:
        sent = 0
        answer = "nothing"
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            time.sleep(0.01)
            continue
        with sock:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                while time.monotonic() < until:
                    sent += sock.send(block)
            except OSError:
                pass  # the server closed it (or stopped reading for 2 s)
            with contextlib.suppress(OSError):
                sock.settimeout(0.5)
                first = sock.recv(4096)
                answer = first.split(b"\r\n", 1)[0].decode("latin-1") or "nothing"
        with lock:
            result.connections += 1
            result.bytes_sent += sent
            result.answers[answer] = result.answers.get(answer, 0) + 1


def endless_headers(port: int, connections: int, seconds: float,
                    line: bytes = b"X-Flood: " + b"a" * 990 + b"\r\n") -> FloodResult:
    """``connections`` threads, each sending header lines (``line`` again and again)
    without end for ``seconds``, reconnecting whenever the server closes it."""
    result = FloodResult()
    lock = threading.Lock()
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=_flood_one, args=(port, until, line, result, lock),
                                daemon=True) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 10)
    return result


def probe_healthz(port: int, *, source: str = "127.0.0.2", timeout_s: float = 3.0
                  ) -> float | None:
    """Seconds one ``GET /healthz`` on a new connection from ``source`` took to be
    answered 200; None when it was not (refused, reset, another status, no answer)."""
    started = time.perf_counter()
    try:
        with _socket(source) as sock:
            sock.settimeout(timeout_s)
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = b""
            while b"\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError:
        return None
    if not answer.startswith(b"HTTP/1.1 200"):
        return None
    return time.perf_counter() - started


def probe_for(port: int, seconds: float, every_s: float, *, source: str = "127.0.0.2",
              timeout_s: float = 3.0) -> list[float | None]:
    """``probe_healthz`` every ``every_s`` for ``seconds``."""
    results: list[float | None] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        began = time.monotonic()
        results.append(probe_healthz(port, source=source, timeout_s=timeout_s))
        time.sleep(max(0.0, every_s - (time.monotonic() - began)))
    return results


def resident_mib(pid: int) -> float:
    """A process's resident memory (VmRSS) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    """How many file descriptors a process holds."""
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


class Sampler:
    """``measure()`` every ``every_s`` in a thread, from ``with`` to its end."""

    def __init__(self, measure: Callable[[], float], every_s: float = 0.1) -> None:
        self.measure = measure
        self.every_s = every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            with contextlib.suppress(OSError):
                self.samples.append(self.measure())

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
