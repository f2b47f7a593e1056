"""What `specserver serve` does about connections that uvicorn leaves alone: a deadline for
request heads, a bound on open connections, and the open-file limit raised at start.

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
deadline is here, at the protocol level, in ~60 lines over uvicorn's own callbacks (for
both of uvicorn's HTTP/1.1 parsers), and no socket code of our own:

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
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Descriptors kept for everything that is not a client connection: the DuckDB file and its
# WAL, pooled PostgreSQL connections, the check workers' pipes, export files, logs.
FD_RESERVE = 256
# What a hard limit of "unlimited" is raised to (macOS refuses RLIM_INFINITY as a soft limit).
UNLIMITED_TARGET = 65536
REQUEST_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
                   b"content-length: 27\r\nconnection: close\r\n\r\nrequest head took too long\n")


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


class _Bounded:
    """The head deadline and the connection bound over uvicorn's protocol callbacks."""

    head_timeout_s: float = 10.0
    max_connections: int = 10_000
    # Set by uvicorn's protocol classes:
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    connections: set[Any]
    _head_timer: asyncio.TimerHandle | None = None

    # Listed first in each subclass's bases, so super() here is uvicorn's protocol.
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        if not self._over_bound():
            self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_complete()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm_head_deadline(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_expired)

    def _head_complete(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        self.transport.write(REQUEST_TIMEOUT)
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


class HttpToolsBounded(_Bounded, HttpToolsProtocol):
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_head_deadline()  # a later request on a kept-alive connection

    def on_headers_complete(self) -> None:
        self._head_complete()
        super().on_headers_complete()


class H11Bounded(_Bounded, H11Protocol):
    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._arm_head_deadline()  # a later request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._head_complete()


def bounded_protocol(head_timeout_s: float, max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol (httptools where installed, as uvicorn's ``auto``
    picks) with the head deadline and the connection bound."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        base: type[_Bounded] = H11Bounded
    else:
        base = HttpToolsBounded
    attributes = {"head_timeout_s": head_timeout_s, "max_connections": max_connections}
    return type(base.__name__, (base,), attributes)


__all__ = ["FD_RESERVE", "bounded_protocol", "connection_bound", "raise_open_file_limit"]
