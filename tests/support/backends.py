"""Test helpers for running the store on DuckDB and PostgreSQL alike (which store:
``tests.support.postgres``: ``STORES``, ``store_url_for``).

- ``board_bodies(n)``: signed ``ollama-draft`` submissions with confirmed drafts over the
  example machines and a few contributors, so the leaderboard has real groups.
- ``stored_counts(engine, ids)``: rows per table for each submission id.
- ``TcpProxy``: a loopback TCP forwarder that can cut every connection and refuse new
  ones, to stand in for PostgreSQL restarting without touching the shared server.
"""

from __future__ import annotations

import functools
import hashlib
import socket
import threading
from collections.abc import Iterable
from typing import Any

import nacl.signing
from sqlalchemy import Engine, func, select

from specschema.envelope import envelope_bytes, sign_envelope
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specschema.models import Submission
from specschema.payload import submission_bytes
from specserver.store import tables
from specserver.store.tables import INGEST_TABLES


def signer(seed: int) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(hashlib.sha256(f"backends-key-{seed}".encode()).digest())


def signed(submission: Submission, key_seed: int) -> bytes:
    return envelope_bytes(sign_envelope(submission_bytes(submission), signer(key_seed)))


def board_submission(i: int, **kwargs: Any) -> Submission:
    values: dict[str, Any] = {
        "seed": 10_000 + i,
        "engine_version": "0.30.1",
        "machine": EXAMPLE_MACHINES[i % len(EXAMPLE_MACHINES)],
        "draft_speedups": {"spec_4": 1.15 + 0.04 * (i % 7), "spec_8": 1.05 + 0.03 * (i % 3)},
        "counters_seen": i % 5 != 0,  # some drafts `not_observed`, most `confirmed`
    }
    values.update(kwargs)
    return example_submission("ollama-draft", **values)


@functools.cache
def board_body(i: int, contributors: int = 5) -> bytes:
    return signed(board_submission(i), i % contributors)


def board_bodies(count: int, contributors: int = 5, start: int = 0) -> list[bytes]:
    """``count`` distinct signed submissions from ``contributors`` keys (memoised)."""
    return [board_body(i, contributors) for i in range(start, start + count)]


def submission_id_of(body: bytes) -> str:
    import base64
    import json

    payload = json.loads(base64.b64decode(json.loads(body)["payload"]))
    return str(payload["submission_id"])


def expected_rows(body: bytes) -> dict[str, int]:
    """The rows one stored submission must have in each ingest table."""
    import base64
    import json

    payload = json.loads(base64.b64decode(json.loads(body)["payload"]))
    from specschema.protocol_files import find_protocol

    configs = payload["configs"]
    ref = payload["protocol"]
    protocol = find_protocol(ref["id"], ref["version"], ref["sha256"])
    # store version 15: a row per draft config and domain of the protocol's prompt set
    domains = len({p.domain for p in protocol.prompts}) if protocol and protocol.prompts else 0
    return {
        "submissions": 1, "envelopes": 1, "fingerprints": 1, "configs": len(configs),
        "trials": sum(len(c["trials"]) for c in configs), "summaries": len(configs),
        "domain_results": domains * sum(c["role"] == "draft" for c in configs),
    }


def stored_counts(engine: Engine, ids: Iterable[str]) -> dict[str, dict[str, int]]:
    """{submission id: {table: rows}} for every ingest table."""
    wanted = list(ids)
    out: dict[str, dict[str, int]] = {sid: {t.name: 0 for t in INGEST_TABLES} for sid in wanted}
    with engine.connect() as conn:
        for table in INGEST_TABLES:
            result = conn.execute(
                select(table.c.submission_id, func.count())
                .where(table.c.submission_id.in_(wanted))
                .group_by(table.c.submission_id)
            )
            for sid, count in result:
                out[sid][table.name] = int(count)
    return out


def stored_envelope_sha(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(select(tables.envelopes.c.submission_id, tables.envelopes.c.body))
        return {sid: hashlib.sha256(bytes(body)).hexdigest() for sid, body in rows}


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target; ``cut()`` severs everything until ``restore()``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._up = threading.Event()
        self._up.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._up.is_set():
                client.close()  # "connection refused", as far as libpq can tell
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Drop every open connection and refuse new ones."""
        self._up.clear()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def restore(self) -> None:
        self._up.set()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()
