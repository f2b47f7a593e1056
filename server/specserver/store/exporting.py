"""Export formats of the public data: one row per visible submission x config.

CSV and JSON Lines are generated in chunks so the API can stream them. Parquet is written
by DuckDB's ``COPY ... TO ... (FORMAT parquet)``: directly on the store when it is DuckDB,
through an in-memory DuckDB fed with the rows when the store is PostgreSQL.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
from sqlalchemy import BigInteger, Boolean, Connection, DateTime, Double, Integer

from specserver.store import queries
from specserver.store.queries import Filters


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat() + "Z"
    return value


def csv_chunks(rows: Iterable[tuple[Any, ...]], batch: int = 500) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(queries.EXPORT_NAMES)
    for count, row in enumerate(rows, 1):
        writer.writerow(["" if v is None else _cell(v) for v in row])
        if count % batch == 0:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


def jsonl_chunks(rows: Iterable[tuple[Any, ...]], batch: int = 500) -> Iterator[bytes]:
    lines: list[str] = []
    for row in rows:
        lines.append(json.dumps(dict(zip(queries.EXPORT_NAMES, map(_cell, row), strict=True))))
        if len(lines) >= batch:
            yield ("\n".join(lines) + "\n").encode()
            lines = []
    if lines:
        yield ("\n".join(lines) + "\n").encode()


def _duck_type(column: Any) -> str:
    kind = column.type
    if isinstance(kind, Boolean):
        return "BOOLEAN"
    if isinstance(kind, BigInteger):
        return "BIGINT"
    if isinstance(kind, Integer):
        return "INTEGER"
    if isinstance(kind, Double):
        return "DOUBLE"
    if isinstance(kind, DateTime):
        return "TIMESTAMP"
    return "VARCHAR"


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def write_parquet(conn: Connection, filters: Filters, path: str | Path) -> None:
    target = _sql_string(str(path))
    stmt = queries.export_select(filters)
    if conn.dialect.name == "duckdb":
        sql = str(stmt.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        conn.exec_driver_sql(f"COPY ({sql}) TO {target} (FORMAT parquet)")
        return
    columns = ", ".join(f'"{c.name}" {_duck_type(c)}' for c in queries.EXPORT_COLUMNS)
    marks = ", ".join("?" for _ in queries.EXPORT_COLUMNS)
    with duckdb.connect() as duck:
        duck.execute(f"CREATE TABLE export ({columns})")
        batch: list[tuple[Any, ...]] = []
        for row in queries.export_rows(conn, filters):
            batch.append(row)
            if len(batch) >= 5000:
                duck.executemany(f"INSERT INTO export VALUES ({marks})", batch)
                batch = []
        if batch:
            duck.executemany(f"INSERT INTO export VALUES ({marks})", batch)
        duck.execute(f"COPY export TO {target} (FORMAT parquet)")


def write_export(conn: Connection, filters: Filters, fmt: str, path: str | Path) -> int:
    """Write an export file; return the number of bytes written."""
    if fmt == "parquet":
        write_parquet(conn, filters, path)
        return Path(path).stat().st_size
    chunks = csv_chunks if fmt == "csv" else jsonl_chunks
    written = 0
    with open(path, "wb") as handle:
        for chunk in chunks(queries.export_rows(conn, filters)):
            written += handle.write(chunk)
    return written
