"""Upgrading a store created by the previous schema version, on DuckDB and PostgreSQL.

Two upgrades, both by the real ``migrate``:

- the real one, version 1 -> 2 (PostgreSQL gets an index on submissions.received_at;
  DuckDB only the stamp): a store filled through the real ingest path is turned back
  into exactly what the version-1 code wrote, then upgraded;
- this code's store -> a next version of the kind the schema will get (add a column with
  a backfill, add a table, add an index).

What an upgrade must do on both stores: apply only what is missing, in one transaction
with its stamp, keep every stored row and byte, be idempotent, and on PostgreSQL let
several replicas start at once and apply it exactly once.
"""

from __future__ import annotations

import hashlib
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    Column,
    Connection,
    MetaData,
    String,
    Table,
    create_engine,
    delete,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.exc import IntegrityError

from specserver.store import id_digest, tables
from specserver.store.database import Store, make_engine
from specserver.store.migrations import LATEST, MIGRATIONS, Migration, SchemaTooNew, migrate
from tests.support.backends import board_bodies, stored_envelope_sha, submission_id_of
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for

_V2 = MetaData()
submission_labels = Table(
    "submission_labels", _V2,
    Column("submission_id", String(36), primary_key=True),
    Column("label", String(40), nullable=False),
)


def _to_v2(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE submissions ADD COLUMN region VARCHAR(40)"))
    conn.execute(text(
        "UPDATE submissions SET region = CASE WHEN os_name = 'macos' THEN 'apple' "
        "ELSE 'other' END"))
    submission_labels.create(conn)
    # Plain DDL: an Index() on tables.submissions would attach itself to the real schema.
    conn.execute(text("CREATE INDEX ix_submissions_created_at ON submissions (created_at)"))


NEXT = (*MIGRATIONS, Migration(LATEST + 1, "region column, labels table, received_at index",
                               _to_v2))


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def _previous_version_store(url: str, tmp_path: Path) -> list[bytes]:
    """A store written by this code (the previous version for NEXT), with submissions."""
    bodies = board_bodies(8, start=4000)
    (tmp_path / "app").mkdir(exist_ok=True)
    with Served(settings_for(tmp_path / "app", database_url=url)) as served:
        assert served.store.schema_version == LATEST
        for body in bodies:
            assert served.post(body).status_code == 201
    return bodies


def _versions(url: str) -> list[int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return sorted(conn.execute(select(tables.schema_version.c.version)).scalars())
    finally:
        engine.dispose()


def _has_received_at_index(url: str) -> bool:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                found = conn.execute(text(
                    "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() "
                    "AND indexname = 'ix_submissions_received_at'")).scalar()
            else:
                found = conn.execute(text(
                    "SELECT count(*) FROM duckdb_indexes() "
                    "WHERE index_name = 'ix_submissions_received_at'")).scalar()
        return found == 1
    finally:
        engine.dispose()


def test_real_upgrade_from_version_1(store_url: str, tmp_path: Path) -> None:
    assert LATEST >= 2
    bodies = _previous_version_store(store_url, tmp_path)
    postgres = store_url.startswith("postgresql")
    assert _has_received_at_index(store_url) == postgres  # a fresh store has it (PG only)
    engine = make_engine(store_url)
    try:
        # Exactly what the version-1 code wrote: the same tables, no index, stamped 1.
        with engine.begin() as conn:
            conn.execute(text("DROP INDEX IF EXISTS ix_submissions_received_at"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(version=1, applied_at=datetime(
                2026, 11, 1)))
        assert _versions(store_url) == [1] and not _has_received_at_index(store_url)
        before = stored_envelope_sha(engine)
        assert migrate(engine) == LATEST
        assert _versions(store_url) == list(range(1, LATEST + 1))
        assert _has_received_at_index(store_url) == postgres
        assert stored_envelope_sha(engine) == before
        assert set(before) == {submission_id_of(b) for b in bodies}
    finally:
        engine.dispose()
    # The upgraded store serves: the same submissions come back as duplicates.
    with Served(settings_for(tmp_path / "app", database_url=store_url)) as served:
        assert served.store.schema_version == LATEST
        assert served.post(bodies[0]).status_code == 200


def test_upgrade_from_the_previous_version_keeps_every_row(
    store_url: str, tmp_path: Path
) -> None:
    bodies = _previous_version_store(store_url, tmp_path)
    engine = make_engine(store_url)
    try:
        before = stored_envelope_sha(engine)
        assert _versions(store_url) == [LATEST]  # a fresh store is stamped with the newest
        assert migrate(engine, NEXT) == LATEST + 1
        assert _versions(store_url) == [LATEST, LATEST + 1]
        with engine.connect() as conn:
            assert inspect(conn).has_table("submission_labels")
            regions = dict(conn.execute(text(
                "SELECT os_name, region FROM submissions GROUP BY os_name, region")).all())
        assert regions == {"macos": "apple", "linux": "other"}
        # Every stored byte is still there (envelopes re-verify against their hashes).
        assert stored_envelope_sha(engine) == before
        assert before == {submission_id_of(b): hashlib.sha256(b).hexdigest() for b in bodies}
        # Idempotent: a restart applies nothing and stamps nothing.
        assert migrate(engine, NEXT) == LATEST + 1
        assert _versions(store_url) == [LATEST, LATEST + 1]
    finally:
        engine.dispose()


def test_a_server_refuses_a_store_newer_than_it_knows(store_url: str, tmp_path: Path) -> None:
    _previous_version_store(store_url, tmp_path)
    engine = make_engine(store_url)
    try:
        migrate(engine, NEXT)
    finally:
        engine.dispose()
    store = Store(store_url)
    with pytest.raises(SchemaTooNew, match=f"knows up to {LATEST}"):
        store.open()
    store.engine.dispose()
    # Refusing changed nothing.
    assert _versions(store_url) == [LATEST, LATEST + 1]


@pytest.mark.postgres
def test_replicas_starting_together_upgrade_once(postgres_url: str, tmp_path: Path) -> None:
    _previous_version_store(postgres_url, tmp_path)
    engines = [create_engine(postgres_url) for _ in range(4)]
    results: list[object] = []
    gate = threading.Barrier(len(engines))

    def start(engine: Any) -> None:
        gate.wait()
        try:
            results.append(migrate(engine, NEXT))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            results.append(exc)

    threads = [threading.Thread(target=start, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for engine in engines:
        engine.dispose()
    # ALTER TABLE ADD COLUMN twice would have failed one of them: it ran once.
    assert results == [LATEST + 1] * len(engines)
    assert _versions(postgres_url) == [LATEST, LATEST + 1]


def test_stored_model_tags_become_canonical(store_url: str, tmp_path: Path) -> None:
    """Rows stored before model tags were canonical (``Qwen3:14B``, ``qwen3:latest``)
    group with new ones after the upgrade (store version 7)."""
    _previous_version_store(store_url, tmp_path)
    engine = make_engine(store_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE submissions SET target_model = 'Qwen3:14B'"))
            conn.execute(text("UPDATE summaries SET model = 'QWEN3:latest', "
                              "draft_model = CASE WHEN draft_model IS NULL THEN NULL "
                              "ELSE 'Qwen2.5:0.5B' END"))
            conn.execute(delete(tables.schema_version).where(
                tables.schema_version.c.version >= 7))
        assert migrate(engine) == LATEST
        with engine.connect() as conn:
            targets = set(conn.execute(select(tables.submissions.c.target_model)).scalars())
            models = set(conn.execute(select(tables.summaries.c.model)).scalars())
            drafts = set(conn.execute(select(tables.summaries.c.draft_model)).scalars())
        assert targets == {"qwen3:14b"} and models == {"qwen3"}
        assert drafts <= {None, "qwen2.5:0.5b"}
    finally:
        engine.dispose()


def _columns(engine: Any, table: str) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = :t "
            "AND table_schema = current_schema()"), {"t": table}).scalars())


READS = ("/v1/aggregates?group_by=engine,engine_version,ollama_version",
         "/v1/submissions?limit=500", "/v1/export?format=jsonl")


def test_a_store_from_before_version_10_upgrades_with_its_engine_versions(
        store_url: str, tmp_path: Path) -> None:
    """A store whose column is still ``ollama_version`` (every store before version 10),
    upgraded from version 1: the migration that reads the engine's version (4, evidence)
    reads the old name, version 10 renames it, and every value and read stays the same."""
    bodies = board_bodies(6, start=4100)
    settings = settings_for(tmp_path / "app", database_url=store_url, export_reuse_s=0)
    with Served(settings) as served:
        for body in bodies:
            assert served.post(body).status_code == 201
        before = {path: served.get(path).content for path in READS}
    engine = make_engine(store_url)
    sub = tables.submissions
    try:
        with engine.connect() as conn:
            versions = dict(conn.execute(select(sub.c.submission_id, sub.c.engine_version)).all())
            evidence = sorted(conn.execute(select(
                tables.summaries.c.submission_id, tables.summaries.c.config_name,
                tables.summaries.c.evidence, tables.summaries.c.evidence_reason)).all())
        with engine.begin() as conn:  # what every store before version 10 holds
            conn.execute(text(
                "ALTER TABLE submissions RENAME COLUMN engine_version TO ollama_version"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(version=1, applied_at=datetime(
                2026, 11, 1)))
        assert "ollama_version" in _columns(engine, "submissions")
        assert migrate(engine) == LATEST
        columns = _columns(engine, "submissions")
        assert "engine_version" in columns and "ollama_version" not in columns
        with engine.connect() as conn:
            assert dict(conn.execute(select(sub.c.submission_id, sub.c.engine_version)).all()
                        ) == versions
            assert sorted(conn.execute(select(
                tables.summaries.c.submission_id, tables.summaries.c.config_name,
                tables.summaries.c.evidence, tables.summaries.c.evidence_reason)).all()
                ) == evidence
        assert migrate(engine) == LATEST  # idempotent
    finally:
        engine.dispose()
    assert set(versions.values()) and None not in versions.values()
    with Served(settings) as served:
        assert {path: served.get(path).content for path in READS} == before
        assert served.post(bodies[0]).status_code == 200


def _served_reads(store_url: str, tmp_path: Path, start: int, reads: tuple[str, ...]
                  ) -> tuple[Any, dict[str, Any]]:
    """A served store holding six board submissions, and what ``reads`` answer from it."""
    settings = settings_for(tmp_path / "app", database_url=store_url)
    with Served(settings) as served:
        for body in board_bodies(6, start=start):
            assert served.post(body).status_code == 201
        return settings, {path: served.get(path).json() for path in reads}


def test_a_store_from_before_version_11_gets_each_drafts_baseline_on_its_row(
        store_url: str, tmp_path: Path) -> None:
    """Version 11 copies each submission's baseline median tok/s onto its draft rows (the
    board reads it there): a store without the column, upgraded, serves the same boards
    with the same baselines, and a board without the copy would show none."""
    reads = ("/v1/leaderboard?view=noise_floor", "/v1/aggregates?group_by=chip",
             "/v1/aggregates?group_by=engine&view=noise_floor")
    settings, before = _served_reads(store_url, tmp_path, 4200, reads)
    baselines = [g["median_baseline_tps"] for answer in before.values()
                 for g in answer["groups"]]
    assert baselines and None not in baselines
    engine = make_engine(store_url)
    summ = tables.summaries
    try:
        with engine.connect() as conn:
            stored = sorted(conn.execute(select(summ.c.submission_id, summ.c.config_name,
                                                summ.c.baseline_tps)).all())
        with engine.begin() as conn:  # what every store before version 11 holds
            conn.execute(text("ALTER TABLE summaries DROP COLUMN baseline_tps"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(version=10, applied_at=datetime(
                2026, 12, 1)))
        assert migrate(engine) == LATEST
        with engine.connect() as conn:
            assert sorted(conn.execute(select(summ.c.submission_id, summ.c.config_name,
                                              summ.c.baseline_tps)).all()) == stored
    finally:
        engine.dispose()
    assert any(tps is not None for _, _, tps in stored)
    with Served(settings) as served:
        assert {path: served.get(path).json() for path in reads} == before


def test_a_store_from_before_version_12_gets_digests_and_reach(store_url: str,
                                                               tmp_path: Path) -> None:
    """Versions 12 and 13 store each submission id's digest on its ``submissions`` and
    ``summaries`` rows (the board's joins compare it first) and whether the submission
    reached a board (its key ages), and require both: computed in SQL by the migration,
    equal to what ingestion writes in Python (``store.id_digest``,
    ``verdicts.reaches_a_board``) for every row; the boards read the same; a row without
    them is refused where no older server can write (DuckDB)."""
    reads = ("/v1/leaderboard", "/v1/leaderboard?view=noise_floor",
             "/v1/aggregates?group_by=chip")
    settings, before = _served_reads(store_url, tmp_path, 4300, reads)
    assert any(answer["groups"] for answer in before.values())
    engine = make_engine(store_url)
    sub = tables.submissions
    try:
        with engine.connect() as conn:
            reached = sorted(conn.execute(select(sub.c.submission_id, sub.c.reaches_board)))
        assert {flag for _, flag in reached} == {True, False}  # a not_observed one is not
        with engine.begin() as conn:  # what every store before version 12 holds
            conn.execute(text("ALTER TABLE submissions DROP COLUMN reaches_board"))
            for table in ("submissions", "summaries"):
                conn.execute(text(f"ALTER TABLE {table} DROP COLUMN id_digest"))
            # ids of every kind the digest must agree on: a uuid4, non-ASCII, high bits set
            for odd in ("ffffffff-ffff-4fff-bfff-ffffffffffff", "ünïcode-ïd", "x"):
                conn.execute(text(
                    "INSERT INTO summaries (submission_id, config_name, role, model, "
                    "mechanism, observed, trials) VALUES (:s, 'odd', 'baseline', 'm', 'none', "
                    "'none', 1)"), {"s": odd})
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(version=11, applied_at=datetime(
                2026, 12, 5)))
        assert migrate(engine) == LATEST
        with engine.connect() as conn:
            for table in (tables.submissions, tables.summaries):
                found = conn.execute(select(table.c.submission_id, table.c.id_digest)).all()
                assert found and all(d == id_digest(s) for s, d in found), table.name
            assert any(d < 0 for _, d in found) and any(d > 0 for _, d in found)
            assert sorted(conn.execute(select(sub.c.submission_id, sub.c.reaches_board))
                          ) == reached
        # DuckDB (one server process) refuses a row without them; PostgreSQL takes it from
        # a replica of the version before, during a rolling upgrade (the boards read it).
        without = text("INSERT INTO summaries (submission_id, config_name, role, model, "
                       "mechanism, observed, trials) VALUES ('y', 'odd', 'baseline', 'm', "
                       "'none', 'none', 1)")
        if store_url.startswith("postgresql"):
            with engine.begin() as conn:
                conn.execute(without)
        else:
            with pytest.raises(IntegrityError), engine.begin() as conn:
                conn.execute(without)
        with engine.begin() as conn:
            conn.execute(delete(tables.summaries).where(tables.summaries.c.config_name == "odd"))
    finally:
        engine.dispose()
    with Served(settings) as served:
        assert {path: served.get(path).json() for path in reads} == before


def test_a_fresh_duckdb_store_requires_the_board_keys(tmp_path: Path) -> None:
    """A fresh DuckDB store declares version 12's columns NOT NULL, as a migrated one does
    (tables.py leaves them nullable for PostgreSQL's rolling upgrades)."""
    engine = make_engine(f"duckdb:///{tmp_path / 'fresh.duckdb'}")
    try:
        migrate(engine)
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(insert(tables.submissions).values(
                submission_id="s", source="imported", created_at=datetime(2026, 12, 5),
                received_at=datetime(2026, 12, 5), envelope_sha256="0" * 64,
                protocol_id="p", protocol_version=1, protocol_sha256="a" * 64,
                target_model="m", engine_version="1", client_name="c", client_version="1",
                complete=True, hidden=False))  # reaches_board left out
    finally:
        engine.dispose()
