"""What `specserver serve` does about connections that uvicorn leaves alone: a deadline for
request heads, a bound on their size, bounds on open connections (in all and per client
address) and on slow heads per address, and the open-file limit raised at start.

Why a subclass of uvicorn's protocol, and not another server or a proxy. uvicorn (0.55)
has no timeout for an unfinished request head: its only connection timer is the
keep-alive one, armed after a response. h11 is sans-I/O and keeps no time. Hypercorn's
``read_timeout`` is a timeout per read, so a client that sends one header byte every few
seconds is never cut. Granian has a real head deadline (hyper's ``header_read_timeout``),
but replacing the server would replace the lifespan, the check-worker setup, the
export's transport abort and every socket-level test for one timer. nginx's
``client_header_timeout`` is also a deadline for the whole head, and the PostgreSQL
profile of ``docker-compose.yml`` has nginx in front (``deploy/nginx.conf`` sets it); the
embedded profile and a plain ``specserver serve`` publish uvicorn itself. So the head
deadline is here, at the protocol level, over uvicorn's own callbacks (for both of
uvicorn's HTTP/1.1 parsers), and no socket code of our own:

- ``head_timeout_s``: from a connection's first moment (and from the first byte of each
  later request on a kept-alive connection) until its head is complete; past it the
  connection gets ``408`` and is closed. The body has its own deadline and minimum rate
  (``http/submissions.py`` ``read_body``), as Apache's ``mod_reqtimeout`` has
  ``header=`` and ``body=``.
- ``max_connections``: a connection accepted beyond it is closed at once, so the server
  never runs out of file descriptors (when it does, asyncio stops accepting for a second
  at a time and every client waits).
- ``raise_open_file_limit``: the soft limit up to the hard one (1,024 is a common soft
  default; a container's hard limit is usually far higher); the connection bound is set
  below whatever the limit then is, leaving ``FD_RESERVE`` for the store, the check
  workers and export files.
- ``max_head_bytes`` and ``MAX_HEAD_FIELDS``: the parser never sees a byte of a head past
  either (``431`` and closed). uvicorn's own limit, ``h11_max_incomplete_event_size``,
  bounds h11's buffer only (``serve`` sets it to the same size); httptools, the parser
  uvicorn picks when it is installed (``uvicorn[standard]``), keeps every header of an
  unfinished head in a Python list without limit: 8 connections sending header lines
  took the server from 168 MiB to 2.6 GB in 5 s. The fields are bounded as well as the
  bytes because a tiny header line (``a:b``, 5 bytes) costs ~150 bytes as Python objects.
- per client address (``PeerLimits``): at most ``open_per_address`` open connections, and
  at most ``slow_heads_per_address`` heads still unfinished ``SLOW_HEAD_AFTER_S`` after
  they began; one more connection is closed at once (nothing has been read, nothing is
  worth sending), one more slow head gets ``503`` with Retry-After. Without them one
  address holding unfinished heads and reopening every closed one kept the whole
  connection bound full, and another address's ``/healthz`` failed 47 of 47. uvicorn has
  no bound per address, and nginx's ``limit_conn`` counts a connection only once its
  request head has been read, so it bounds requests in progress, not unfinished heads
  (``deploy/nginx.conf``, docs/deploying.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Network, ip_address
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from specserver.ratelimit import client_address

# Descriptors kept for everything that is not a client connection: the DuckDB file and its
# WAL, pooled PostgreSQL connections, the check workers' pipes, export files, logs.
FD_RESERVE = 256
# What a hard limit of "unlimited" is raised to (macOS refuses RLIM_INFINITY as a soft limit).
UNLIMITED_TARGET = 65536
# Header fields of one head at most (gunicorn's and Tomcat's default): an honest client
# sends 5-20, a proxy adds a few.
MAX_HEAD_FIELDS = 100
# Line ends a head may hold: its request line's, one per field, the blank line's.
MAX_HEAD_LINES = MAX_HEAD_FIELDS + 2
# An honest client sends its head as soon as it has connected (one segment, a few on a
# slow link: well within a second). Past this a head is slow and counts against its
# address; not from its first moment, because a burst of honest connections from one
# address (a NAT, a benchmark) is accepted before any of their heads is read.
SLOW_HEAD_AFTER_S = 1.0


def _plain(status: str, text: str, *headers: str) -> bytes:
    """A whole ``connection: close`` answer with a text/plain body."""
    lines = [f"HTTP/1.1 {status}", "content-type: text/plain", *headers,
             f"content-length: {len(text) + 1}", "connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n" + text + "\n").encode("ascii")


REQUEST_TIMEOUT = _plain("408 Request Timeout", "request head took too long")
HEAD_TOO_LARGE = _plain("431 Request Header Fields Too Large", "request head too large")


def raise_open_file_limit() -> int:
    """The soft RLIMIT_NOFILE raised to the hard limit where the OS allows; returns the
    soft limit in force afterwards (0 where there is no such limit, as on Windows)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return UNLIMITED_TARGET if soft == resource.RLIM_INFINITY else int(soft)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)


def connection_bound(max_connections: int, open_file_limit: int) -> int:
    """``max_connections``, lowered to leave FD_RESERVE descriptors below the limit."""
    if open_file_limit <= 0:
        return max_connections
    return max(16, min(max_connections, open_file_limit - FD_RESERVE))


def head_prefix(data: bytes, bytes_left: int, lines_left: int) -> int:
    """How many bytes of ``data`` may go to the parser when the head it continues may
    still take ``bytes_left`` bytes and ``lines_left`` line ends: no byte past either."""
    end = min(len(data), max(0, bytes_left))
    # The usual read holds a whole head: its end found, its line ends counted, and no
    # search of the body behind it (found or not, the result is a piece within both bounds).
    head_end = data.find(b"\r\n\r\n", 0, end)
    if head_end >= 0 and data.count(b"\n", 0, head_end + 4) <= lines_left:
        return end
    position = 0
    for _ in range(max(0, lines_left)):
        found = data.find(b"\n", position, end)
        if found < 0:
            return end
        position = found + 1
    return position  # a byte past the last line end allowed would begin one more line


class PeerLimits:
    """Connections and slow heads per client address, one server's (its event loop's) own
    bookkeeping. An address is counted as the rate limits count it (``client_address``:
    an IPv4 address alone, an IPv6 address by its /64, which one host can fill). Peers in
    ``exempt`` (``trusted_proxies``) are not counted: a proxy carries many clients over
    its connections and limits them itself; counted as one address, it would have
    everybody behind it refused together."""

    def __init__(self, open_per_address: int, slow_heads_per_address: int,
                 exempt: Sequence[IPv4Network | IPv6Network] = ()) -> None:
        self.open_per_address = open_per_address
        self.slow_heads_per_address = slow_heads_per_address
        self._exempt = list(exempt)
        self._open: dict[str, int] = {}
        self._slow: dict[str, int] = {}

    def key(self, peer: tuple[str, int] | None) -> str | None:
        """The address a connection from ``peer`` counts against; None: not counted."""
        if peer is None:
            return None  # a Unix socket: only a local proxy can use it
        with contextlib.suppress(ValueError):
            address = ip_address(peer[0])
            if any(address.version == net.version and address in net
                   for net in self._exempt):
                return None
        return client_address(peer[0], None, ())

    def admit(self, key: str) -> bool:
        """A new connection: counted and True, or False (and not counted) while its
        address holds its share of connections or of slow heads."""
        held = self._open.get(key, 0)
        if held >= self.open_per_address or \
                self._slow.get(key, 0) >= self.slow_heads_per_address:
            return False
        self._open[key] = held + 1
        return True

    def release(self, key: str) -> None:
        _decrement(self._open, key)

    def slow_head(self, key: str) -> bool:
        """A head past ``SLOW_HEAD_AFTER_S``: counted and True, or False (and not counted)
        when its address already holds its share of slow heads."""
        slow = self._slow.get(key, 0)
        if slow >= self.slow_heads_per_address:
            return False
        self._slow[key] = slow + 1
        return True

    def slow_head_done(self, key: str) -> None:
        _decrement(self._slow, key)

    def held(self, key: str) -> tuple[int, int]:
        """(connections, slow heads) the address holds now."""
        return self._open.get(key, 0), self._slow.get(key, 0)


def _decrement(counts: dict[str, int], key: str) -> None:
    # An address with nothing left is dropped: the tables hold open connections only.
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


class _Bounded:
    """The head deadline, the head's size and the connection bounds over uvicorn's
    protocol callbacks. A subclass says where a head begins and ends for its parser
    (``_head_began``, ``_head_finished``) and whether bytes now go to a head
    (``_reading_head``)."""

    head_timeout_s: float = 10.0
    max_connections: int = 10_000
    max_head_bytes: int = 32 * 1024
    peers: PeerLimits | None = None  # None: no bound per address
    # Set by uvicorn's protocol classes:
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    connections: set[Any]
    client: tuple[str, int] | None
    cycle: Any  # the request being answered (uvicorn's RequestResponseCycle), or None
    # Per connection (class defaults until first set):
    _head_timer: asyncio.TimerHandle | None = None
    _peer: str | None = None  # the address it is counted against
    _slow: bool = False  # its head is counted as slow
    _head_open: bool = False  # a head's first byte has been parsed, its end not yet
    _head_bytes = 0  # bytes and line ends of the current head given to the parser
    _head_lines = 0
    _heads_begun = 0
    _heads_done = 0

    # Listed first in each subclass's bases, so super() here is uvicorn's protocol.
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        if not self._over_bound() and not self._over_address_bound():
            self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._peer is not None and self.peers is not None:
            self.peers.release(self._peer)
            self._peer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        # Given to the parser a piece at a time, so that no head, wherever it begins in a
        # read, is parsed past its bounds (a read may hold a body's end and a next head).
        while data and not self.transport.is_closing():
            in_head = self._reading_head()
            if in_head:
                size = head_prefix(data, self.max_head_bytes - self._head_bytes,
                                   MAX_HEAD_LINES - self._head_lines)
            else:
                size = self.max_head_bytes
            piece, data = data[:size], data[size:]
            begun, done = self._heads_begun, self._heads_done
            if piece:
                self._feed(piece)
            # Counted after parsing, and only for a head still open: a head that ends in
            # this piece (the usual read: a whole head and its body) costs no count.
            unfinished = in_head and self._heads_done == done
            charged = self._heads_begun != begun and self._head_open
            if charged:
                # A head that began inside this piece and is still open is charged the
                # whole piece: where in it the head began is the parser's secret.
                self._head_bytes, self._head_lines = len(piece), piece.count(b"\n")
            elif unfinished:
                self._head_bytes += len(piece)
                self._head_lines += piece.count(b"\n")
            full = self._head_bytes >= self.max_head_bytes or \
                self._head_lines >= MAX_HEAD_LINES
            # The head this piece was cut for is unfinished: a byte more is too many.
            if unfinished and (full or data) or charged and full:
                self._refuse(HEAD_TOO_LARGE)

    def _feed(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]

    def _reading_head(self) -> bool:
        raise NotImplementedError

    def _head_began(self) -> None:
        if not self._head_open:
            self._head_open = True
            self._heads_begun += 1
            self._arm_head_deadline()

    def _head_finished(self) -> None:
        if self._head_open or self._head_timer is not None:
            self._head_open = False
            self._heads_done += 1
            self._head_bytes = self._head_lines = 0
            self._stop_head_timer()

    def _arm_head_deadline(self) -> None:
        if self._head_timer is not None:
            return
        if self._peer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_expired)
        else:
            self._head_timer = self.loop.call_later(self._slow_after(), self._head_is_slow)

    def _slow_after(self) -> float:
        return min(SLOW_HEAD_AFTER_S, self.head_timeout_s / 2)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self._slow and self._peer is not None and self.peers is not None:
            self.peers.slow_head_done(self._peer)
        self._slow = False

    def _head_is_slow(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        assert self.peers is not None and self._peer is not None
        if not self.peers.slow_head(self._peer):
            # Its address holds its share of slow heads already: room for others. The
            # others free theirs by the head deadline at the latest.
            retry = math.ceil(self.head_timeout_s)
            self._refuse(_plain("503 Service Unavailable", "too many unfinished request "
                                "heads from this address", f"retry-after: {retry}"))
            return
        self._slow = True
        self._head_timer = self.loop.call_later(self.head_timeout_s - self._slow_after(),
                                                self._head_expired)

    def _head_expired(self) -> None:
        self._head_timer = None
        self._refuse(REQUEST_TIMEOUT)

    def _refuse(self, answer: bytes) -> None:
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A request before this head (pipelined) is still being answered: an answer
            # now would be read as that request's, so the connection just ends.
            self.transport.abort()
            return
        self.transport.write(answer)
        if self.transport.get_write_buffer_size():
            self.transport.abort()  # a client that does not read gets no grace
        else:
            self.transport.close()

    def _over_bound(self) -> bool:
        if len(self.connections) <= self.max_connections:
            return False
        self.connections.discard(self)
        self.transport.abort()
        return True

    def _over_address_bound(self) -> bool:
        key = None if self.peers is None else self.peers.key(self.client)
        if key is None:
            return False
        assert self.peers is not None
        if self.peers.admit(key):
            self._peer = key
            return False
        # Nothing read yet, so nothing worth answering: the cheapest refusal there is.
        self.connections.discard(self)
        self.transport.abort()
        return True


class HttpToolsBounded(_Bounded, HttpToolsProtocol):
    _in_body = False  # between a head's end and its message's end

    def _reading_head(self) -> bool:
        return not self._in_body

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_began()  # a later request on a kept-alive connection: its own deadline

    def on_headers_complete(self) -> None:
        self._head_finished()
        self._in_body = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        super().on_message_complete()


class H11Bounded(_Bounded, H11Protocol):
    def _reading_head(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def _feed(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._head_began()  # a later request on a kept-alive connection: its own deadline
        super()._feed(data)
        if self.conn.their_state is not h11.IDLE:
            self._head_finished()


def bounded_protocol(head_timeout_s: float, max_connections: int, *,
                     max_head_bytes: int = _Bounded.max_head_bytes,
                     peers: PeerLimits | None = None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol (httptools where installed, as uvicorn's ``auto``
    picks) with the head deadline, the head's bounds and the connection bounds."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        base: type[_Bounded] = H11Bounded
    else:
        base = HttpToolsBounded
    attributes = {"head_timeout_s": head_timeout_s, "max_connections": max_connections,
                  "max_head_bytes": max_head_bytes, "peers": peers}
    return type(base.__name__, (base,), attributes)


__all__ = ["FD_RESERVE", "MAX_HEAD_FIELDS", "SLOW_HEAD_AFTER_S", "PeerLimits",
           "bounded_protocol", "connection_bound", "head_prefix", "raise_open_file_limit"]
