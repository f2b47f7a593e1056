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
  progress the writer commits what it has as soon as its pacing allows (store/writer.py)
  instead of gathering longer.
- ``store.write(fn)`` / ``await store.awrite(fn)``: run ``fn(conn)`` on the writer thread in
  its own transaction (moderation, imports): all writes go through the one writer.
- ``store.get_submission(id)``: the public view of one stored submission, or None;
  ``store.log_receipt(id)``: its entry in the transparency log, or None.
- ``await store.check_banned(key_id)``: the ban gate of the event loop (cached
  ``ban_cache_s``, reloaded in a thread, never blocks the loop; fails open to the last set);
  ``store.is_banned(key_id)`` the blocking twin; ``store.invalidate_bans()``.
- ``store.healthy()``: the store answers a query.
- ``store.query_engine``: where the maintainers' ad-hoc SQL runs (``store/adhoc.py``): the
  store's engine, or on PostgreSQL one for ``query_url`` (a role that may only read).
- ``store.scratch_dir``: a private folder for files DuckDB itself writes (a parquet
  export): the only folder the store's DuckDB may touch besides its own files.

DuckDB's lockdown (``duckdb_lockdown``): every connection to the store's DuckDB instance
runs with ``enable_external_access = false`` and ``lock_configuration = true`` (before,
the admin query read ``/proc/self/environ``). DuckDB 2.0 has both only as global settings
of the instance (``SET SESSION`` is refused) and refuses a second connection to the file
with other options (``read_only=True`` included) while the writer holds it, so the whole
in-process instance runs locked, and its other settings are applied in the same hook,
before the lock, whenever a new instance starts (also after the writer reopens it).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, select, text
from sqlalchemy.engine import make_url

from specserver.errors import Unavailable, log
from specserver.store import origins, probes, queries, tables
from specserver.store.backend import Backend, backend_of
from specserver.store.logentries import LogReceipt, RefusalLog, log_probe, receipt_of
from specserver.store.migrations import migrate
from specserver.store.tables import RowSet
from specserver.store.writer import GroupCommitWriter
from specserver.store.writes import WriteOutcome, WriteRequest

T = TypeVar("T")
# DuckDB settings of the store's database (global to it). A checkpoint runs inside the
# commit that crosses checkpoint_threshold (DuckDB's default, 16 MiB here: ~900 submissions)
# and blocks every writer meanwhile. Its "vacuum" tasks re-write not yet full row groups at
# checkpoints; with ~12 KB envelopes in a row group of up to 122,880 rows that grew to
# 0.5-9 s stalls as the file grew (and doubled the file), so they are off: the store never
# deletes rows but bans, the only thing vacuum reclaims. BENCHMARKS.md, "Ingest".
DUCKDB_SETTINGS = {"max_vacuum_tasks": "0"}
DUCKDB_POOL_TIMEOUT_S = 10.0


def make_engine(url: str, *, duckdb_settings: Mapping[str, str] | None = None,
                allowed_directories: Sequence[str] = ()) -> Engine:
    """An engine for the store URL. Does not connect. On DuckDB every new instance gets
    ``DUCKDB_SETTINGS`` (updated by ``duckdb_settings``) and the lockdown."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        from specserver.store import postgres  # timeouts and pool bounds

        engine = create_engine(url, **postgres.engine_options())
        postgres.configure_engine(engine)
        return engine
    file_backed = parsed.get_backend_name() == "duckdb" and parsed.database not in (
        None, "", ":memory:")
    # The same bound on a wait for a pooled connection as on PostgreSQL: a read
    # that cannot get one within it is 503 with Retry-After, not a 30 s hang of a thread.
    engine = (create_engine(url, pool_timeout=DUCKDB_POOL_TIMEOUT_S) if file_backed
              else create_engine(url))
    if backend_of(engine).embedded:
        settings = {**DUCKDB_SETTINGS, **(duckdb_settings or {})}
        event.listen(engine, "connect", duckdb_lockdown(settings, allowed_directories))
    return engine


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def duckdb_lockdown(settings: Mapping[str, str], allowed_directories: Sequence[str] = ()
                    ) -> Callable[[Any, Any], None]:
    """A "connect" hook: on the first connection of a DuckDB instance, apply ``settings``,
    allow files only in ``allowed_directories`` (besides the database's own), turn
    external access off and lock the configuration. Later connections find it locked."""
    lock = threading.Lock()

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        with lock:
            locked = dbapi_connection.execute(
                "SELECT current_setting('lock_configuration')").fetchone()
            if locked is not None and locked[0]:
                return
            for name, value in settings.items():
                dbapi_connection.execute(f"SET {name} = {value}")
            if allowed_directories:
                folders = ", ".join(_sql_string(str(d)) for d in allowed_directories)
                dbapi_connection.execute(f"SET allowed_directories = [{folders}]")
            dbapi_connection.execute("SET enable_external_access = false")
            dbapi_connection.execute("SET lock_configuration = true")

    return on_connect


def display_url(url: str) -> str:
    """The store URL for logs and messages: a PostgreSQL password is never printed."""
    return make_url(url).render_as_string(hide_password=True)


def make_writer(engine: Engine, *, window_s: float, max_batch: int) -> GroupCommitWriter:
    """The single writer for this backend (several replicas: insert-or-conflict)."""
    if not backend_of(engine).one_writer:
        from specserver.store.postgres import PostgresWriter

        return PostgresWriter(engine, window_s=window_s, max_batch=max_batch)
    return GroupCommitWriter(engine, window_s=window_s, max_batch=max_batch)


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve a late load's outcome, so asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()


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
        ban_wait_s: float = 1.0,
        duckdb_threads: int = 0,
        duckdb_settings: Mapping[str, str] | None = None,
        query_url: str = "",
        address_rotation_days: float = 30.0,
        address_retention_days: float = 90.0,
    ) -> None:
        self.url = url
        self.address_rotation_days = address_rotation_days
        self.address_keep_epochs = origins.epochs_kept(address_rotation_days,
                                                       address_retention_days)
        self._secrets: dict[int, bytes] = {}
        self.duckdb_threads = duckdb_threads
        self.scratch_dir = Path(tempfile.mkdtemp(prefix="specserver-scratch-"))
        settings = dict(duckdb_settings or {})
        if duckdb_threads:
            settings["threads"] = str(int(duckdb_threads))
        self.engine: Engine = make_engine(url, duckdb_settings=settings,
                                          allowed_directories=[str(self.scratch_dir)])
        self.query_url = query_url
        self._query_engine: Engine | None = None
        self.writer = make_writer(
            self.engine, window_s=group_commit_s, max_batch=group_commit_max
        )
        self._refusals = RefusalLog(lambda fn: self.writer.run_job(fn))
        self.ban_cache_s = ban_cache_s
        self.ban_wait_s = ban_wait_s
        self._bans: frozenset[str] = frozenset()
        self._bans_loaded_at = float("-inf")
        self._bans_generation = 0  # moves on invalidate_bans(): an older load is not fresh
        self._bans_lock = threading.Lock()
        self._bans_refresh: Future[frozenset[str]] | None = None
        self.schema_version: int | None = None
        self._arriving = 0

    @property
    def dialect(self) -> str:
        return self.backend.name

    @property
    def backend(self) -> Backend:
        return backend_of(self.engine)

    # lifecycle ----------------------------------------------------------------------------

    def open(self) -> None:
        ensure_folder(self.url)
        self.schema_version = migrate(self.engine)
        self.refresh_bans()  # the gate starts from the stored set, not an empty one
        self.writer.start()

    def close(self) -> None:
        self.writer.stop()
        self.engine.dispose()
        if self._query_engine is not None:
            self._query_engine.dispose()
            self._query_engine = None
        shutil.rmtree(self.scratch_dir, ignore_errors=True)

    @property
    def query_engine(self) -> Engine:
        """The engine of the maintainers' ad-hoc SQL: ``query_url``'s (PostgreSQL only:
        a DuckDB file admits one process, and the store's own instance is locked down)
        or the store's."""
        if not self.query_url or self.backend.embedded:
            return self.engine
        if self._query_engine is None:
            self._query_engine = make_engine(self.query_url)
        return self._query_engine

    # writes -------------------------------------------------------------------------------

    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Around a request that may submit (event-loop thread only): when the last one in
        progress has submitted or failed, the writer need not gather any longer than its
        pacing asks."""
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

    async def origin_of(self, address: str, received_at: datetime) -> str | None:
        """The keyed hash of ``address``'s range for ``submissions.origin_hash``
        (store/origins.py); the epoch's secret is read (or drawn) through the writer once
        per epoch and process."""
        address_range = origins.address_range(address)
        if address_range is None:
            return None
        epoch = origins.epoch_of(received_at, self.address_rotation_days)
        secret = self._secrets.get(epoch)
        if secret is None:
            keep = self.address_keep_epochs
            secret = await self.awrite(lambda conn: origins.epoch_secret(conn, epoch, keep))
            self._secrets = {epoch: secret}  # only the current epoch is ever needed
        return origins.origin_hash(secret, address_range)

    # bans ---------------------------------------------------------------------------------

    # The ban gate runs on the event loop for every POST, so it never waits there for the
    # database (before, a stale cache opened a connection on the loop and, with the pool
    # exhausted, froze routes that need no database for 30 s). A stale set is reloaded in a
    # thread, at most one load in flight; the gate waits for it up to ``ban_wait_s`` and
    # otherwise uses the last set it has. It fails *open* to that set: a key banned before
    # the last successful load stays refused, and a ban newer than that only lets rows be
    # stored that no public read shows (``queries.visible_clause`` filters bans at read
    # time), while failing closed would make ingest depend on the read pool.

    def refresh_bans(self) -> frozenset[str]:
        """Load the banned key ids now (blocking: never call this on the event loop)."""
        generation = self._bans_generation
        with self.engine.connect() as conn:
            rows = conn.execute(select(tables.bans.c.key_id)).scalars().all()
        bans = frozenset(rows)
        with self._bans_lock:
            self._bans = bans
            if generation == self._bans_generation:
                self._bans_loaded_at = time.monotonic()
        return bans

    def _bans_fresh(self) -> bool:
        return time.monotonic() - self._bans_loaded_at < self.ban_cache_s

    def _bans_loading(self) -> Future[frozenset[str]]:
        """The load in flight, or a new one on its own thread."""
        with self._bans_lock:
            if self._bans_refresh is not None and not self._bans_refresh.done():
                return self._bans_refresh
            future: Future[frozenset[str]] = Future()
            future.set_running_or_notify_cancel()  # running: a waiter's cancel cannot stop it
            self._bans_refresh = future

        def load() -> None:
            try:
                future.set_result(self.refresh_bans())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiters
                future.set_exception(exc)

        threading.Thread(target=load, name="specserver-bans", daemon=True).start()
        return future

    def banned_keys(self) -> frozenset[str]:
        """The banned key ids, loaded when stale (blocking: not for the event loop)."""
        if self._bans_fresh():
            return self._bans
        return self._bans_loading().result()

    def is_banned(self, key_id: str) -> bool:
        """Blocking; the event loop uses ``check_banned``."""
        return key_id in self.banned_keys()

    async def check_banned(self, key_id: str) -> bool:
        """The ban gate for the event loop: never blocks it, fails open (see above)."""
        if self._bans_fresh():
            return key_id in self._bans
        loading = asyncio.wrap_future(self._bans_loading())
        try:
            bans = await asyncio.wait_for(asyncio.shield(loading), self.ban_wait_s)
        except Exception as exc:  # noqa: BLE001 - a slow or failed load: the last set
            log.warning("banned keys not reloaded (%s); using the last loaded set",
                        type(exc).__name__)
            loading.add_done_callback(_consume)
            bans = self._bans
        return key_id in bans

    def invalidate_bans(self) -> None:
        with self._bans_lock:
            self._bans_generation += 1
            self._bans_loaded_at = float("-inf")

    # reads --------------------------------------------------------------------------------

    def healthy(self) -> bool:
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1")).scalar()
        except Exception:  # noqa: BLE001 - health is a yes/no answer
            return False
        return True

    def get_submission(self, submission_id: str) -> queries.SubmissionView | None:
        """The public view (``queries.SubmissionView``), before redaction."""
        try:
            with self.engine.connect() as conn:
                return queries.submission_view(conn, submission_id)
        except Exception as exc:
            raise Unavailable("the store cannot be read right now", retry_after=5) from exc

    async def log_refusal(self, envelope_sha256: str) -> LogReceipt:
        """Log an envelope refused after its signature verified, through the writer, with
        the refusals queued beside it (``store/logentries.py`` ``RefusalLog``); its
        entry's place."""
        return await asyncio.wrap_future(self._refusals.log(envelope_sha256))

    async def store_probe(self, row: probes.ProbeRow
                          ) -> tuple[str, LogReceipt | None]:
        """Store a cost probe and log it in the same transaction: ``stored`` with its new
        entry, ``same`` (these bytes again) with the entry they have, or ``conflict``."""
        def write(conn: Connection) -> tuple[str, LogReceipt | None]:
            outcome = probes.insert_probe(conn, row)
            digest = str(row.values["envelope_sha256"])
            if outcome == "stored":
                return outcome, log_probe(conn, row.probe_id, digest)
            return outcome, receipt_of(conn, row.probe_id) if outcome == "same" else None
        return await self.awrite(write)

    def log_receipt(self, submission_id: str) -> LogReceipt | None:
        """A stored submission's entry in the transparency log (``store/logentries.py``)."""
        try:
            with self.engine.connect() as conn:
                return receipt_of(conn, submission_id)
        except Exception as exc:
            raise Unavailable("the store cannot be read right now", retry_after=5) from exc
