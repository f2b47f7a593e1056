"""Bulk appends per dialect, for the single writer (``store/writer.py``) and migrations:
DuckDB's native appender (kept per connection by ``DuckDBAppenders``, which can also stage
rows unflushed while a batch gathers), SQLAlchemy Core ``insert()`` for anything else
(PostgreSQL's binary COPY lives in ``store/postgres.py``); and how a uniqueness refusal
looks on any dialect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
from sqlalchemy import Connection, Table
from sqlalchemy.exc import IntegrityError

from specserver.store.backend import Backend

BulkInsert = Callable[[Connection, Table, list[tuple[Any, ...]]], None]


def duckdb_append(conn: Connection, table: Table, rows: list[tuple[Any, ...]]) -> None:
    raw: Any = conn.connection.driver_connection
    appender = raw.appender(table.name, columns=[c.name for c in table.columns])
    appender.append_rows(rows)
    appender.flush()


class DuckDBAppenders:
    """``duckdb_append`` with appenders kept for the writer's connection: creating an
    appender costs about half as much as appending a batch. ``reset()`` after any failure
    (a failed flush may leave rows buffered) or a new connection."""

    def __init__(self) -> None:
        self._raw: Any = None
        self._appenders: dict[str, Any] = {}

    def discard(self) -> None:
        """Drop the rows the appenders still buffer (a failed staging)."""
        for appender in self._appenders.values():
            try:
                appender.clear()
            except duckdb.Error:  # a closed or broken connection: nothing left to discard
                pass

    def reset(self) -> None:
        self.discard()
        self._raw = None
        self._appenders = {}

    def __call__(self, conn: Connection, table: Table, rows: list[tuple[Any, ...]]) -> None:
        """Append ``rows`` and flush them into the transaction open on ``conn``."""
        self._append(conn, table, rows).flush()

    def stage(self, conn: Connection, table: Table, rows: list[tuple[Any, ...]]) -> None:
        """Append ``rows`` without flushing: they reach the table at ``flush_all`` (or when
        the appender's buffer fills), inside the transaction open on ``conn``."""
        self._append(conn, table, rows)

    def flush_all(self) -> None:
        for appender in self._appenders.values():
            appender.flush()

    def _append(self, conn: Connection, table: Table, rows: list[tuple[Any, ...]]) -> Any:
        raw: Any = conn.connection.driver_connection
        if raw is not self._raw:
            self.reset()
            self._raw = raw
        appender = self._appenders.get(table.name)
        if appender is None:
            appender = raw.appender(table.name, columns=[c.name for c in table.columns])
            self._appenders[table.name] = appender
        try:
            appender.append_rows(rows)
        except duckdb.Error:
            appender.clear()  # a value the column cannot take: nothing of this call stays buffered
            raise
        return appender


def core_insert(conn: Connection, table: Table, rows: list[tuple[Any, ...]]) -> None:
    names = [c.name for c in table.columns]
    conn.execute(table.insert(), [dict(zip(names, row, strict=True)) for row in rows])


def bulk_insert_for(backend: Backend) -> BulkInsert:
    """DuckDB's appenders, kept; anything else Core inserts. PostgreSQL's binary COPY comes
    with its own writer (``store/postgres.py``, chosen by ``database.make_writer``)."""
    if backend.has_appender:
        return DuckDBAppenders()
    return core_insert


def insert_for(backend: Backend) -> BulkInsert:
    """One bulk insert outside the writer: the driver's appender, else Core inserts."""
    return duckdb_append if backend.has_appender else core_insert


def is_conflict(exc: BaseException) -> bool:
    """A uniqueness refusal (duplicate submission id), on any dialect."""
    if isinstance(exc, IntegrityError):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"ConstraintException", "UniqueViolation", "IntegrityError"})
