"""Stalled downloads for the export tests and bench/stalled_exports.py.

A stalled client sends ``GET /v1/export`` and never reads the answer. Its socket has a
small receive buffer (set before connecting, so the TCP window stays small), so the
server's send blocks after a few hundred kilobytes: the flow-controlled stall
of a reader that stopped.
A client that simply closes is not a stall; these sockets stay open until ``close``.

``big_store`` makes an export large enough to outlast the kernel's buffers: a few real
submissions through the store's own ingestion path, then their summary rows multiplied in
SQL (distinct config names), so the export has tens of thousands of rows without ingesting
thousands of submissions.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

from specserver.ingest.prepare import CheckLimits, prepare_submission
from specserver.settings import database_url_for
from specserver.store.database import Store
from tests.reliability.load import make_items

RECEIVE_BUFFER = 4096


def big_store(path: Path, submissions: int = 6, copies: int = 4000) -> int:
    """A DuckDB store at ``path`` whose export has ``submissions * 3 * copies`` rows
    (each about 400 bytes of CSV); returns that row count."""
    store = Store(database_url_for(str(path)), ban_cache_s=0)
    store.open()
    try:
        limits = CheckLimits(max_age=timedelta(days=30), max_future_skew=timedelta(minutes=5))
        for _, body in make_items(range(submissions), keys=submissions):
            prepared = prepare_submission(body, datetime.now(UTC), limits)
            store.enqueue(prepared.submission_id, prepared.body_sha256, prepared.received_at,
                          prepared.rows).result(30)
        with store.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO summaries SELECT s.* REPLACE "
                "(s.config_name || '#' || CAST(t.i AS VARCHAR) AS config_name) "
                f"FROM summaries s, range(1, {int(copies)}) t(i)")
            rows = conn.exec_driver_sql("SELECT count(*) FROM summaries").scalar()
    finally:
        store.close()
    return int(rows or 0)


def stall(port: int, path: str = "/v1/export") -> socket.socket:
    """Open a connection, ask for ``path`` and never read: the caller keeps the socket."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return sock


def stall_many(port: int, count: int, path: str = "/v1/export") -> list[socket.socket]:
    return [stall(port, path) for _ in range(count)]


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        try:
            sock.close()
        except OSError:
            pass


def status_line(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """The first line the server answered on a stalled socket (read a little only)."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(RECEIVE_BUFFER)
    except OSError:
        return b""
    return data.split(b"\r\n", 1)[0]
