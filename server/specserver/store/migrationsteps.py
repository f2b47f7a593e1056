"""The steps of store versions 1 to 14, each bringing a store of the previous version to its
own (``migrations.MIGRATIONS`` lists them with their words; later versions keep their steps
beside the tables they add). Append-only history: a step never changes once released."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    exists,
    insert,
    literal_column,
    or_,
    select,
    text,
    update,
)

from specschema import evidence, speculation
from specserver.store import changes, queries, tables
from specserver.store.backend import backend_of
from specserver.store.writer import duckdb_append


def columns_of(conn: Connection, table: str) -> set[str]:
    """The columns ``table`` has in this store. From information_schema, not inspect():
    duckdb_engine's column reflection queries pg_catalog tables DuckDB lacks."""
    return set(conn.execute(text(
        "SELECT column_name FROM information_schema.columns WHERE table_name = :t "
        "AND table_schema = current_schema()"), {"t": table}).scalars())


def create_v1(conn: Connection) -> None:
    tables.metadata.create_all(conn, checkfirst=True)


def received_at_index(conn: Connection) -> None:
    """PostgreSQL only (see tables.py): an index for the newest receipt and the list."""
    if backend_of(conn).secondary_indexes:
        conn.execute(text(
            "CREATE INDEX IF NOT EXISTS ix_submissions_received_at "
            "ON submissions (received_at, submission_id)"))


# Columns wire format v2 added, all nullable: rows stored before stay as they were.
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


def wire_v2(conn: Connection) -> None:
    """Wire v2's columns; ``observed`` widened to 32 characters for 'baseline_speculated'
    (PostgreSQL enforces VARCHAR lengths; DuckDB ignores them, so it needs no change)."""
    present = {table: columns_of(conn, table) for table in ("submissions", "configs", "trials")}
    for table, column, kind in _WIRE_V2_COLUMNS:
        if column not in present[table]:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}"))
    if backend_of(conn).enforces_varchar_length:
        for table in ("configs", "summaries"):
            conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN observed TYPE VARCHAR(32)"))


def evidence_levels(conn: Connection) -> None:
    """summaries.evidence and evidence_reason, filled for every stored row with
    the same pure rule ingestion applies (``specschema.evidence.evidence_level``), from the
    stored submission, config and trial rows. Configs without counters are 'none' in one
    UPDATE; those with counters are read in two ordered queries (configs, then their
    trials), and their levels written back through a temporary table in one UPDATE
    (row-by-row statements took ~19 ms per config on DuckDB: bench/migrate_evidence.py)."""
    present = columns_of(conn, "summaries")
    for column, kind in (("evidence", "VARCHAR(16)"), ("evidence_reason", "TEXT")):
        if column not in present:
            conn.execute(text(f"ALTER TABLE summaries ADD COLUMN {column} {kind}"))
    sub, cfg, trl, summ = tables.submissions, tables.configs, tables.trials, tables.summaries
    # The engine's version column under the name this store has (version 10 renamed it).
    stored = columns_of(conn, "submissions")
    version_name = "ollama_version" if "ollama_version" in stored else "engine_version"
    engine_version: Any = literal_column(f"submissions.{version_name}").label("engine_version")
    conn.execute(update(summ).values(evidence="none", evidence_reason="no acceptance counters"))
    counted = trl.alias("counted")  # its own name: the trials query reads trl too
    claimed = or_(cfg.c.drafted_tokens.is_not(None), cfg.c.counters_source.is_not(None),
                  exists().where(counted.c.submission_id == cfg.c.submission_id,
                                 counted.c.config_name == cfg.c.config_name,
                                 counted.c.drafted.is_not(None)))
    order = (cfg.c.submission_id, cfg.c.config_name)
    configs = conn.execute(
        select(cfg.c.submission_id, cfg.c.config_name, sub.c.wire_version, sub.c.engine_name,
               engine_version, sub.c.engine_log, cfg.c.drafted_tokens,
               cfg.c.accepted_tokens, cfg.c.counters_source, cfg.c.mean_accepted_len,
               cfg.c.request_options, cfg.c.launches, summ.c.speedup_tps)
        .select_from(cfg.join(sub, sub.c.submission_id == cfg.c.submission_id).join(
            summ, and_(summ.c.submission_id == cfg.c.submission_id,
                       summ.c.config_name == cfg.c.config_name)))
        .where(claimed).order_by(*order)).all()
    if not configs:
        return
    trials: dict[tuple[str, str], list[evidence.TrialCounts]] = {}
    for t in conn.execute(
            select(trl.c.submission_id, trl.c.config_name, trl.c.eval_count, trl.c.drafted,
                   trl.c.accepted, trl.c.mean_accepted_len, trl.c.counters_source)
            .select_from(trl.join(cfg, and_(cfg.c.submission_id == trl.c.submission_id,
                                            cfg.c.config_name == trl.c.config_name)))
            .where(claimed).order_by(*order, trl.c.trial_index)).all():
        trials.setdefault((t[0], t[1]), []).append(evidence.TrialCounts(
            int(t.eval_count), t.drafted, t.accepted, t.mean_accepted_len, t.counters_source))
    levels = []
    for row in configs:
        try:
            options = json.loads(row.request_options)
        except ValueError:
            options = {}
        found = evidence.evidence_level(
            wire_version=row.wire_version, engine_name=row.engine_name or "ollama",
            engine_version=str(row.engine_version), engine_log=row.engine_log,
            drafted=row.drafted_tokens, accepted=row.accepted_tokens,
            source=row.counters_source, mean_accepted_len=row.mean_accepted_len,
            trials=trials.get((row.submission_id, row.config_name), []),
            n_max=evidence.n_max_of(options if isinstance(options, dict) else {},
                                    evidence.launches_of(row.launches)),
            speedup_tps=row.speedup_tps)
        levels.append({"submission_id": row.submission_id, "config_name": row.config_name,
                       "evidence": found.level, "evidence_reason": found.reason})
    fill = Table("evidence_fill", MetaData(), Column("submission_id", String(36)),
                 Column("config_name", String(120)), Column("evidence", String(16)),
                 Column("evidence_reason", Text), prefixes=["TEMPORARY"])
    fill.create(conn)
    if backend_of(conn).has_appender:
        duckdb_append(conn, fill, [tuple(level.values()) for level in levels])
    else:
        conn.execute(insert(fill), levels)
    conn.execute(text(
        "UPDATE summaries SET evidence = f.evidence, evidence_reason = f.evidence_reason "
        "FROM evidence_fill f WHERE summaries.submission_id = f.submission_id "
        "AND summaries.config_name = f.config_name"))
    fill.drop(conn)


def origins(conn: Connection) -> None:
    """submissions.origin_hash and the address_secrets table (store/origins.py)."""
    present = columns_of(conn, "submissions")
    if "origin_hash" not in present:
        conn.execute(text("ALTER TABLE submissions ADD COLUMN origin_hash VARCHAR(64)"))
    tables.address_secrets.create(conn, checkfirst=True)


def model_variants(conn: Connection) -> None:
    """submissions.target_quant, summaries.draft_digest and draft_quant (null on rows
    stored before: their groups stay as they were)."""
    for table, column, kind in (("submissions", "target_quant", "VARCHAR(200)"),
                                ("summaries", "draft_digest", "VARCHAR(64)"),
                                ("summaries", "draft_quant", "VARCHAR(200)")):
        if column not in columns_of(conn, table):
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}"))


def canonical_model_tags(conn: Connection) -> None:
    """Stored model names as ingestion now stores them (``ingest.names.canonical_model``):
    lower case, without the default tag ``:latest``, so rows stored before the rule group
    with new ones (``Qwen3:14B`` was its own model)."""
    for table, columns in (("submissions", ("target_model",)),
                           ("configs", ("model", "draft_model")),
                           ("summaries", ("model", "draft_model"))):
        for column in columns:
            canonical = f"regexp_replace(lower({column}), :default_tag, '')"
            conn.execute(text(f"UPDATE {table} SET {column} = {canonical} "
                              f"WHERE {column} IS NOT NULL AND {column} <> {canonical}"),
                         {"default_tag": ":latest$"})


_BLOCK_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("trials", "block_number", "INTEGER"),
    ("summaries", "blocks", "INTEGER"),
    ("summaries", "block_drift", "DOUBLE PRECISION"),
    ("summaries", "speedup_wall_ci_low", "DOUBLE PRECISION"),
    ("summaries", "speedup_wall_ci_high", "DOUBLE PRECISION"),
)


def blocks(conn: Connection) -> None:
    """Blocks: trials.block_number and the summaries' block fields; null on every stored row
    (no submission before them carried blocks, and their numbers stay as they were)."""
    for table, column, kind in _BLOCK_COLUMNS:
        if column not in columns_of(conn, table):
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}"))


def board_changes(conn: Connection) -> None:
    """The change log of the board maintained by change, and its clock (tables.py)."""
    tables.board_clock.create(conn, checkfirst=True)
    tables.board_changes.create(conn, checkfirst=True)
    changes.start_clock(conn)


def engine_version_column(conn: Connection) -> None:
    """submissions.ollama_version renamed engine_version: it has always held the
    submission's engine.version, whatever the engine (reads compute the Ollama-only
    ``ollama_version`` from it). A rename keeps every value and the column's place."""
    present = columns_of(conn, "submissions")
    if "ollama_version" in present and "engine_version" not in present:
        conn.execute(text(
            "ALTER TABLE submissions RENAME COLUMN ollama_version TO engine_version"))


def baseline_tps(conn: Connection) -> None:
    """summaries.baseline_tps: each draft config's row gets its submission's baseline
    median tok/s, as ingestion now writes it (null on baseline rows and without one)."""
    if "baseline_tps" not in columns_of(conn, "summaries"):
        conn.execute(text("ALTER TABLE summaries ADD COLUMN baseline_tps DOUBLE PRECISION"))
    conn.execute(text(
        "UPDATE summaries SET baseline_tps = b.median_tps FROM summaries AS b "
        "WHERE b.submission_id = summaries.submission_id AND b.role = 'baseline' "
        "AND summaries.role = 'draft'"))


def board_keys(conn: Connection) -> None:
    """submissions.id_digest and summaries.id_digest (``rowset.id_digest`` of each row's
    submission id, in SQL: ``Backend.id_digest_sql``), and submissions.reaches_board (whether one
    of its draft results is on a board: ``queries.reaches_board_clause``, the rule
    ingestion applies in Python)."""
    digest = backend_of(conn).id_digest_sql()
    for table in ("submissions", "summaries"):
        if "id_digest" not in columns_of(conn, table):
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN id_digest BIGINT"))
        conn.execute(text(f"UPDATE {table} SET id_digest = {digest}"))
    if "reaches_board" not in columns_of(conn, "submissions"):
        conn.execute(text("ALTER TABLE submissions ADD COLUMN reaches_board BOOLEAN"))
    draft = tables.summaries.alias("d")
    sub = tables.submissions
    conn.execute(update(sub).values(reaches_board=sub.c.submission_id.in_(
        select(draft.c.submission_id).where(queries.reaches_board_clause(draft)))))


def require_board_keys(conn: Connection) -> None:
    """On DuckDB, version 12's columns NOT NULL (a fresh store's too): a writer that forgot
    one would lose its rows from the boards, or its key's ageing, without a word. Apart
    from version 12 because DuckDB takes the constraint only once the backfill has
    committed. Not on PostgreSQL: while a rolling upgrade replaces its replicas, those of
    the version before write rows without them (``tables._NULL_WHILE_UPGRADING``)."""
    if backend_of(conn).rolling_upgrades:
        return
    for table, column in (("submissions", "id_digest"), ("summaries", "id_digest"),
                          ("submissions", "reaches_board")):
        conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL"))


# Version 14's columns (tables.py): all nullable, NULL meaning "not recorded".
_ACCEPTANCE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("trials", "rounds", "BIGINT"),
    ("trials", "accepted_per_position", "TEXT"),
    ("summaries", "spec_type", "TEXT"),
    ("summaries", "depth", "INTEGER"),
    ("summaries", "rounds", "BIGINT"),
    ("summaries", "accepted_per_position", "TEXT"),
)


def speculation_keys(conn: Connection) -> None:
    """Version 14's columns. ``summaries.spec_type`` and ``depth`` are filled for stored
    rows from their config's stored request options by ingestion's own rule
    (``specschema.speculation``, in Python: the rule reads JSON values by their kind, which
    SQL would read by its text); only the configs that can have either are read (launched
    by the client, or with a ``draft_num_predict`` option), and their values written back
    through a temporary table in one UPDATE, as version 4 does. Rounds and per-position
    counts stay NULL on stored rows: ingestion did not keep them before."""
    for table, column, kind in _ACCEPTANCE_COLUMNS:
        if column not in columns_of(conn, table):
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}"))
    cfg = tables.configs
    found = []
    for row in conn.execute(select(
            cfg.c.submission_id, cfg.c.config_name, cfg.c.mechanism, cfg.c.request_options,
            cfg.c.draft_model).where(or_(
                cfg.c.mechanism == speculation.LAUNCHED,
                cfg.c.request_options.like(f'%"{speculation.DEPTH_OPTIONS[None]}"%'))
            ).order_by(cfg.c.submission_id, cfg.c.config_name)):
        try:
            options = json.loads(row.request_options)
        except ValueError:
            continue
        if not isinstance(options, dict):
            continue
        named = speculation.spec_type_of(row.mechanism, options, row.draft_model)
        depth = speculation.depth_of(named, options)
        if named is not None or depth is not None:
            found.append((row.submission_id, row.config_name, named, depth))
    if not found:
        return
    fill = Table("speculation_fill", MetaData(), Column("submission_id", String(36)),
                 Column("config_name", String(120)), Column("spec_type", Text),
                 Column("depth", Integer), prefixes=["TEMPORARY"])
    fill.create(conn)
    if backend_of(conn).has_appender:
        duckdb_append(conn, fill, found)
    else:
        conn.execute(insert(fill), [dict(zip(("submission_id", "config_name", "spec_type",
                                              "depth"), row, strict=True)) for row in found])
    conn.execute(text(
        "UPDATE summaries SET spec_type = f.spec_type, depth = f.depth "
        "FROM speculation_fill f WHERE summaries.submission_id = f.submission_id "
        "AND summaries.config_name = f.config_name"))
    fill.drop(conn)
