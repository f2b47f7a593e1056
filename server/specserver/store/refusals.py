"""After the database refused a write (pure reads, no writes): what the writer answers a
submission whose id is already stored, and whether a failed transaction left its
connection fit to use. ``store/writer.py`` calls these; they keep no state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.exc import DBAPIError

from specserver.errors import SpecServerError
from specserver.store import tables
from specserver.store.writes import Status, WriteOutcome, WriteRequest


def stored(conn: Connection, ids: Iterable[str]) -> dict[str, Any]:
    """The stored rows (id, envelope hash, receipt time) of those ids, in one query."""
    sub = tables.submissions
    query = (select(sub.c.submission_id, sub.c.envelope_sha256, sub.c.received_at)
             .where(sub.c.submission_id.in_(list(ids))))
    return {str(row.submission_id): row for row in conn.execute(query)}


def answer(row: Any, request: WriteRequest) -> WriteOutcome:
    """A request whose id is stored: the same bytes again are a duplicate (200 with the
    original receipt time), other bytes a conflict (409)."""
    status: Status = "duplicate" if row.envelope_sha256 == request.body_sha256 else "conflict"
    return WriteOutcome(status, row.received_at)


def connection_broken(conn: Connection | None, exc: Exception) -> bool:
    """After a job failed (its transaction rolled back by ``conn.begin()``): does the
    connection need a reset? Not for a domain refusal (no such submission, already
    imported, a bad key id: 404/409/422 on the admin API), which says nothing about the
    connection; resetting there let any failed admin action dispose DuckDB's engine under
    the ingest path. Otherwise only if the connection is gone or no longer answers."""
    if conn is None or conn.closed or conn.invalidated:
        return True
    if isinstance(exc, SpecServerError):
        return False
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    try:  # e.g. a constraint refusal: the connection is fine if it still answers
        conn.exec_driver_sql("SELECT 1").close()
        conn.rollback()
    except Exception:  # noqa: BLE001 - any failure here means: reconnect
        return True
    return False
