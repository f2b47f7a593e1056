"""Schema versions: forward migrations, run at startup, on DuckDB and PostgreSQL.

A fresh store is created from ``tables.metadata`` (the single schema source) and stamped
with ``LATEST``. An older store runs each migration above its version, in order, each in
the same transaction as its ``schema_version`` row. To change the schema: edit
``tables.py`` AND append a ``Migration`` that brings a store of the previous version to
the new one (SQLAlchemy Core or dialect-neutral DDL), then bump nothing else.

On PostgreSQL, concurrent replicas serialise on an advisory lock while migrating.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    Connection,
    Engine,
    func,
    insert,
    inspect,
    select,
    text,
)

from specserver.errors import SpecServerError
from specserver.store import changes, tables
from specserver.store.backend import backend_of
from specserver.store.domainmigration import add_domain_results
from specserver.store.logentries import create_log
from specserver.store.migrationsteps import (
    baseline_tps,
    blocks,
    board_changes,
    board_keys,
    canonical_model_tags,
    create_v1,
    engine_version_column,
    evidence_levels,
    model_variants,
    origins,
    received_at_index,
    require_board_keys,
    speculation_keys,
    wire_v2,
)
from specserver.store.probes import add_probe_kind, add_probes

ADVISORY_LOCK_ID = 0x5BEC_5E17


class SchemaTooNew(SpecServerError):
    code = "schema_too_new"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


# Append only. Version 1 is the day-one schema.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "day-one schema: submissions, envelopes, fingerprints, configs, trials, "
                 "summaries, bans, audit_log", create_v1),
    Migration(2, "PostgreSQL: index submissions (received_at, submission_id)",
              received_at_index),
    Migration(3, "wire format v2: engine name/runtime/build, log status, per-trial counters, "
                 "launches, mean accepted length; observed VARCHAR(32)", wire_v2),
    Migration(4, "evidence levels: summaries.evidence and evidence_reason, computed for every "
                 "stored config", evidence_levels),
    Migration(5, "origins: submissions.origin_hash (keyed hash of the address range) and "
                 "address_secrets", origins),
    Migration(6, "model variants: submissions.target_quant, summaries.draft_digest and "
                 "draft_quant", model_variants),
    Migration(7, "model tags canonical in stored rows: lower case, no ':latest'",
              canonical_model_tags),
    Migration(8, "blocks: trials.block_number; summaries.blocks, block_drift, "
                 "speedup_wall_ci_low"
                 " and speedup_wall_ci_high", blocks),
    Migration(9, "board change log: board_clock and board_changes", board_changes),
    Migration(10, "submissions.ollama_version renamed engine_version (it holds every "
                  "engine's version)", engine_version_column),
    Migration(11, "summaries.baseline_tps: a draft config's baseline median tok/s on its "
                  "own row", baseline_tps),
    Migration(12, "submissions.id_digest and summaries.id_digest (a 64-bit digest of the "
                  "submission id, which the board's joins compare first) and "
                  "submissions.reaches_board (a draft result on a board: the key ages)",
              board_keys),
    Migration(13, "DuckDB: version 12's columns required (NOT NULL)", require_board_keys),
    Migration(14, "trials.rounds and accepted_per_position; summaries.spec_type and depth "
                  "(filled from the stored request options) and the trials' rounds and "
                  "per-position counts summed", speculation_keys),
    Migration(15, "domain_results: a draft config's result per domain of its protocol's "
                  "prompt set (filled from the stored envelopes)", add_domain_results),
    Migration(16, "probes: signed cost probes (a machine's cost of checking k tokens at "
                  "once), for predictions", add_probes),
    Migration(17, "log_entries: the transparency log (stored envelopes entered)", create_log),
    Migration(18, "probes.measured: what a cost probe's samples are (verification or "
                  "prefill), filled from the stored envelopes", add_probe_kind),
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
        if backend_of(conn).advisory_locks:
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": ADVISORY_LOCK_ID})
        version = current_version(conn)
        if version is None:
            has_data = inspect(conn).has_table(tables.submissions.name)
            tables.schema_version.create(conn, checkfirst=True)
            if not has_data:
                # A fresh store: the current tables are the newest schema.
                tables.metadata.create_all(conn, checkfirst=True)
                require_board_keys(conn)
                changes.start_clock(conn)
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
            if backend_of(conn).advisory_locks:
                conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": ADVISORY_LOCK_ID})
            if (current_version(conn) or 0) >= migration.version:
                continue  # another replica got here first
            migration.apply(conn)
            _stamp(conn, migration.version)
    return latest
