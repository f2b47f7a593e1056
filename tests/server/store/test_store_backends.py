"""The store on both backends: same schema, same write outcomes, exactly-once storage.

Every test here runs on an embedded DuckDB file and on a private PostgreSQL schema
(``postgres`` marker; skipped without PostgreSQL except under CI=true). The replica tests
at the end put two stores (two engines, two single writers) on one PostgreSQL schema.
"""

from __future__ import annotations

import functools
import hashlib
import random
import threading
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import inspect, select

from specserver.ingest.checks import Checked, check_submission
from specserver.store import tables
from specserver.store.database import Store
from specserver.store.migrations import LATEST
from specserver.store.writes import WriteOutcome
from tests.support.backends import (
    board_bodies,
    board_submission,
    expected_rows,
    signed,
    stored_counts,
    stored_envelope_sha,
    submission_id_of,
)
from tests.support.postgres import STORES, store_url_for
from tests.support.stores import submit_checked

RECEIVED = datetime(2026, 11, 30, 8, 0, 0)


@functools.cache
def checked(body: bytes) -> Checked:
    return check_submission(body, now=datetime.now(UTC), max_age=timedelta(days=30),
                            max_future_skew=timedelta(minutes=5))


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


@pytest.fixture
def store(store_url: str) -> Any:
    s = Store(store_url, group_commit_s=0.02, group_commit_max=64, ban_cache_s=0)
    s.open()
    try:
        yield s
    finally:
        s.close()


def submit_all(store: Store, bodies: list[bytes]) -> list[WriteOutcome]:
    """Queue every body at once (so they share batches), then wait for all."""
    futures: list[Future[WriteOutcome]] = [
        submit_checked(store, checked(b), RECEIVED) for b in bodies
    ]
    return [f.result(30) for f in futures]


def test_fresh_store_is_migrated_to_the_latest_version(store: Store) -> None:
    assert store.schema_version == LATEST
    with store.engine.connect() as conn:
        names = set(inspect(conn).get_table_names())
        version = conn.execute(select(tables.schema_version.c.version)).scalars().all()
    assert {t.name for t in tables.metadata.sorted_tables} <= names
    assert version == [LATEST]
    # Opening again (a restart, another replica) migrates nothing and stamps nothing.
    again = Store(store.url)
    again.engine.dispose()
    from specserver.store.migrations import migrate

    assert migrate(again.engine) == LATEST
    with again.engine.connect() as conn:
        assert conn.execute(select(tables.schema_version.c.version)).scalars().all() == [LATEST]
    again.engine.dispose()


def test_created_duplicate_conflict_and_exact_rows(store: Store) -> None:
    bodies = board_bodies(6)
    first = submit_all(store, bodies)
    assert [o.status for o in first] == ["created"] * 6
    # Same bytes again: duplicate with the original received_at; other bytes: conflict.
    again = submit_checked(store, checked(bodies[0]), RECEIVED + timedelta(hours=1)).result(30)
    assert again.status == "duplicate" and again.received_at == RECEIVED
    other = signed(board_submission(0), key_seed=99)  # same id, another signer
    assert submit_checked(store, checked(other), RECEIVED).result(30).status == "conflict"
    ids = [submission_id_of(b) for b in bodies]
    counts = stored_counts(store.engine, ids)
    for body, sid in zip(bodies, ids, strict=True):
        assert counts[sid] == expected_rows(body)
    shas = stored_envelope_sha(store.engine)
    assert shas[ids[0]] == hashlib.sha256(bodies[0]).hexdigest()


def test_one_batch_with_repeats_and_conflicts_inside_it(store: Store) -> None:
    bodies = board_bodies(20, start=100)
    conflicting = signed(board_submission(100), key_seed=42)  # same id as bodies[0]
    mixed = bodies + bodies[:5] + [conflicting] + bodies[5:8]
    random.Random(3).shuffle(mixed)
    outcomes = submit_all(store, mixed)
    by_id: dict[str, list[tuple[bytes, str]]] = {}
    for body, outcome in zip(mixed, outcomes, strict=True):
        by_id.setdefault(submission_id_of(body), []).append((body, outcome.status))
    shas = stored_envelope_sha(store.engine)
    for sid, sends in by_id.items():
        statuses = [s for _, s in sends]
        assert statuses.count("created") == 1, (sid, statuses)
        stored_body = next(b for b, s in sends if s == "created")
        assert shas[sid] == hashlib.sha256(stored_body).hexdigest()
        for body, status in sends:
            if status != "created":
                assert status == ("duplicate" if body == stored_body else "conflict")
    assert set(shas) == set(by_id)
    counts = stored_counts(store.engine, by_id)
    for sid, sends in by_id.items():
        assert counts[sid] == expected_rows(sends[0][0])


# --- two stores on one PostgreSQL schema: what two replicas do -----------------------------


@pytest.mark.postgres
def test_two_writers_on_one_database_store_each_submission_once(postgres_url: str) -> None:
    stores = [Store(postgres_url, group_commit_s=0.01, group_commit_max=32) for _ in range(2)]
    for s in stores:
        s.open()
    try:
        bodies = board_bodies(60, start=1000)
        conflicting = [signed(board_submission(1000 + i), key_seed=77) for i in range(6)]
        # Every body goes to both writers; the conflicting versions to one of them.
        plan: list[tuple[int, bytes]] = [(r, b) for b in bodies for r in (0, 1)]
        plan += [(i % 2, b) for i, b in enumerate(conflicting)]
        random.Random(5).shuffle(plan)
        results: list[tuple[bytes, WriteOutcome]] = []
        lock = threading.Lock()

        def send(part: list[tuple[int, bytes]]) -> None:
            futures = [(b, submit_checked(stores[r], checked(b), RECEIVED)) for r, b in part]
            done = [(b, f.result(60)) for b, f in futures]
            with lock:
                results.extend(done)

        threads = [threading.Thread(target=send, args=(plan[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(results) == len(plan)
        shas = stored_envelope_sha(stores[0].engine)
        by_id: dict[str, list[tuple[bytes, str]]] = {}
        for body, outcome in results:
            by_id.setdefault(submission_id_of(body), []).append((body, outcome.status))
        assert set(shas) == set(by_id) and len(by_id) == len(bodies)
        for sid, sends in by_id.items():
            statuses = [s for _, s in sends]
            assert statuses.count("created") == 1, (sid, statuses)
            stored_body = next(b for b, s in sends if s == "created")
            assert shas[sid] == hashlib.sha256(stored_body).hexdigest()
            for body, status in sends:
                if status != "created":
                    assert status == ("duplicate" if body == stored_body else "conflict")
        counts = stored_counts(stores[0].engine, by_id)
        for body in bodies:
            assert counts[submission_id_of(body)] == expected_rows(body)
        # Both writers really took part.
        assert all(s.writer.committed > 0 for s in stores)
        assert sum(s.writer.committed for s in stores) == len(bodies)
    finally:
        for s in stores:
            s.close()


@pytest.mark.postgres
def test_postgres_batches_use_copy_and_one_insert_per_batch(postgres_url: str) -> None:
    """The bulk path: the batch's submission rows are COPYed to a staging table and moved
    by ONE INSERT ... ON CONFLICT per batch, the child rows COPYed, whatever the batch size
    (statements counted on the wire; COPY goes around SQLAlchemy, so it is counted on the
    driver's cursor)."""
    from sqlalchemy import event

    from specserver.store import postgres

    store = Store(postgres_url, group_commit_s=0.2, group_commit_max=512)
    store.open()
    statements: list[str] = []
    copies: list[str] = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    import psycopg

    original_copy = psycopg.Cursor.copy

    def counting_copy(self: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        copies.append(str(statement))
        return original_copy(self, statement, *args, **kwargs)

    psycopg.Cursor.copy = counting_copy  # type: ignore[method-assign]
    try:
        outcomes = submit_all(store, board_bodies(40, start=2000))
    finally:
        psycopg.Cursor.copy = original_copy  # type: ignore[method-assign]
        store.close()
    assert [o.status for o in outcomes] == ["created"] * 40
    assert store.writer.last_commit_s > 0  # feeds the writer's adaptive gather window
    batches = store.writer.batches
    assert 1 <= batches <= 3
    inserts = [s for s in statements if s.lstrip().upper().startswith("INSERT")]
    logged = [s for s in inserts if "board_changes" in s]  # the change log's one row set
    assert len(logged) == batches
    inserts = [s for s in inserts if s not in logged]
    assert inserts == [postgres._MOVE_NEW] * batches
    assert "ON CONFLICT (submission_id) DO NOTHING" in inserts[0]
    # One COPY per table per batch: the staging table, the five child tables and the
    # transparency log's entries.
    assert len(copies) == 7 * batches
    assert sum(postgres.STAGE in c for c in copies) == batches
    assert sum('"log_entries"' in c for c in copies) == batches


def test_a_postgres_url_selects_the_replica_safe_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SPECSERVER_DATABASE_URL` (or --database) with a PostgreSQL URL: the insert-or-
    conflict writer and bounded connection waits; a path: DuckDB's writer. Nothing connects."""
    from specserver.http.app import build_store
    from specserver.settings import get_settings
    from specserver.store.postgres import PostgresWriter

    monkeypatch.setenv("SPECSERVER_DATABASE_URL",
                       "postgresql+psycopg://nobody@127.0.0.1:1/nowhere")
    store = build_store(get_settings())
    assert store.dialect == "postgresql" and isinstance(store.writer, PostgresWriter)
    assert store.engine.pool.timeout() <= 10  # type: ignore[attr-defined]
    store.engine.dispose()
    monkeypatch.setenv("SPECSERVER_DATABASE_URL", "/tmp/never-opened.duckdb")
    store = build_store(get_settings())
    assert store.dialect == "duckdb" and not isinstance(store.writer, PostgresWriter)
    store.engine.dispose()


@pytest.mark.postgres
def test_postgres_envelopes_are_stored_verbatim_and_lz4_compressed(postgres_url: str) -> None:
    """Binary COPY keeps every byte; envelopes are TOAST-compressed with lz4 (the server
    here is built with it), several times cheaper to write than pglz."""
    from sqlalchemy import text

    store = Store(postgres_url, group_commit_s=0.05)
    store.open()
    try:
        bodies = board_bodies(12, start=2500)
        assert [o.status for o in submit_all(store, bodies)] == ["created"] * 12
        shas = stored_envelope_sha(store.engine)
        assert shas == {submission_id_of(b): hashlib.sha256(b).hexdigest() for b in bodies}
        with store.engine.connect() as conn:
            methods = set(conn.execute(text(
                "SELECT pg_column_compression(body) FROM envelopes")).scalars())
        assert methods == {"lz4"}
    finally:
        store.close()


def test_no_command_prints_a_database_password(tmp_path: Any) -> None:
    """A maintainer command that cannot reach PostgreSQL names the store without its
    password (`serve`'s startup line is checked in test_replicas)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECSERVER_")}
    env["SPECSERVER_DATABASE_URL"] = "postgresql+psycopg://someone:hunter2@127.0.0.1:1/x"
    specserver = str(Path(sys.executable).with_name("specserver"))
    result = subprocess.run([specserver, "stats"], env=env, capture_output=True, text=True,
                            timeout=60, cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert "someone:***@127.0.0.1:1/x" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
