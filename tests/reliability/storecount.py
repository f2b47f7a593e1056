"""Row counts of every table in the store: the "nothing was stored" check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
from sqlalchemy import Engine, create_engine, func, select, text

from specserver.store import tables


def count_rows(engine: Engine) -> dict[str, int]:
    """Rows per table, through the app's own engine (in-process tests); the log's entries
    for envelopes refused after their signature verified are not stored data and are
    counted apart (``refused_entries``)."""
    with engine.connect() as conn:
        counts = {
            table.name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
            for table in tables.metadata.sorted_tables
        }
    counts["log_entries"] -= refused_entries(engine)
    return counts


def refused_entries(engine: Engine) -> int:
    """The log's entries of type 0x03: envelopes refused after their signature verified."""
    log = tables.log_entries
    with engine.connect() as conn:
        return sum(1 for (entry,) in conn.execute(select(log.c.entry)) if bytes(entry)[:1]
                   == b"\x03")


def count_rows_in_file(path: str) -> dict[str, int]:
    """Rows per table of a DuckDB file that no server has open any more."""
    with duckdb.connect(path, read_only=True) as conn:
        return {
            table.name: int(_one(conn.execute(f'SELECT count(*) FROM "{table.name}"')))
            for table in tables.metadata.sorted_tables
        }


def _one(cursor: Any) -> Any:
    row = cursor.fetchone()
    assert row is not None
    return row[0]


def app_engine(app: Any) -> Engine:
    """The store's engine (reads on DuckDB share the one in-process database)."""
    engine: Engine = app.state.store.engine
    return engine


def audit_file(path: str, acked: dict[str, bytes]) -> dict[str, Any]:
    """Audit a DuckDB file that no server has open any more (see ``audit``)."""
    with duckdb.connect(path, read_only=True) as conn:
        return audit(lambda sql: conn.execute(sql).fetchall(), acked)


def audit_url(url: str, acked: dict[str, bytes]) -> dict[str, Any]:
    """Audit a store by SQLAlchemy URL (PostgreSQL, shared with a running server)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return audit(lambda sql: [tuple(r) for r in conn.execute(text(sql)).fetchall()],
                         acked)
    finally:
        engine.dispose()


def audit(fetch: Callable[[str], list[Any]], acked: dict[str, bytes]) -> dict[str, Any]:
    """Check a store against what was acknowledged.

    Every acknowledged submission must be present with its exact envelope bytes and all its
    rows (1 fingerprint, 3 configs, 15 trials, 3 summaries for hardnumbers-m2); no id may
    appear twice anywhere. Returns figures; ``problems`` lists what is wrong.
    """
    problems: list[str] = []
    stored = {row[0]: bytes(row[1]) for row in fetch("SELECT submission_id, body FROM envelopes")}
    per_table: dict[str, dict[str, int]] = {}
    for name in ("submissions", "envelopes", "fingerprints", "configs", "trials", "summaries"):
        per_table[name] = {
            row[0]: int(row[1])
            for row in fetch(f'SELECT submission_id, count(*) FROM "{name}" GROUP BY submission_id')
        }
    expected_rows = {"submissions": 1, "envelopes": 1, "fingerprints": 1, "configs": 3,
                     "trials": 15, "summaries": 3}
    missing = [sid for sid in acked if sid not in stored]
    altered = [sid for sid, body in acked.items() if sid in stored and stored[sid] != body]
    incomplete = sorted({
        sid for sid in stored for name, n in expected_rows.items()
        if per_table[name].get(sid) != n
    })
    orphans = sorted({sid for rows in per_table.values() for sid in rows} - set(stored))
    if missing:
        problems.append(f"{len(missing)} acknowledged submissions missing: {missing[:3]}")
    if altered:
        problems.append(f"{len(altered)} stored with other bytes: {altered[:3]}")
    if incomplete:
        problems.append(f"{len(incomplete)} incomplete: {incomplete[:3]}")
    if orphans:
        problems.append(f"{len(orphans)} rows without an envelope: {orphans[:3]}")
    return {
        "stored": len(stored),
        "acked": len(acked),
        "acked_found": len(acked) - len(missing),
        "stored_not_acked": len(set(stored) - set(acked)),
        "problems": problems,
    }
