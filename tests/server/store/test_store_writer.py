"""DuckDB's kept appenders store exactly what the plain appender stores.

``DuckDBAppenders`` keeps one appender per table for the writer's connection. The
definition is ``duckdb_append`` (one plain appender per call); every stored value, with its
type, must be the same, whatever mix of small, large, negative and missing integers the
batches bring, in any order, and a failed append leaves nothing buffered.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import BigInteger, Connection, Engine, Table, create_engine, select

from specschema.examples import example_submission
from specschema.summary import summarize
from specserver.ingest.checks import Checked
from specserver.ingest.rows import submission_rows
from specserver.store import migrations, tables
from specserver.store.appenders import DuckDBAppenders, duckdb_append

BIGINT_LIMIT = 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
TRIALS_BIGINT = [i for i, c in enumerate(tables.trials.columns) if isinstance(c.type, BigInteger)]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path: Path = tmp_path_factory.mktemp("appenders") / "a.duckdb"
    engine = create_engine(f"duckdb:///{path}")
    migrations.migrate(engine)
    yield engine
    engine.dispose()


def trial_rows(seed: int) -> list[tuple[Any, ...]]:
    sub = example_submission(seed=seed)
    checked = Checked(submission=sub, submission_id=str(sub.submission_id), key_id="k",
                      body=b"b", body_sha256="0" * 64, summaries=summarize(sub))
    return submission_rows(checked, datetime.now(UTC)).rows["trials"]


def with_values(rows: list[tuple[Any, ...]], sid: str, values: list[int | None]
                ) -> list[tuple[Any, ...]]:
    """``rows`` under a new submission id, the BIGINT columns filled from ``values``."""
    out = []
    pool = iter(values * (len(rows) * len(TRIALS_BIGINT) // max(len(values), 1) + 1))
    for row in rows:
        cells = list(row)
        cells[0] = sid
        for i in TRIALS_BIGINT:
            value = next(pool)
            cells[i] = value if value is not None or tables.trials.columns[i].nullable else 0
        out.append(tuple(cells))
    return out


def stored(conn: Connection, table: Table, sid: str) -> list[list[tuple[type, str]]]:
    found = conn.execute(select(table).where(table.c.submission_id == sid)
                         .order_by(table.c.config_name, table.c.trial_index)).all()
    conn.rollback()  # end the read's transaction
    return [[(type(v), repr(v)) for v in row[1:]] for row in found]


def assert_same_as_plain_appender(engine: Engine, appenders: DuckDBAppenders,
                                  base: list[tuple[Any, ...]],
                                  batches: list[list[int | None]]) -> None:
    """Each batch of values appended both ways, one transaction each: same stored rows."""
    with engine.connect() as conn:
        for values in batches:
            ours, plain = str(uuid.uuid4()), str(uuid.uuid4())
            with conn.begin():
                appenders(conn, tables.trials, with_values(base, ours, values))
                duckdb_append(conn, tables.trials, with_values(base, plain, values))
            assert stored(conn, tables.trials, ours) == stored(conn, tables.trials, plain)
            assert stored(conn, tables.trials, ours)


def test_small_big_and_missing_integers_store_as_the_plain_appender(engine: Engine) -> None:
    base = trial_rows(1)
    appenders = DuckDBAppenders()
    batches = [
        [1, 2, None, 0],                         # all narrow
        [INT32_MAX, INT32_MIN, None],            # the edges still fit
        [INT32_MAX + 1, 5, INT32_MIN - 1, None],  # two columns at least widen
        [3, 4, None],                            # narrow values into widened columns
        [BIGINT_LIMIT, -BIGINT_LIMIT - 1, 2**53 - 1],
    ]
    assert_same_as_plain_appender(engine, appenders, base, batches)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.none() | st.integers(-BIGINT_LIMIT - 1, BIGINT_LIMIT)
                         | st.integers(INT32_MIN - 3, INT32_MIN + 3)
                         | st.integers(INT32_MAX - 3, INT32_MAX + 3),
                         min_size=1, max_size=30), min_size=1, max_size=4))
def test_any_batches_store_as_the_plain_appender(engine: Engine,
                                                 batches: list[list[int | None]]) -> None:
    base = trial_rows(2)
    appenders = DuckDBAppenders()
    assert_same_as_plain_appender(engine, appenders, base, batches)


def test_a_value_no_column_takes_still_fails_and_leaves_nothing_buffered(engine: Engine) -> None:
    base = trial_rows(3)
    appenders = DuckDBAppenders()
    bad_sid, good_sid = str(uuid.uuid4()), str(uuid.uuid4())
    bad = with_values(base, bad_sid, [1])
    bad[1] = bad[1][:TRIALS_BIGINT[0]] + ("not a number",) + bad[1][TRIALS_BIGINT[0] + 1:]
    with engine.connect() as conn:
        with pytest.raises(duckdb.ConversionException), conn.begin():
            appenders(conn, tables.trials, bad)
        with conn.begin():
            appenders(conn, tables.trials, with_values(base, good_sid, [7]))
        assert stored(conn, tables.trials, bad_sid) == []
        assert len(stored(conn, tables.trials, good_sid)) == len(base)


def test_every_ingest_table_through_the_kept_appenders(engine: Engine) -> None:
    sub = example_submission(seed=4)
    checked = Checked(submission=sub, submission_id=str(sub.submission_id), key_id="k",
                      body=b"\x00raw\xff", body_sha256="0" * 64, summaries=summarize(sub))
    rows = submission_rows(checked, datetime.now(UTC))
    appenders = DuckDBAppenders()
    with engine.connect() as conn:
        with conn.begin():
            for table_name, table_rows in rows.rows.items():
                appenders(conn, getattr(tables, table_name), table_rows)
        for table_name, table_rows in rows.rows.items():
            table = getattr(tables, table_name)
            back = conn.execute(select(table).where(
                table.c.submission_id == checked.submission_id)).all()
            conn.rollback()
            assert sorted(tuple(r) for r in back) == sorted(table_rows), table_name
