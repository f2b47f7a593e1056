"""The store on PostgreSQL: engine options and the replica-safe group-commit write path.

Several stateless replicas write to one PostgreSQL, so uniqueness and idempotency are the
database's job, never a process's memory (docs/deploying.md, "Replicas"). One batch is one
transaction:

1. the batch's submission rows are COPYed into a per-connection temporary table, then
   ``INSERT INTO submissions SELECT ... ORDER BY submission_id ON CONFLICT (submission_id)
   DO NOTHING RETURNING submission_id`` (one statement, rows in id order so that two
   replicas inserting overlapping batches lock the same keys in the same order);
2. the ids that were not inserted are already stored (by this or another replica, maybe in
   a transaction that committed a moment ago, which ON CONFLICT waited for): their stored
   envelope hash decides ``duplicate`` (200, same bytes) or ``conflict`` (409);
3. the child rows (envelope, fingerprint, configs, trials, summaries) of the inserted ids
   only, with binary COPY (envelopes TOAST-compressed with lz4, see ``configure_engine``);
4. one commit, then every waiting request is answered.

A lost connection (PostgreSQL restarting, a failover) drops the writer's connection,
retries the batch once on a fresh one, and otherwise answers 503 with Retry-After; the
next batch reconnects by itself. Connect and keep-alive timeouts bound every wait, so a
vanished server turns into errors, never a hang.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    DateTime,
    Double,
    Engine,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    event,
    select,
)

from specserver.errors import Unavailable
from specserver.store import changes, tables
from specserver.store.appenders import BulkInsert
from specserver.store.logentries import LogReceipt, Sequencer
from specserver.store.tables import INGEST_TABLES
from specserver.store.writer import RETRY_AFTER_S, GroupCommitWriter
from specserver.store.writes import Status, WriteOutcome, WriteRequest

log = logging.getLogger("specserver.store.postgres")

# Bounds on every wait for the database (seconds).
CONNECT_TIMEOUT_S = 5
TCP_USER_TIMEOUT_MS = 15_000
POOL_TIMEOUT_S = 10.0
# A batch that hit a deadlock or a dead connection is tried this many times in all.
BATCH_ATTEMPTS = 2


def engine_options() -> dict[str, Any]:
    """``create_engine`` keyword arguments for PostgreSQL."""
    return {
        "pool_pre_ping": True,
        "pool_size": 8,
        "max_overflow": 8,
        "pool_timeout": POOL_TIMEOUT_S,
        "connect_args": {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": "specserver",
            # Notice a peer that vanished without closing the socket.
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 3,
            "keepalives_count": 3,
            "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
        },
    }


def configure_engine(engine: Engine) -> None:
    """Per-connection settings: envelopes (~12 KB of base64 JSON) are TOAST-compressed with
    lz4 instead of pglz, several times cheaper for the same size; a server built without
    lz4 keeps its default."""

    @event.listens_for(engine, "connect")
    def _lz4(dbapi_connection: Any, record: Any) -> None:
        try:
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SET default_toast_compression = 'lz4'")
            dbapi_connection.commit()
        except Exception:  # noqa: BLE001 - an optional speed-up
            dbapi_connection.rollback()
            log.info("PostgreSQL has no lz4 TOAST compression; keeping its default")


# SQLAlchemy column types -> PostgreSQL types for binary COPY (no text rendering/parsing:
# bytea in text COPY is hex, twice the size of the envelope it carries).
_BINARY_TYPES: tuple[tuple[type[Any], str], ...] = (
    (LargeBinary, "bytea"), (Boolean, "bool"), (BigInteger, "int8"), (Integer, "int4"),
    (Double, "float8"), (DateTime, "timestamp"), (Text, "text"), (String, "varchar"),
)


def _binary_types(table: Table) -> list[str]:
    names = []
    for column in table.columns:
        name = next((pg for kind, pg in _BINARY_TYPES if isinstance(column.type, kind)), None)
        if name is None:
            raise TypeError(f"no binary COPY type for {table.name}.{column.name}")
        names.append(name)
    return names


_COPY_TYPES = {t.name: _binary_types(t) for t in (*INGEST_TABLES, tables.log_entries)}


def _copy_binary(conn: Connection, target: str, columns: str, types: list[str],
                 rows: list[tuple[Any, ...]]) -> None:
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cursor, cursor.copy(
        f"COPY {target} ({columns}) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def binary_copy(conn: Connection, table: Table, rows: list[tuple[Any, ...]]) -> None:
    """COPY ... FROM STDIN (FORMAT BINARY) of rows in the table's column order."""
    columns = ", ".join(f'"{c.name}"' for c in table.columns)
    _copy_binary(conn, f'"{table.name}"', columns, _COPY_TYPES[table.name], rows)


_SUB = tables.submissions
_SUB_COLUMNS = [c.name for c in _SUB.columns]
_COLUMN_LIST = ", ".join(f'"{name}"' for name in _SUB_COLUMNS)
# Per-connection staging table: COPY lands the batch's submission rows here, then one
# INSERT ... SELECT moves the new ones (a parameterised multi-row INSERT of a 512-row batch
# costs more client CPU to build than the COPY and the INSERT together).
STAGE = "specserver_stage_submissions"
_CREATE_STAGE = (
    f"CREATE TEMP TABLE IF NOT EXISTS {STAGE} ON COMMIT DELETE ROWS AS "
    f"SELECT {_COLUMN_LIST} FROM {_SUB.name} WITH NO DATA"
)
_MOVE_NEW = (
    f"INSERT INTO {_SUB.name} ({_COLUMN_LIST}) SELECT {_COLUMN_LIST} FROM {STAGE} "
    f"ORDER BY submission_id ON CONFLICT (submission_id) DO NOTHING RETURNING submission_id"
)


def _insert_new(conn: Connection, rows: list[tuple[Any, ...]]) -> set[str]:
    """Insert the submission rows (sorted by id) that are not stored yet; their ids."""
    if not rows:
        return set()
    conn.exec_driver_sql(_CREATE_STAGE)
    _copy_binary(conn, STAGE, _COLUMN_LIST, _COPY_TYPES[_SUB.name], rows)
    return {str(sid) for sid in conn.exec_driver_sql(_MOVE_NEW).scalars()}


def insert_batch(
    conn: Connection, batch: list[WriteRequest], bulk_insert: BulkInsert,
    sequencer: Sequencer | None = None,
) -> list[WriteOutcome]:
    """Store a batch inside the caller's transaction; one outcome per request, in order.
    The inserted ones are logged (``store/logentries.py``) after the change log has taken
    the clock's row lock, which orders the replicas' log numbers by commit."""
    first: dict[str, WriteRequest] = {}
    for request in batch:
        first.setdefault(request.submission_id, request)
    ordered = sorted(first)
    inserted = _insert_new(conn, [first[sid].rows.rows[_SUB.name][0] for sid in ordered])
    stored: dict[str, tuple[str, Any]] = {}
    missing = [sid for sid in ordered if sid not in inserted]
    if missing:
        found = conn.execute(
            select(_SUB.c.submission_id, _SUB.c.envelope_sha256, _SUB.c.received_at).where(
                _SUB.c.submission_id.in_(missing)
            )
        )
        stored = {row.submission_id: (row.envelope_sha256, row.received_at) for row in found}
        lost = set(missing) - set(stored)
        if lost:  # refused as a conflict, yet not there: a concurrent delete; try again
            raise RuntimeError(f"{len(lost)} submission(s) neither inserted nor found")
    for table in INGEST_TABLES[1:]:
        rows = [
            row for sid in ordered if sid in inserted for row in first[sid].rows.rows[table.name]
        ]
        if rows:
            bulk_insert(conn, table, rows)
    logged: dict[str, LogReceipt] = {}
    if inserted:  # the last steps before the commit: the clock's row lock orders replicas
        changes.mark(conn, changes.stored_contributors(
            first[sid].rows.rows[_SUB.name][0] for sid in ordered if sid in inserted))
        named = [(sid, first[sid].body_sha256) for sid in ordered if sid in inserted]
        receipts = (sequencer or Sequencer(keeps_count=False)).append(
            conn, named, datetime.now(UTC).replace(tzinfo=None), bulk_insert)
        logged = dict(zip((sid for sid, _ in named), receipts, strict=True))
    outcomes: list[WriteOutcome] = []
    for request in batch:
        sid = request.submission_id
        if sid in inserted:
            if first[sid] is request:
                outcomes.append(WriteOutcome("created", request.received_at, logged[sid]))
                continue
            digest, received_at = first[sid].body_sha256, first[sid].received_at
        else:
            digest, received_at = stored[sid]
        status: Status = "duplicate" if digest == request.body_sha256 else "conflict"
        outcomes.append(WriteOutcome(status, received_at))
    return outcomes


class PostgresWriter(GroupCommitWriter):
    """The group-commit writer with PostgreSQL's insert-or-conflict batch (module doc)."""

    def __init__(
        self, engine: Engine, *, window_s: float = 0.004, max_batch: int = 512
    ) -> None:
        super().__init__(engine, window_s=window_s, max_batch=max_batch,
                         bulk_insert=binary_copy)

    def _write_batch(self, batch: list[WriteRequest]) -> list[WriteOutcome]:
        conn = self._connection()
        with conn.begin():
            return insert_batch(conn, batch, self.bulk_insert, self.sequencer)

    def _write_one(self, request: WriteRequest) -> WriteOutcome:
        return self._write_batch([request])[0]

    def _process(self, batch: list[WriteRequest]) -> None:
        for attempt in range(1, BATCH_ATTEMPTS + 1):
            started = time.monotonic()
            try:
                outcomes = self._write_batch(batch)
                self.last_commit_s = time.monotonic() - started  # the adaptive window
            except Exception as exc:  # noqa: BLE001 - decided below
                self._reset()
                if attempt < BATCH_ATTEMPTS:
                    log.info("batch of %d failed (%s); retrying on a fresh connection",
                             len(batch), _first_line(exc))
                    continue
                log.warning("batch of %d failed: %s", len(batch), _first_line(exc))
                for request in batch:
                    request.future.set_exception(Unavailable(
                        "the store cannot take submissions right now",
                        retry_after=RETRY_AFTER_S,
                    ))
                return
            self.batches += 1
            self.committed += sum(1 for o in outcomes if o.status == "created")
            for request, outcome in zip(batch, outcomes, strict=True):
                request.future.set_result(outcome)
            return

    def _reset(self) -> None:
        """Throw the connection away (never back into the pool): it may be dead."""
        if self._conn is not None:
            try:
                self._conn.invalidate()
            except Exception:  # noqa: BLE001 - invalidating a broken connection
                log.debug("invalidating the writer connection failed", exc_info=True)
        super()._reset()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
