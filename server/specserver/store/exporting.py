"""Export formats of the public data: one row per visible submission x config, or with
``rows="domains"`` one per visible submission x draft config x kind of work
(``EXPORT_ROWS``: each table of rows its columns and its query).

CSV and JSON Lines are generated in chunks. Parquet is written by DuckDB's
``COPY ... TO ... (FORMAT parquet)``: directly on the store when it is DuckDB, through an
in-memory DuckDB fed with the rows when the store is PostgreSQL.

``materialize`` writes an export to a temporary file holding a pooled connection only while
it writes: the API streams that file (``http/exports.py`` keeps it for reuse), so a client
that stops reading holds a file descriptor, never a database connection.

The formats are ``store.exportformat.FORMATS``; CSV and JSON Lines are formatted there
(spreadsheet-safe CSV cells), which the export child process runs without the server's
imports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    DateTime,
    Double,
    Engine,
    Integer,
    Select,
    and_,
    select,
)
from sqlalchemy.exc import DBAPIError

from specserver.errors import Unavailable
from specserver.licence import LICENCE_ID, LICENCE_URL
from specserver.store import exportformat, queries, tables
from specserver.store.backend import backend_of
from specserver.store.dimensions import (
    Filters,
    draft_clauses,
    engine_name,
    engine_version,
    ollama_version,
    submission_clauses,
)
from specserver.store.exportformat import Layout

FORMATS = tuple(exportformat.FORMATS)


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


sub = tables.submissions
summ = tables.summaries
dom = tables.domain_results

EXPORT_COLUMNS = (
    sub.c.submission_id, sub.c.key_id, sub.c.source, sub.c.created_at, sub.c.received_at,
    sub.c.protocol_id, sub.c.protocol_version, sub.c.protocol_sha256, sub.c.target_model,
    sub.c.target_digest, sub.c.chip, sub.c.memory_gb, ollama_version.label("ollama_version"),
    sub.c.os_name.label("os"), sub.c.backend, sub.c.client_name, sub.c.client_version,
    # The engine; ollama_version is null for other engines' rows, engine_version never.
    engine_name.label("engine"), engine_version.label("engine_version"),
    sub.c.engine_runtime, sub.c.engine_build,
    summ.c.config_name, summ.c.role, summ.c.model, summ.c.draft_model, summ.c.mechanism,
    summ.c.observed.label("verdict"), summ.c.trials, summ.c.median_wall_s, summ.c.median_eval_s,
    summ.c.median_tps, summ.c.min_tps, summ.c.max_tps, summ.c.stdev_tps, summ.c.cv_tps,
    summ.c.speedup_tps, summ.c.speedup_tps_ci_low, summ.c.speedup_tps_ci_high,
    summ.c.speedup_wall, summ.c.outputs_match_baseline, summ.c.evidence,
    summ.c.evidence_reason,
    # From blocks (null without them): the wall-time speedup's interval beside the decode
    # rate's, the config's blocks and how far their medians disagree.
    summ.c.speedup_wall_ci_low, summ.c.speedup_wall_ci_high, summ.c.blocks, summ.c.block_drift,
    # Store version 14 (null: not recorded): the config's speculative type and depth, and
    # its trials' draft rounds and per-position counts summed (the JSON text stored), from
    # which its acceptance per position follows (docs/aggregation.md, "Reading it").
    summ.c.spec_type, summ.c.depth, summ.c.rounds, summ.c.accepted_per_position,
)
EXPORT_NAMES = tuple(c.name for c in EXPORT_COLUMNS)
# Per kind of work (store version 15, ``domain_rows``): a draft config of a protocol with a
# prompt set, once per domain, with the domain's figures (its decode-rate speedup and
# interval, its baseline's median tok/s, its trials' counters summed) beside the config's
# identity, verdict and evidence (the submission's and config's columns as above).
DOMAIN_COLUMNS = (
    sub.c.submission_id, sub.c.key_id, sub.c.source, sub.c.created_at, sub.c.received_at,
    sub.c.protocol_id, sub.c.protocol_version, sub.c.protocol_sha256, sub.c.target_model,
    sub.c.target_digest, sub.c.chip, sub.c.memory_gb, engine_name.label("engine"),
    engine_version.label("engine_version"),
    summ.c.config_name, summ.c.draft_model, summ.c.mechanism, summ.c.spec_type, summ.c.depth,
    summ.c.observed.label("verdict"), summ.c.evidence,
    dom.c.domain, dom.c.trials, dom.c.speedup_tps, dom.c.speedup_tps_ci_low,
    dom.c.speedup_tps_ci_high, dom.c.baseline_tps, dom.c.drafted, dom.c.accepted,
    dom.c.rounds, dom.c.accepted_per_position,
)
DOMAIN_NAMES = tuple(c.name for c in DOMAIN_COLUMNS)


def _config_select(filters: Filters) -> Select[Any]:
    return (
        select(*EXPORT_COLUMNS)
        .select_from(summ.join(sub, sub.c.submission_id == summ.c.submission_id))
        .where(queries.visible_clause(), *submission_clauses(filters),
               *draft_clauses(filters, summ))
        .order_by(sub.c.received_at, sub.c.submission_id, summ.c.config_name)
    )


def _domain_select(filters: Filters) -> Select[Any]:
    # The ``domain`` filter keeps that kind of work's rows (on configs it keeps the
    # configs measured on it, ``draft_clauses``: no row here is without a domain).
    wanted = filters.get("domain")
    own = [] if wanted is None else [dom.c.domain == wanted]
    others = replace(filters, values=tuple(v for v in filters.values if v[0] != "domain"))
    return (
        select(*DOMAIN_COLUMNS)
        .select_from(dom.join(summ, and_(summ.c.submission_id == dom.c.submission_id,
                                         summ.c.config_name == dom.c.config_name))
                     .join(sub, sub.c.submission_id == dom.c.submission_id))
        .where(queries.visible_clause(), *submission_clauses(others),
               *draft_clauses(others, summ), *own)
        .order_by(sub.c.received_at, sub.c.submission_id, summ.c.config_name, dom.c.domain)
    )


@dataclass(frozen=True)
class ExportRows:
    """A table of rows the export offers (the API's ``rows``): its columns and its query,
    one row per what ``description`` says, in a stable order."""

    name: str
    description: str
    columns: tuple[Any, ...]
    query: Callable[[Filters], Select[Any]]


# The default first. Every export format writes each of them.
EXPORT_ROWS: dict[str, ExportRows] = {r.name: r for r in (
    ExportRows("configs", "one row per visible submission x config", EXPORT_COLUMNS,
               _config_select),
    ExportRows("domains", "one row per visible submission x draft config x kind of work "
               "(protocols with a prompt set)", DOMAIN_COLUMNS, _domain_select),
)}
DEFAULT_ROWS = next(iter(EXPORT_ROWS))


def export_select(filters: Filters, rows: str = DEFAULT_ROWS) -> Select[Any]:
    """The export's rows (``EXPORT_ROWS``), in a stable order."""
    return EXPORT_ROWS[rows].query(filters)


def export_rows(conn: Connection, filters: Filters, batch: int = 2000,
                rows: str = DEFAULT_ROWS) -> Iterator[tuple[Any, ...]]:
    result = conn.execute(export_select(filters, rows), execution_options={"yield_per": batch})
    for row in result:
        yield tuple(row)


@cache
def export_layout(rows: str = DEFAULT_ROWS) -> Layout:
    """The export's columns as the formats need them (``exportformat.Layout``)."""
    times, texts = [], []
    columns = EXPORT_ROWS[rows].columns
    for i, column in enumerate(columns):
        if isinstance(column.type, DateTime):
            times.append(i)
        elif not isinstance(column.type, Integer | Double | Boolean):
            texts.append(i)
    return Layout(tuple(c.name for c in columns), tuple(times), tuple(texts))


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


# The licence in every Parquet file's key-value metadata (read by parquet_kv_metadata()).
PARQUET_OPTIONS = (f"FORMAT parquet, KV_METADATA {{license: {_sql_string(LICENCE_ID)}, "
                   f"license_url: {_sql_string(LICENCE_URL)}}}")


def export_sql(conn: Connection, filters: Filters, rows: str = DEFAULT_ROWS) -> str:
    """The export's SELECT as this store runs it, values inline (a snapshot's manifest
    names it)."""
    stmt = export_select(filters, rows)
    return str(stmt.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))


def write_parquet(conn: Connection, filters: Filters, path: str | Path,
                  rows: str = DEFAULT_ROWS) -> None:
    target = _sql_string(str(path))
    if backend_of(conn).copies_to_parquet:
        conn.exec_driver_sql(f"COPY ({export_sql(conn, filters, rows)}) TO {target} "
                             f"({PARQUET_OPTIONS})")
        return
    listed = EXPORT_ROWS[rows].columns
    columns = ", ".join(f'"{c.name}" {_duck_type(c)}' for c in listed)
    marks = ", ".join("?" for _ in listed)
    with duckdb.connect() as duck:
        duck.execute(f"CREATE TABLE export ({columns})")
        batch: list[tuple[Any, ...]] = []
        for row in export_rows(conn, filters, rows=rows):
            batch.append(row)
            if len(batch) >= 5000:
                duck.executemany(f"INSERT INTO export VALUES ({marks})", batch)
                batch = []
        if batch:
            duck.executemany(f"INSERT INTO export VALUES ({marks})", batch)
        duck.execute(f"COPY export TO {target} ({PARQUET_OPTIONS})")


def write_export(conn: Connection, filters: Filters, fmt: str, path: str | Path,
                 rows: str = DEFAULT_ROWS) -> int:
    """Write an export file; return the number of bytes written."""
    if exportformat.FORMATS[fmt].chunks is None:
        write_parquet(conn, filters, path, rows)
        return Path(path).stat().st_size
    written = 0
    with open(path, "wb") as handle:
        # Small batches: each write releases the GIL, so the event loop waits little.
        found = export_rows(conn, filters, rows=rows)
        for chunk in exportformat.chunks_of(fmt, found, export_layout(rows), batch=100):
            written += handle.write(chunk)
    return written


def _interrupt_later(conn: Connection, after_s: float) -> threading.Timer | None:
    """Interrupt a DuckDB query that runs past ``after_s`` (PostgreSQL has its own
    statement_timeout, ``store/postgres.py``)."""
    if not backend_of(conn).interrupts_long_queries or after_s <= 0:
        return None
    raw: Any = conn.connection.dbapi_connection
    timer = threading.Timer(after_s, raw.interrupt)
    timer.daemon = True
    timer.start()
    return timer


def _temporary(folder: str | Path | None, suffix: str) -> str:
    handle, path = tempfile.mkstemp(prefix="specatlas-export-", suffix=suffix, dir=folder)
    os.close(handle)
    return path


def materialize(engine: Engine, filters: Filters, fmt: str, *, folder: str | Path | None = None,
                timeout_s: float = 120.0, rows: str = DEFAULT_ROWS) -> str:
    """The export written to a new file in ``folder``; returns its path, which the caller
    owns (it unlinks it). A pooled connection is held only while the rows are written, for
    at most ``timeout_s`` on DuckDB. A full disk or a write that runs too long is
    ``Unavailable`` (503 with Retry-After), never a 500 or a file left behind.

    On DuckDB the rows are written as Parquet by DuckDB itself (no GIL held, ~0.1 s for
    18,000 rows), and CSV or JSON Lines are made from that file in a child process
    (``python -m specserver.store.exportformat``, the same formatting, without the
    server's imports):
    formatting is ~1 s of Python per 10 MB, which in the server process took the GIL from
    the event loop (bench/stalled_exports.py). PostgreSQL stores write the format directly.
    """
    paths: list[str] = []
    try:
        paths.append(_temporary(folder, f".{fmt}"))
        with engine.connect() as conn:
            convert = (exportformat.FORMATS[fmt].chunks is not None
                       and backend_of(conn).copies_to_parquet)
            if convert:
                paths.append(_temporary(folder, ".parquet"))
            timer = _interrupt_later(conn, timeout_s)
            try:
                if convert:
                    write_parquet(conn, filters, paths[1], rows)
                else:
                    write_export(conn, filters, fmt, paths[0], rows)
            finally:
                if timer is not None:
                    timer.cancel()
        if convert:
            _convert_in_child(paths[1], fmt, paths[0], timeout_s)
        return paths.pop(0)
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
        for path in paths:  # the intermediate Parquet file; the export too on failure
            os.unlink(path)


def _convert_in_child(parquet: str, fmt: str, out: str, timeout_s: float) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "specserver.store.exportformat", parquet, fmt, out],
        capture_output=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        raise OSError(f"the export conversion failed: {' '.join(reason)[:200]}")
