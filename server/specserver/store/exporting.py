"""Export formats of the public data: one row per visible submission x config.

CSV and JSON Lines are generated in chunks. Parquet is written by DuckDB's
``COPY ... TO ... (FORMAT parquet)``: directly on the store when it is DuckDB, through an
in-memory DuckDB fed with the rows when the store is PostgreSQL.

``materialize`` writes an export to a temporary file holding a pooled connection only while
it writes, and hands back the open file, already unlinked: the API streams that file, so a
client that stops reading holds a file descriptor, never a database connection (issue 16).

CSV cells are safe for spreadsheets (issue 16, OWASP "CSV injection"): every public text
field (chip, model names, client name, ...) is the contributor's, so a text cell that a
spreadsheet would read as a formula (first character ``= + - @``, tab or CR, or their
full-width forms, also after leading spaces) gets a leading ``'``, and CR/LF inside a value
become spaces, so each physical line is one record that starts with a submission id.
Numbers stay numbers (a negative speedup is not prefixed). JSON Lines and Parquet carry the
exact values: neither format has formulas, and JSON escapes control characters.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import duckdb
from sqlalchemy import BigInteger, Boolean, Connection, DateTime, Double, Engine, Integer
from sqlalchemy.exc import DBAPIError

from specserver.errors import Unavailable
from specserver.store import queries
from specserver.store.queries import Filters

FORMATS = ("csv", "jsonl", "parquet")
# What a spreadsheet takes as the start of a formula (OWASP), with the full-width forms
# some spreadsheets fold to them.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
_LINE_BREAKS = str.maketrans({"\r": " ", "\n": " ", "\u2028": " ", "\u2029": " ",
                              "\x0b": " ", "\x0c": " ", "\x85": " "})


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat() + "Z"
    return value


def spreadsheet_text(text: str) -> str:
    """A text cell no spreadsheet evaluates and that stays on its record's line."""
    if not text.isprintable():  # a line break is not printable: the common case is cheap
        text = text.translate(_LINE_BREAKS)  # first: "\n=1" must not become " =1" unmarked
    first = text[:1]
    if first == " ":
        first = text.lstrip(" ")[:1]
    if first and first in FORMULA_STARTS:
        text = "'" + text
    return text


def _kinds() -> tuple[list[int], list[int]]:
    """Positions of the export's timestamp columns and of those that may hold text (all but
    numbers and booleans): the only cells a CSV row converts."""
    times, texts = [], []
    for i, column in enumerate(queries.EXPORT_COLUMNS):
        if isinstance(column.type, DateTime):
            times.append(i)
        elif not isinstance(column.type, Integer | Double | Boolean):
            texts.append(i)
    return times, texts


def csv_chunks(rows: Iterable[tuple[Any, ...]], batch: int = 500) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")  # None is written as an empty cell
    writer.writerow(queries.EXPORT_NAMES)
    times, texts = _kinds()
    for count, row in enumerate(rows, 1):
        cells = list(row)
        for i in times:
            cells[i] = _cell(cells[i])
        for i in texts:
            value = cells[i]
            if isinstance(value, str):
                cells[i] = spreadsheet_text(value)
        writer.writerow(cells)
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
        # Small batches: each write releases the GIL, so the event loop waits little.
        for chunk in chunks(queries.export_rows(conn, filters), batch=100):
            written += handle.write(chunk)
    return written


def _interrupt_later(conn: Connection, after_s: float) -> threading.Timer | None:
    """Interrupt a DuckDB query that runs past ``after_s`` (PostgreSQL has its own
    statement_timeout, ``store/postgres.py``)."""
    if conn.dialect.name != "duckdb" or after_s <= 0:
        return None
    raw: Any = conn.connection.dbapi_connection
    timer = threading.Timer(after_s, raw.interrupt)
    timer.daemon = True
    timer.start()
    return timer


def _temporary(folder: str | Path | None, suffix: str) -> str:
    handle, path = tempfile.mkstemp(prefix="specbench-export-", suffix=suffix, dir=folder)
    os.close(handle)
    return path


def materialize(engine: Engine, filters: Filters, fmt: str, *, folder: str | Path | None = None,
                timeout_s: float = 120.0) -> IO[bytes]:
    """The export as an open temporary file, positioned at its start and already unlinked
    (it vanishes when closed, or with the process). A pooled connection is held only while
    the rows are written, for at most ``timeout_s`` on DuckDB. A full disk or a write that
    runs too long is ``Unavailable`` (503 with Retry-After), never a 500 or a stored file.

    On DuckDB the rows are written as Parquet by DuckDB itself (no GIL held, ~0.1 s for
    18,000 rows), and CSV or JSON Lines are made from that file in a child process
    (``python -m specserver.store.exporting``, the same ``csv_chunks``/``jsonl_chunks``):
    formatting is ~1 s of Python per 10 MB, which in the server process took the GIL from
    the event loop (bench/stalled_exports.py). PostgreSQL stores write the format directly.
    """
    paths: list[str] = []
    try:
        paths.append(_temporary(folder, f".{fmt}"))
        with engine.connect() as conn:
            convert = fmt != "parquet" and conn.dialect.name == "duckdb"
            if convert:
                paths.append(_temporary(folder, ".parquet"))
            timer = _interrupt_later(conn, timeout_s)
            try:
                if convert:
                    write_parquet(conn, filters, paths[1])
                else:
                    write_export(conn, filters, fmt, paths[0])
            finally:
                if timer is not None:
                    timer.cancel()
        if convert:
            _convert_in_child(paths[1], fmt, paths[0], timeout_s)
        return open(paths[0], "rb")  # noqa: SIM115 - the caller streams and closes it
    except BaseException as exc:
        cause = exc.orig if isinstance(exc, DBAPIError) else exc
        if isinstance(cause, duckdb.InterruptException | subprocess.TimeoutExpired):
            raise Unavailable("the export took too long to write; retry later",
                              {"timeout_s": timeout_s}, retry_after=30) from None
        if isinstance(cause, OSError | duckdb.IOException):
            raise Unavailable("the export file cannot be written right now",
                              {"reason": str(cause)[:200]}, retry_after=30) from None
        raise
    finally:
        for path in paths:
            os.unlink(path)


def _convert_in_child(parquet: str, fmt: str, out: str, timeout_s: float) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "specserver.store.exporting", parquet, fmt, out],
        capture_output=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise OSError(f"the export conversion failed: {' '.join(reason)[:200]}")


def convert_parquet(parquet: str | Path, fmt: str, out: str | Path) -> int:
    """Write ``fmt`` (csv or jsonl) from an export Parquet file; return the bytes written.
    Parquet keeps the rows' order and types (TIMESTAMP, DOUBLE, BIGINT, BOOLEAN, VARCHAR),
    so the result is the bytes ``write_export`` writes from the store (tested)."""
    chunks = csv_chunks if fmt == "csv" else jsonl_chunks
    written = 0
    with duckdb.connect() as duck, open(out, "wb") as handle:
        cursor = duck.execute("SELECT * FROM read_parquet(?)", [str(parquet)])

        def rows() -> Iterator[tuple[Any, ...]]:
            while batch := cursor.fetchmany(2000):
                yield from batch

        for chunk in chunks(rows(), batch=100):
            written += handle.write(chunk)
    return written


if __name__ == "__main__":  # the child of ``materialize``: PARQUET FORMAT OUT
    convert_parquet(sys.argv[1], sys.argv[2], sys.argv[3])
