"""The store: one SQLAlchemy engine, migrations, the single writer, and reads by id.

API for the rest of the server (docs/server.md, "Store API"):

- ``Store(url, ...)`` builds the engine lazily (nothing connects); ``open()`` migrates and
  starts the writer; ``close()`` drains the writer and disposes the engine.
- ``store.engine``: the SQLAlchemy Engine for reads (``with store.engine.connect()``).
  On DuckDB every connection shares the one in-process database; reads never block the
  writer (MVCC). Another *process* cannot open the file while the server runs.
- ``store.enqueue(submission_id, body_sha256, received_at, rows)`` -> a Future of the
  ``WriteOutcome``, resolved after the commit that holds the rows.
- ``with store.arriving():`` around a request that may submit: when none is left in
  progress the writer commits what it has instead of gathering longer.
- ``store.write(fn)`` / ``await store.awrite(fn)``: run ``fn(conn)`` on the writer thread in
  its own transaction (moderation, imports): all writes go through the one writer.
- ``store.get_submission(id)``: the public view of one stored submission, or None.
- ``store.is_banned(key_id)`` (cached ``ban_cache_s``), ``store.invalidate_bans()``.
- ``store.healthy()``: the store answers a query.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, or_, select, text
from sqlalchemy.engine import make_url

from specserver.errors import Unavailable
from specserver.store import tables
from specserver.store.migrations import migrate
from specserver.store.tables import RowSet
from specserver.store.writer import GroupCommitWriter, WriteOutcome, WriteRequest

T = TypeVar("T")
# DuckDB settings of the store's database (global to it). A checkpoint runs inside the
# commit that crosses checkpoint_threshold (DuckDB's default, 16 MiB here: ~900 submissions)
# and blocks every writer meanwhile. Its "vacuum" tasks re-write not yet full row groups at
# checkpoints; with ~12 KB envelopes in a row group of up to 122,880 rows that grew to
# 0.5-9 s stalls as the file grew (and doubled the file), so they are off: the store never
# deletes rows but bans, the only thing vacuum reclaims. BENCHMARKS.md, "Ingest".
DUCKDB_SETTINGS = {"max_vacuum_tasks": "0"}


def make_engine(url: str) -> Engine:
    """An engine for the store URL. Does not connect."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        from specserver.store import postgres  # timeouts and pool bounds (issue 7)

        engine = create_engine(url, **postgres.engine_options())
        postgres.configure_engine(engine)
        return engine
    return create_engine(url)


def display_url(url: str) -> str:
    """The store URL for logs and messages: a PostgreSQL password is never printed."""
    return make_url(url).render_as_string(hide_password=True)


def make_writer(engine: Engine, *, window_s: float, max_batch: int) -> GroupCommitWriter:
    """The single writer for this dialect (PostgreSQL: insert-or-conflict, for replicas)."""
    if engine.dialect.name == "postgresql":
        from specserver.store.postgres import PostgresWriter

        return PostgresWriter(engine, window_s=window_s, max_batch=max_batch)
    return GroupCommitWriter(engine, window_s=window_s, max_batch=max_batch)


def ensure_folder(url: str) -> None:
    """Create the folder of an embedded DuckDB file."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "duckdb" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database or "").expanduser().parent.mkdir(parents=True, exist_ok=True)


class Store:
    def __init__(
        self,
        url: str,
        *,
        group_commit_s: float = 0.004,
        group_commit_max: int = 512,
        ban_cache_s: float = 5.0,
        duckdb_threads: int = 0,
    ) -> None:
        self.url = url
        self.duckdb_threads = duckdb_threads
        self.engine: Engine = make_engine(url)
        self.writer = make_writer(
            self.engine, window_s=group_commit_s, max_batch=group_commit_max
        )
        self.ban_cache_s = ban_cache_s
        self._bans: frozenset[str] = frozenset()
        self._bans_loaded_at = float("-inf")
        self._bans_lock = threading.Lock()
        self.schema_version: int | None = None
        self._arriving = 0

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    # lifecycle ----------------------------------------------------------------------------

    def open(self) -> None:
        ensure_folder(self.url)
        self.schema_version = migrate(self.engine)
        if self.dialect == "duckdb":
            with self.engine.connect() as conn:
                settings = dict(DUCKDB_SETTINGS)
                if self.duckdb_threads:
                    settings["threads"] = str(int(self.duckdb_threads))
                for name, value in settings.items():
                    conn.exec_driver_sql(f"SET {name} = {value}")
        self.writer.start()

    def close(self) -> None:
        self.writer.stop()
        self.engine.dispose()

    # writes -------------------------------------------------------------------------------

    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Around a request that may submit (event-loop thread only): when the last one in
        progress has submitted or failed, the writer need not gather any longer."""
        self._arriving += 1
        try:
            yield
        finally:
            self._arriving -= 1
            if self._arriving == 0:
                self.writer.nothing_more_coming()

    def enqueue(
        self, submission_id: str, body_sha256: str, received_at: datetime, rows: RowSet
    ) -> Future[WriteOutcome]:
        """Hand one submission's rows to the writer; the future resolves after the commit."""
        future: Future[WriteOutcome] = Future()
        self.writer.submit(WriteRequest(
            submission_id=submission_id,
            body_sha256=body_sha256,
            received_at=received_at,
            rows=rows,
            future=future,
        ))
        return future

    def write(self, fn: Callable[[Connection], T], timeout: float | None = 60.0) -> T:
        result: T = self.writer.run_job(fn).result(timeout)
        return result

    async def awrite(self, fn: Callable[[Connection], T]) -> T:
        result: T = await asyncio.wrap_future(self.writer.run_job(fn))
        return result

    # bans ---------------------------------------------------------------------------------

    def banned_keys(self) -> frozenset[str]:
        now = time.monotonic()
        if now - self._bans_loaded_at >= self.ban_cache_s:
            with self._bans_lock:
                if now - self._bans_loaded_at >= self.ban_cache_s:
                    with self.engine.connect() as conn:
                        rows = conn.execute(select(tables.bans.c.key_id)).scalars().all()
                    self._bans = frozenset(rows)
                    self._bans_loaded_at = time.monotonic()
        return self._bans

    def is_banned(self, key_id: str) -> bool:
        return key_id in self.banned_keys()

    def invalidate_bans(self) -> None:
        self._bans_loaded_at = float("-inf")

    # reads --------------------------------------------------------------------------------

    def healthy(self) -> bool:
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1")).scalar()
        except Exception:  # noqa: BLE001 - health is a yes/no answer
            return False
        return True

    def get_submission(self, submission_id: str) -> dict[str, Any] | None:
        """The public view: submission row, fingerprint, configs, trials, summaries,
        moderation history and the raw envelope (base64) for re-verification."""
        try:
            with self.engine.connect() as conn:
                return _submission_view(conn, submission_id)
        except Exception as exc:
            raise Unavailable("the store cannot be read right now", retry_after=5) from exc


def _rows(conn: Connection, table: Any, submission_id: str, *order: Any) -> list[dict[str, Any]]:
    result = conn.execute(select(table).where(table.c.submission_id == submission_id)
                          .order_by(*order))
    return [_jsonable(dict(row._mapping)) for row in result]


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, datetime):
            value = value.isoformat() + "Z"
        out[key] = value
    return out


def _submission_view(conn: Connection, submission_id: str) -> dict[str, Any] | None:
    sub = tables.submissions
    row = conn.execute(select(sub).where(sub.c.submission_id == submission_id)).first()
    if row is None:
        return None
    submission = _jsonable(dict(row._mapping))
    body = conn.execute(select(tables.envelopes.c.body).where(
        tables.envelopes.c.submission_id == submission_id)).scalar()
    fingerprint = _rows(conn, tables.fingerprints, submission_id)
    configs = _rows(conn, tables.configs, submission_id, tables.configs.c.config_name)
    for config in configs:
        config["request_options"] = json.loads(config["request_options"])
    trials = _rows(conn, tables.trials, submission_id, tables.trials.c.position)
    summaries = _rows(conn, tables.summaries, submission_id, tables.summaries.c.config_name)
    audit = tables.audit_log
    targets = [submission_id] + ([submission["key_id"]] if submission["key_id"] else [])
    moderation = [
        _jsonable(dict(r._mapping))
        for r in conn.execute(select(audit).where(or_(*(audit.c.target == t for t in targets)))
                              .order_by(audit.c.at))
    ]
    fp = fingerprint[0] if fingerprint else None
    if fp is not None:
        fp["json"] = json.loads(fp["json"])
    return {
        "submission": submission,
        "fingerprint": fp,
        "configs": configs,
        "trials": trials,
        "summary": summaries,
        "moderation": moderation,
        "envelope": {
            "encoding": "base64",
            "sha256": submission["envelope_sha256"],
            "body": base64.b64encode(bytes(body)).decode("ascii") if body is not None else None,
        },
    }
