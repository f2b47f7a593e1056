"""The page's cheap reads give what their plain definitions give, on DuckDB and PostgreSQL.

- A submission list read within a lower bound on ``received_at`` (``since``) is the list
  read without one, whatever the bound, the filters, the page size or the cursor: rows
  hidden or banned since the bound was taken, fewer rows than a page, receipts tied or
  stored out of order.
- ``most_common_values`` (every menu in one statement) is, menu by menu, the statement
  per menu it replaced (``reference_menu``), at cuts inside ties too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, func, insert, select, update

from specschema.envelope import key_id_of
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.store import dimensions, queries, tables
from tests.support.boardfill import BASE_TIME, insert_submission, key, new_engine
from tests.support.postgres import STORES, private_schema_url

PROTOCOLS = ["ollama-draft", "hardnumbers-m2", "llamacpp-draft", "lmstudio-draft"]
WIRE_V2 = {"llamacpp-draft", "lmstudio-draft"}  # their mechanisms need wire v2
MENU_NAMES = ["protocol", "target", "chip", "memory_gb", "ollama_version", "os", "engine",
              "engine_version"]
COUNT = 36


def _fill(engine: Engine) -> list[str]:
    """``COUNT`` submissions: four protocols, three engines, five chips with uneven counts,
    receipts tied and stored out of order, some hidden, incomplete or imported."""
    ids = []
    for i in range(COUNT):
        machine = {**EXAMPLE_MACHINES[i % len(EXAMPLE_MACHINES)], "chip": f"Chip {i % 7 % 5}"}
        protocol = PROTOCOLS[i % len(PROTOCOLS)]
        sub = example_submission(protocol, seed=i, machine=machine,
                                 engine_version=f"0.3{i % 3}.0", complete=i % 11 != 5,
                                 created_at=datetime(2026, 11, 1, tzinfo=UTC),
                                 schema_version=2 if protocol in WIRE_V2 else 1)
        # Three engines (the examples run on Ollama): the Ollama version menu skips the rest.
        name = ["ollama", "llama-server", "lmstudio"][i % 3]
        sub = sub.model_copy(update={"engine": sub.engine.model_copy(update={"name": name})})
        signer = None if i % 10 == 7 else key(i % 6)
        ids.append(insert_submission(engine, sub, signer, hidden=i % 9 == 4,
                                     received_at=BASE_TIME + timedelta(seconds=i * 7 % 13)))
    return ids


@contextlib.contextmanager
def _store(kind: str, folder: Path) -> Iterator[Engine]:
    """A store of ``kind`` ("duckdb" or "postgres") filled by ``_fill``, a key banned."""
    with contextlib.ExitStack() as stack:
        if kind == "postgres":
            made = create_engine(stack.enter_context(private_schema_url()))
            tables.metadata.create_all(made)
        else:
            made = new_engine(folder / "page.duckdb")
        stack.callback(made.dispose)
        _fill(made)
        with made.begin() as conn:  # a banned key: its rows are not visible
            conn.execute(insert(tables.bans).values(key_id=_key_id(3), reason="test",
                                                    banned_at=BASE_TIME))
        yield made


@pytest.fixture(params=STORES, scope="module")
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Engine]:
    """One filled store for the tests that only read."""
    with _store(request.param, tmp_path_factory.mktemp("page")) as made:
        yield made


@pytest.fixture(params=STORES)
def own_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A filled store of the test's own, to write to."""
    with _store(request.param, tmp_path) as made:
        yield made


def _key_id(index: int) -> str:
    return key_id_of(bytes(key(index).verify_key))


def _bounds(conn: Connection) -> list[datetime | None]:
    """Every receipt in the store, a moment before and after each end, and no bound."""
    stamps = sorted(set(conn.execute(select(tables.submissions.c.received_at)).scalars()))
    second = timedelta(seconds=1)
    return [None, stamps[0] - second, *stamps, stamps[-1] + second]


FILTERS = [
    queries.Filters(),
    queries.Filters.of({"chip": "Chip 1"}),
    queries.Filters.of({"protocol": "ollama-draft"}),
    queries.Filters.of({"engine": "ollama", "os": "macOS"}),
    queries.Filters.of({"chip": "Chip 9"}),  # nothing matches
]


def _all_pages(conn: Connection, filters: queries.Filters, limit: int,
               since: datetime | None) -> list[tuple[list[dict[str, Any]], str | None]]:
    pages, cursor = [], None
    while True:
        items, cursor = queries.list_submissions(conn, filters, cursor=cursor, limit=limit,
                                                 since=since)
        pages.append((items, cursor))
        if cursor is None:
            return pages


@pytest.mark.parametrize("filters", FILTERS, ids=str)
def test_a_bounded_list_is_the_unbounded_list(engine: Engine, filters: queries.Filters
                                              ) -> None:
    with engine.connect() as conn:
        for limit in (1, 3, 15, 100):
            expected = _all_pages(conn, filters, limit, None)
            for since in _bounds(conn):
                assert _all_pages(conn, filters, limit, since) == expected, (limit, since)
                items, _ = queries.recent_submissions(conn, filters, limit, since)
                assert items == expected[0][0], (limit, since)


def test_the_bound_a_recent_list_leaves_finds_it_again_after_hides_and_bans(
        own_engine: Engine) -> None:
    """Each read passes on the bound the last one left (as the page does) while rows are
    hidden, banned and added between reads: every list is the unbounded one."""
    engine, filters, limit = own_engine, queries.Filters(), 4
    sub = tables.submissions
    with engine.connect() as conn:
        items, since = queries.recent_submissions(conn, filters, limit)
        assert since is not None
        steps = [
            update(sub).where(sub.c.submission_id == items[0]["submission_id"])
            .values(hidden=True),
            update(sub).where(sub.c.submission_id == items[-1]["submission_id"])
            .values(hidden=True),
            insert(tables.bans).values(key_id=items[1]["key_id"] or "none", reason="t",
                                       banned_at=BASE_TIME),
        ]
        for step in steps:
            conn.execute(step)
            expected, _ = queries.list_submissions(conn, filters, limit=limit)
            items, since = queries.recent_submissions(conn, filters, limit, since)
            assert items == expected
        # A newer receipt than any: the list moves on, the bound too.
        added = example_submission("ollama-draft", seed=999, machine=EXAMPLE_MACHINES[0],
                                   created_at=datetime(2026, 11, 1, tzinfo=UTC))
        conn.commit()
        sid = insert_submission(engine, added, key(99), received_at=BASE_TIME + timedelta(days=1))
        expected, _ = queries.list_submissions(conn, filters, limit=limit)
        items, newer = queries.recent_submissions(conn, filters, limit, since)
        assert items == expected and items[0]["submission_id"] == sid
        assert since is not None and newer is not None and newer >= since
        conn.rollback()


def reference_menu(conn: Connection, name: str, most_common: int) -> list[Any]:
    """The definition before one statement read every menu: a statement per menu."""
    (col,) = dimensions.filter_columns(name, None)
    top = (select(col.label("value")).where(queries.visible_clause(), col.is_not(None))
           .group_by(col).order_by(func.count().desc(), col).limit(most_common).subquery())
    return [r[0] for r in conn.execute(select(top.c.value).order_by(top.c.value))]


@pytest.mark.parametrize("cut", [1, 2, 3, 4, 100])
def test_every_menu_in_one_statement_is_each_menu_alone(engine: Engine, cut: int) -> None:
    with engine.connect() as conn:
        menus = queries.most_common_values(conn, MENU_NAMES, cut)
        expected = {name: reference_menu(conn, name, cut) for name in MENU_NAMES}
    assert menus == expected
    # the control: menus cut inside what the store holds (five chips, three engines)
    assert len(expected["chip"]) == min(cut, 5) and len(expected["engine"]) == min(cut, 3)
