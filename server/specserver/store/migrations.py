"""Schema versions: forward migrations, run at startup, on DuckDB and PostgreSQL.

A fresh store is created from ``tables.metadata`` (the single schema source) and stamped
with ``LATEST``. An older store runs each migration above its version, in order, each in
the same transaction as its ``schema_version`` row. To change the schema: edit
``tables.py`` AND append a ``Migration`` that brings a store of the previous version to
the new one (SQLAlchemy Core or dialect-neutral DDL), then bump nothing else.

On PostgreSQL, concurrent replicas serialise on an advisory lock while migrating.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)

from specschema import evidence
from specserver.errors import SpecServerError
from specserver.store import tables

ADVISORY_LOCK_ID = 0x5BEC_5E17


class SchemaTooNew(SpecServerError):
    code = "schema_too_new"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _create_v1(conn: Connection) -> None:
    tables.metadata.create_all(conn, checkfirst=True)


def _received_at_index(conn: Connection) -> None:
    """PostgreSQL only (see tables.py): an index for the newest receipt and the list."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(
            "CREATE INDEX IF NOT EXISTS ix_submissions_received_at "
            "ON submissions (received_at, submission_id)"))


# Columns wire format v2 added (issue 13), all nullable: rows stored before stay as they were.
_WIRE_V2_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("submissions", "wire_version", "INTEGER"),
    ("submissions", "engine_name", "VARCHAR(32)"),
    ("submissions", "engine_runtime", "VARCHAR(16)"),
    ("submissions", "engine_build", "VARCHAR(200)"),
    ("submissions", "engine_log", "VARCHAR(16)"),
    ("configs", "mean_accepted_len", "DOUBLE PRECISION"),
    ("configs", "launches", "TEXT"),
    ("trials", "drafted", "BIGINT"),
    ("trials", "accepted", "BIGINT"),
    ("trials", "mean_accepted_len", "DOUBLE PRECISION"),
    ("trials", "counters_source", "VARCHAR(32)"),
)


def _wire_v2(conn: Connection) -> None:
    """Wire v2's columns; ``observed`` widened to 32 characters for 'baseline_speculated'
    (PostgreSQL enforces VARCHAR lengths; DuckDB ignores them, so it needs no change)."""
    # information_schema, not inspect(): duckdb_engine's column reflection queries
    # pg_catalog tables DuckDB lacks.
    present: dict[str, set[str]] = {}
    for table in ("submissions", "configs", "trials"):
        present[table] = set(conn.execute(text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = :t "
            "AND table_schema = current_schema()"), {"t": table}).scalars())
    for table, column, kind in _WIRE_V2_COLUMNS:
        if column not in present[table]:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}"))
    if conn.dialect.name == "postgresql":
        for table in ("configs", "summaries"):
            conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN observed TYPE VARCHAR(32)"))


def _evidence_levels(conn: Connection) -> None:
    """summaries.evidence and evidence_reason (issue 15), filled for every stored row with
    the same pure rule ingestion applies (``specschema.evidence.evidence_level``), from the
    stored submission, config and trial rows. Configs without counters are 'none' in one
    UPDATE; only those with counters are read back, a submission's worth at a time."""
    present = set(conn.execute(text(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'summaries' "
        "AND table_schema = current_schema()")).scalars())
    for column, kind in (("evidence", "VARCHAR(16)"), ("evidence_reason", "TEXT")):
        if column not in present:
            conn.execute(text(f"ALTER TABLE summaries ADD COLUMN {column} {kind}"))
    sub, cfg, trl, summ = tables.submissions, tables.configs, tables.trials, tables.summaries
    with_counters = select(cfg.c.submission_id, cfg.c.config_name).where(
        cfg.c.drafted_tokens.is_not(None) | cfg.c.counters_source.is_not(None))
    claimed = {(str(a), str(b)) for a, b in conn.execute(with_counters).all()}
    claimed |= {(str(a), str(b)) for a, b in conn.execute(
        select(trl.c.submission_id, trl.c.config_name).where(trl.c.drafted.is_not(None))
        .distinct()).all()}
    conn.execute(update(summ).where(summ.c.evidence.is_(None)).values(
        evidence="none", evidence_reason="no acceptance counters"))
    stmt = (select(sub.c.wire_version, sub.c.engine_name, sub.c.ollama_version,
                   sub.c.engine_log, cfg.c.drafted_tokens, cfg.c.accepted_tokens,
                   cfg.c.counters_source, cfg.c.mean_accepted_len, cfg.c.request_options,
                   cfg.c.launches, summ.c.speedup_tps)
            .select_from(cfg.join(sub, sub.c.submission_id == cfg.c.submission_id).join(
                summ, and_(summ.c.submission_id == cfg.c.submission_id,
                           summ.c.config_name == cfg.c.config_name)))
            .where(cfg.c.submission_id == bindparam("sid"),
                   cfg.c.config_name == bindparam("name")))
    trial_stmt = (select(trl.c.eval_count, trl.c.drafted, trl.c.accepted,
                         trl.c.mean_accepted_len, trl.c.counters_source)
                  .where(trl.c.submission_id == bindparam("sid"),
                         trl.c.config_name == bindparam("name"))
                  .order_by(trl.c.trial_index))
    updates = []
    for sid, name in sorted(claimed):
        row = conn.execute(stmt, {"sid": sid, "name": name}).first()
        if row is None:
            continue
        trials = [evidence.TrialCounts(int(t.eval_count), t.drafted, t.accepted,
                                       t.mean_accepted_len, t.counters_source)
                  for t in conn.execute(trial_stmt, {"sid": sid, "name": name}).all()]
        try:
            options = json.loads(row.request_options)
        except ValueError:
            options = {}
        found = evidence.evidence_level(
            wire_version=row.wire_version, engine_name=row.engine_name or "ollama",
            engine_version=str(row.ollama_version), engine_log=row.engine_log,
            drafted=row.drafted_tokens, accepted=row.accepted_tokens,
            source=row.counters_source, mean_accepted_len=row.mean_accepted_len,
            trials=trials,
            n_max=evidence.n_max_of(options if isinstance(options, dict) else {},
                                    evidence.launches_of(row.launches)),
            speedup_tps=row.speedup_tps)
        updates.append({"sid": sid, "name": name, "level": found.level,
                        "reason": found.reason})
    if updates:
        conn.execute(update(summ).where(summ.c.submission_id == bindparam("sid"),
                                        summ.c.config_name == bindparam("name"))
                     .values(evidence=bindparam("level"), evidence_reason=bindparam("reason")),
                     updates)


# Append only. Version 1 is the day-one schema.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "day-one schema: submissions, envelopes, fingerprints, configs, trials, "
                 "summaries, bans, audit_log", _create_v1),
    Migration(2, "PostgreSQL: index submissions (received_at, submission_id)",
              _received_at_index),
    Migration(3, "wire format v2: engine name/runtime/build, log status, per-trial counters, "
                 "launches, mean accepted length; observed VARCHAR(32)", _wire_v2),
    Migration(4, "evidence levels: summaries.evidence and evidence_reason, computed for every "
                 "stored config", _evidence_levels),
)
LATEST = MIGRATIONS[-1].version


def current_version(conn: Connection) -> int | None:
    if not inspect(conn).has_table(tables.schema_version.name):
        return None
    value = conn.execute(select(func.max(tables.schema_version.c.version))).scalar()
    return int(value) if value is not None else None


def _stamp(conn: Connection, version: int) -> None:
    conn.execute(insert(tables.schema_version).values(
        version=version, applied_at=datetime.now(UTC).replace(tzinfo=None)
    ))


def migrate(engine: Engine, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Bring the store to the newest version; return it. Idempotent."""
    latest = migrations[-1].version
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": ADVISORY_LOCK_ID})
        version = current_version(conn)
        if version is None:
            has_data = inspect(conn).has_table(tables.submissions.name)
            tables.schema_version.create(conn, checkfirst=True)
            if not has_data:
                # A fresh store: the current tables are the newest schema.
                tables.metadata.create_all(conn, checkfirst=True)
                _stamp(conn, latest)
                return latest
            version = 0
        if version > latest:
            raise SchemaTooNew(
                f"the store is at schema version {version}; this server knows up to {latest}"
            )
    for migration in migrations:
        if migration.version <= version:
            continue
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": ADVISORY_LOCK_ID})
            if (current_version(conn) or 0) >= migration.version:
                continue  # another replica got here first
            migration.apply(conn)
            _stamp(conn, migration.version)
    return latest
