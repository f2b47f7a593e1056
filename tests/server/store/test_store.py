"""The store below the API: group commit, idempotency in the database, migrations, reads.

Parametrized over DuckDB (a tmp file) and PostgreSQL (a fresh schema; skipped when the
server is missing, except under CI=true).
"""

import base64
import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, insert, select, text

from specschema.envelope import verify_envelope
from specserver.ingest.checks import check_submission
from specserver.ingest.rows import submission_rows
from specserver.store import migrations, tables
from specserver.store.appenders import duckdb_append, is_conflict
from specserver.store.database import Store
from specserver.store.tables import INGEST_TABLES
from specserver.store.writer import GroupCommitWriter
from specserver.store.writes import Pacing, WriteRequest
from tests.support.postgres import STORES, store_url_for
from tests.support.signed import payload_dict, sign_dict, valid_body
from tests.support.stores import submit_checked

NOW = datetime.now(UTC)  # a fixed receipt time; the bodies themselves are created "now"


def checked(body: bytes) -> Any:
    # Checked against the clock of this moment: a long test session must not turn the
    # bodies' fresh created_at into "in the future" relative to the module's import time.
    return check_submission(body, now=datetime.now(UTC), max_age=timedelta(days=30),
                            max_future_skew=timedelta(minutes=5))


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_for(request.param, tmp_path, request)


@pytest.fixture
def store(store_url: str) -> Any:
    s = Store(store_url, group_commit_s=0.02)
    s.open()
    yield s
    s.close()


def count(s: Store, table: Any) -> int:
    with s.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def test_one_commit_for_many_concurrent_submissions(store: Store) -> None:
    bodies = [valid_body(seed=100 + i, key_seed=i % 3) for i in range(40)]
    futures = [submit_checked(store, checked(b), NOW) for b in bodies]
    outcomes = [f.result(30) for f in futures]
    assert {o.status for o in outcomes} == {"created"}
    assert count(store, tables.submissions) == 40
    assert count(store, tables.trials) == 40 * 15
    assert store.writer.batches < 40  # grouped, not one transaction each


def test_idempotency_lives_in_the_database(store: Store) -> None:
    body = valid_body(seed=150)
    first = submit_checked(store, checked(body), NOW).result(30)
    later = NOW + timedelta(seconds=5)
    again = submit_checked(store, checked(body), later).result(30)
    assert (first.status, again.status) == ("created", "duplicate")
    assert again.received_at.replace(tzinfo=None) == NOW.replace(tzinfo=None)  # the original
    data = payload_dict(150)
    data["note"] = "other bytes"
    conflict = submit_checked(store, checked(sign_dict(data)), NOW).result(30)
    assert conflict.status == "conflict"
    assert count(store, tables.submissions) == 1
    assert count(store, tables.envelopes) == 1


def test_a_refused_batch_is_retried_one_by_one(store: Store) -> None:
    stored = valid_body(seed=160)
    submit_checked(store, checked(stored), NOW).result(30)
    # In one batch: a duplicate of a stored id (the optimistic append fails) + new ones.
    futures = [submit_checked(store, checked(b), NOW)
               for b in [valid_body(seed=161), stored, valid_body(seed=162)]]
    assert [f.result(30).status for f in futures] == ["created", "duplicate", "created"]
    assert count(store, tables.submissions) == 3
    assert count(store, tables.trials) == 45


def test_a_batch_refused_for_a_stored_id_commits_its_new_submissions_together(
        tmp_path: Path) -> None:
    """Repeats of stored ids in a batch cost it one lookup, not a transaction per
    submission: the stored ids are answered from the lookup (same bytes 200, other bytes
    409) and the new ones are committed in one batch, their log entries in order."""
    s = Store(f"duckdb:///{tmp_path / 'repeats.duckdb'}", group_commit_s=5.0)
    s.open()
    try:
        stored = valid_body(seed=250)
        with s.arriving():
            first = submit_checked(s, checked(stored), NOW)
        assert first.result(5.0).status == "created"
        data = payload_dict(250)
        data["note"] = "other bytes"
        batches = s.writer.batches
        with s.arriving():  # one batch: the writer gathers until the last one is in
            futures = [submit_checked(s, checked(b), NOW) for b in [
                valid_body(seed=251), stored, valid_body(seed=252), sign_dict(data),
                valid_body(seed=253), stored]]
        outcomes = [f.result(5.0) for f in futures]
        assert [o.status for o in outcomes] == [
            "created", "duplicate", "created", "conflict", "created", "duplicate"]
        assert (s.writer.batches - batches, s.writer.refused_batches_split) == (1, 1)
        assert [o.log.index for o in outcomes if o.log is not None] == [1, 2, 3]
        assert outcomes[1].received_at.replace(tzinfo=None) == NOW.replace(tzinfo=None)
        assert count(s, tables.submissions) == 4
        assert count(s, tables.trials) == 60
        assert count(s, tables.log_entries) == 4
    finally:
        s.close()


def test_writes_through_the_writer_and_reads_by_id(store: Store) -> None:
    body = valid_body(seed=170)
    c = checked(body)
    submit_checked(store, c, NOW).result(30)
    store.write(lambda conn: conn.execute(tables.submissions.update().where(
        tables.submissions.c.submission_id == c.submission_id).values(hidden=True)))
    view = store.get_submission(c.submission_id)
    assert view is not None
    assert view.submission["hidden"] is True
    assert verify_envelope(json.loads(base64.b64decode(view.envelope["body"]))).key_id == (
        c.key_id)
    assert store.get_submission("00000000-0000-4000-8000-000000000000") is None
    with pytest.raises(ZeroDivisionError):
        store.write(lambda conn: 1 / 0)
    assert store.healthy()


def test_bans_are_cached_and_invalidated(store_url: str) -> None:
    s = Store(store_url, ban_cache_s=3600)
    s.open()
    try:
        assert not s.is_banned("k" * 64)
        s.write(lambda conn: conn.execute(insert(tables.bans).values(
            key_id="k" * 64, reason="r", banned_at=datetime(2026, 1, 1))))
        assert not s.is_banned("k" * 64)
        s.invalidate_bans()
        assert s.is_banned("k" * 64)
    finally:
        s.close()


def test_closing_drains_the_queue(store_url: str) -> None:
    s = Store(store_url, group_commit_s=0.05)
    s.open()
    futures = [submit_checked(s, checked(valid_body(seed=180 + i)), NOW) for i in range(10)]
    s.close()
    assert all(f.result(1).status == "created" for f in futures)
    s2 = Store(store_url)
    s2.open()
    try:
        assert count(s2, tables.submissions) == 10
        late = submit_checked(s2, checked(valid_body(seed=199)), NOW)
    finally:
        s2.close()
    assert late.result(5).status == "created"


def test_submit_after_close_is_unavailable(tmp_path: Path) -> None:
    from specserver.errors import Unavailable

    s = Store(f"duckdb:///{tmp_path / 's.duckdb'}")
    s.open()
    s.close()
    with pytest.raises(Unavailable):
        submit_checked(s, checked(valid_body(seed=1)), NOW).result(5)


# --- migrations ------------------------------------------------------------------------


def test_migrations_stamp_a_fresh_store_and_are_idempotent(store_url: str) -> None:
    engine = create_engine(store_url)
    try:
        assert migrations.migrate(engine) == migrations.LATEST
        assert migrations.migrate(engine) == migrations.LATEST
        with engine.connect() as conn:
            versions = conn.execute(select(tables.schema_version.c.version)).scalars().all()
        assert versions == [migrations.LATEST]
    finally:
        engine.dispose()


def test_forward_migrations_run_in_order_once(tmp_path: Path) -> None:
    engine = create_engine(f"duckdb:///{tmp_path / 'm.duckdb'}")
    applied: list[int] = []

    def add_column(conn: Any) -> None:
        applied.append(2)
        conn.execute(text("ALTER TABLE submissions ADD COLUMN extra_note VARCHAR"))

    try:
        migrations.migrate(engine)  # version 1
        nxt = migrations.LATEST + 1
        steps = migrations.MIGRATIONS + (migrations.Migration(nxt, "extra note", add_column),)
        assert migrations.migrate(engine, steps) == nxt
        assert migrations.migrate(engine, steps) == nxt
        assert applied == [2]
        with engine.connect() as conn:
            conn.execute(text("SELECT extra_note FROM submissions")).all()
        with pytest.raises(migrations.SchemaTooNew):
            migrations.migrate(engine)  # this server only knows up to LATEST
    finally:
        engine.dispose()


def test_a_store_without_version_table_is_migrated_from_zero(tmp_path: Path) -> None:
    engine = create_engine(f"duckdb:///{tmp_path / 'old.duckdb'}")
    try:
        wanted = [t for t in tables.metadata.sorted_tables if t.name != "schema_version"]
        tables.metadata.create_all(engine, tables=wanted)
        assert migrations.migrate(engine) == migrations.LATEST
        with engine.connect() as conn:
            assert migrations.current_version(conn) == migrations.LATEST
    finally:
        engine.dispose()


# --- rows and dialect pieces -------------------------------------------------------------


def test_rows_cover_every_not_null_column() -> None:
    rows = submission_rows(checked(valid_body(seed=5)), NOW)
    for table in INGEST_TABLES:
        names = [c.name for c in table.columns]
        for row in rows.rows[table.name]:
            assert len(row) == len(names)
            for column, value in zip(table.columns, row, strict=True):
                assert value is not None or column.nullable, (table.name, column.name)


def test_is_conflict_recognises_duckdb_constraint_errors(tmp_path: Path) -> None:
    engine = create_engine(f"duckdb:///{tmp_path / 'c.duckdb'}")
    try:
        migrations.migrate(engine)
        rows = submission_rows(checked(valid_body(seed=6)), NOW)
        with engine.connect() as conn:
            with conn.begin():
                duckdb_append(conn, tables.submissions, rows.rows["submissions"])
            with pytest.raises(Exception) as caught, conn.begin():
                duckdb_append(conn, tables.submissions, rows.rows["submissions"])
        assert is_conflict(caught.value)
        assert not is_conflict(RuntimeError("disk full"))
    finally:
        engine.dispose()


def test_writer_thread_resolves_from_other_threads(tmp_path: Path) -> None:
    engine = create_engine(f"duckdb:///{tmp_path / 'w.duckdb'}")
    migrations.migrate(engine)
    writer = GroupCommitWriter(engine, window_s=0.01)
    writer.start()
    results: list[str] = []

    def one(seed: int) -> None:
        from concurrent.futures import Future

        c = checked(valid_body(seed=seed))
        future: Future[Any] = Future()
        writer.submit(WriteRequest(c.submission_id, c.body_sha256, NOW,
                                   submission_rows(c, NOW), future))
        results.append(future.result(30).status)

    threads = [threading.Thread(target=one, args=(300 + i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.stop()
    engine.dispose()
    assert results == ["created"] * 8


def test_writer_commits_when_nothing_more_is_coming(tmp_path: Path) -> None:
    """With a 5 s gather window, a submission waits for the window unless the request side
    says nothing more is coming (``store.arriving`` left by the last request in progress)."""
    s = Store(f"duckdb:///{tmp_path / 'hint.duckdb'}", group_commit_s=5.0)
    s.open()
    try:
        with s.arriving():
            with s.arriving():
                first = submit_checked(s, checked(valid_body(seed=210)), NOW)
            second = submit_checked(s, checked(valid_body(seed=211)), NOW)
            threading.Event().wait(0.5)  # one request is still in progress: keep gathering
            assert not first.done()
        assert first.result(2.0).status == "created"  # well before the 5 s window
        assert second.result(2.0).status == "created"
        assert count(s, tables.submissions) == 2
    finally:
        s.close()


@pytest.fixture
def staged(tmp_path: Path) -> Any:
    """A DuckDB store whose writer gathers for up to 5 s unless told nothing more is coming,
    after one first submission: its memory_bytes (24 GiB) does not fit the INTEGER that
    staging first tries for BIGINT columns, so that batch was written the plain way, which
    widened the column for the connection's later batches."""
    s = Store(f"duckdb:///{tmp_path / 'staged.duckdb'}", group_commit_s=5.0)
    s.open()
    try:
        with s.arriving():
            first = submit_checked(s, checked(valid_body(seed=219)), NOW)
        assert first.result(5.0).status == "created"
        assert s.writer.staged_commits == 0
        yield s
    finally:
        s.close()


def test_a_gathering_batch_is_staged_but_invisible_until_its_commit(staged: Store) -> None:
    with staged.arriving():
        first = submit_checked(staged, checked(valid_body(seed=220)), NOW)
        threading.Event().wait(0.5)  # the writer has staged it while waiting for more
        assert staged.writer._staging is not None and staged.writer._staging.transaction is not None
        assert count(staged, tables.submissions) == 1  # appended, not committed
        assert count(staged, tables.trials) == 15
        assert not first.done()
        second = submit_checked(staged, checked(valid_body(seed=221)), NOW)
    assert [first.result(2.0).status, second.result(2.0).status] == ["created"] * 2
    assert staged.writer.staged_commits == 1
    assert count(staged, tables.submissions) == 3
    assert count(staged, tables.trials) == 45
    assert count(staged, tables.envelopes) == 3


def test_a_staged_batch_refused_at_its_commit_is_retried_one_by_one(staged: Store) -> None:
    stored = valid_body(seed=230)
    with staged.arriving():
        submit_checked(staged, checked(stored), NOW)
    new = valid_body(seed=231)
    with staged.arriving():
        futures = [submit_checked(staged, checked(new), NOW)]
        threading.Event().wait(0.3)  # staged; the duplicate of a stored id comes later
        futures += [submit_checked(staged, checked(b), NOW)
                    for b in [stored, valid_body(seed=232), new]]
    assert [f.result(5.0).status for f in futures] == [
        "created", "duplicate", "created", "duplicate"]
    assert count(staged, tables.submissions) == 4
    assert count(staged, tables.trials) == 60
    assert count(staged, tables.envelopes) == 4


def test_a_64_bit_value_is_staged_and_stored_exactly(staged: Store) -> None:
    """A value wider than 32 bits in a BIGINT column, staged after a batch of small ones,
    is stored exactly (the appenders keep the table's own column types)."""
    from concurrent.futures import Future

    long_output = 3 * 10**9  # more characters than an INTEGER holds
    column = [c.name for c in tables.trials.columns].index("output_chars")
    c = checked(valid_body(seed=240))
    rows = submission_rows(c, NOW)
    rows.rows["trials"] = [row[:column] + (long_output,) + row[column + 1:]
                           for row in rows.rows["trials"]]
    with staged.arriving():
        short = submit_checked(staged, checked(valid_body(seed=241)), NOW)
        threading.Event().wait(0.3)  # the short one is staged first
        future: Future[Any] = Future()
        staged.writer.submit(WriteRequest(c.submission_id, c.body_sha256, NOW, rows, future))
    assert [short.result(5.0).status, future.result(5.0).status] == ["created"] * 2
    with staged.engine.connect() as conn:
        stored = conn.execute(select(tables.trials.c.output_chars).where(
            tables.trials.c.submission_id == c.submission_id)).scalars().all()
    assert stored == [long_output] * 15
    assert count(staged, tables.submissions) == 3


def _paced_writer(tmp_path: Path, window_s: float) -> tuple[Any, GroupCommitWriter]:
    """A DuckDB writer whose pacing interval is its longest wait (``max_window_s``: at least
    100 ms, else ``window_s``) whatever its commits cost."""
    engine = create_engine(f"duckdb:///{tmp_path / 'paced.duckdb'}")
    migrations.migrate(engine)
    writer = GroupCommitWriter(engine, window_s=window_s, pace_per_commit=1e9)
    writer.start()
    return engine, writer


def _send(writer: GroupCommitWriter, seed: int) -> Any:
    """One submission, then the request side's hint that nothing more is coming."""
    from concurrent.futures import Future

    c = checked(valid_body(seed=seed))
    future: Future[Any] = Future()
    writer.submit(WriteRequest(c.submission_id, c.body_sha256, NOW, submission_rows(c, NOW),
                               future))
    writer.nothing_more_coming()
    return future


def test_submissions_within_the_pacing_interval_share_one_commit(tmp_path: Path) -> None:
    """After a commit the next one waits for the pacing interval (30 s here), hint or not:
    what arrives meanwhile is committed together; stop() does not wait for it."""
    engine, writer = _paced_writer(tmp_path, window_s=30.0)
    try:
        first = _send(writer, 400)
        # Nothing committed before: the first one need not wait (else: 30 s).
        assert first.result(10).status == "created"
        assert (writer.batches, writer.paced) == (1, 0)
        later = []
        for seed in (401, 402, 403):
            later.append(_send(writer, seed))
            # Without pacing, the hint would have had this one committed alone by now.
            threading.Event().wait(0.2)
    finally:
        writer.stop()  # drains at once: the interval is not waited out
        engine.dispose()
    assert [f.result(0).status for f in later] == ["created"] * 3
    assert (writer.batches, writer.paced, writer.committed) == (2, 1, 4)


def test_a_lone_submission_after_an_idle_spell_is_committed_at_once(tmp_path: Path) -> None:
    engine, writer = _paced_writer(tmp_path, window_s=0.004)  # interval: 100 ms
    try:
        assert _send(writer, 410).result(10).status == "created"
        threading.Event().wait(1.0)  # idle for longer than the interval
        assert _send(writer, 411).result(10).status == "created"
        # Its gather began after the interval: nothing made its commit wait.
        assert (writer.batches, writer.paced) == (2, 0)
    finally:
        writer.stop()
        engine.dispose()


def test_pacing_follows_the_last_commit_cpu_up_to_its_cap() -> None:
    pacing = Pacing(per_commit=4.0, cap_s=0.1)
    assert pacing.next_at == float("-inf")  # the first commit never waits
    pacing.committed(ended=50.0, cpu_s=0.01)
    assert pacing.next_at == pytest.approx(50.04)  # the commit had 1/5 of the time
    pacing.committed(ended=60.0, cpu_s=0.5)
    assert pacing.next_at == pytest.approx(60.1)  # never longer than the cap
