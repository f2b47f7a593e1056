"""What one computation of the page's data leaves for the next (http/page/data.py).

- The filter menus lag new submissions for at most ``page_menu_reuse_s`` and never a
  moderation action.
- The page's ETag names the menus' data version when they lag: two servers on one store at
  one data version, one with lagging menus and one without, serve two bodies under two
  ETags, and neither answers 304 to the other's.
- The recent list read within the bound the last computation left is the plain list.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine

from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.board import ReadService
from specserver.http.errors import install_error_handlers
from specserver.http.page import routes as page_routes
from specserver.http.page.data import PageReuse, page_data, page_version
from specserver.http.public import install
from specserver.settings import ServerSettings
from specserver.store import moderation, queries
from tests.conftest import READ_WAIT_S
from tests.support.boardfill import BASE_TIME, fill, insert_submission, key, new_engine
from tests.support.inprocess import InProcessClient

NEW_CHIP = "Apple M9 Ultra"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = new_engine(tmp_path / "page.duckdb")
    fill(made, 8)
    yield made
    made.dispose()


def _add_new_chip(engine: Engine, seed: int = 900) -> str:
    """A submission on a chip no other has (no audit row: not a moderation action)."""
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1",
                             machine={**EXAMPLE_MACHINES[0], "chip": NEW_CHIP},
                             counters_seen=True, created_at=datetime(2026, 11, 1, tzinfo=UTC))
    return insert_submission(engine, sub, key(seed), received_at=BASE_TIME.replace(day=2))


def _version(engine: Engine) -> str:
    with engine.connect() as conn:
        return queries.data_version(conn)


def test_menus_lag_new_submissions_for_at_most_the_reuse_time(engine: Engine) -> None:
    now = [1000.0]
    reuse = PageReuse(60.0, clock=lambda: now[0])
    with engine.connect() as conn:
        first = queries.data_version(conn)
        assert reuse.menus(conn, first, 100)[0] == first
    _add_new_chip(engine)
    with engine.connect() as conn:
        later = queries.data_version(conn)
        assert later != first
        held_version, menus = reuse.menus(conn, later, 100)
        assert held_version == first and NEW_CHIP not in menus["chip"]  # reused
        now[0] += 60.0
        held_version, menus = reuse.menus(conn, later, 100)
        assert held_version == later and NEW_CHIP in menus["chip"]  # read again
    assert reuse.menu_reads == 2


@pytest.mark.parametrize("reuse_s", [60.0, 0.0])
def test_a_moderation_action_is_never_late_in_the_menus(engine: Engine, reuse_s: float
                                                        ) -> None:
    reuse = PageReuse(reuse_s)
    sid = _add_new_chip(engine)
    with engine.connect() as conn:
        version = queries.data_version(conn)
        assert NEW_CHIP in reuse.menus(conn, version, 100)[1]["chip"]
    with engine.begin() as conn:
        moderation.hide(conn, sid, "a name in the chip", "test")
    with engine.connect() as conn:
        hidden = queries.data_version(conn)
        held_version, menus = reuse.menus(conn, hidden, 100)
    assert held_version == hidden and NEW_CHIP not in menus["chip"]
    assert reuse.menu_reads == 2


def test_the_recent_list_within_its_bound_is_the_plain_list(engine: Engine) -> None:
    reuse = PageReuse(60.0)
    with engine.connect() as conn:
        assert reuse.recent(conn, queries.Filters(), 3) == queries.list_submissions(
            conn, queries.Filters(), limit=3)[0]
    added = _add_new_chip(engine)
    with engine.connect() as conn:
        recent = reuse.recent(conn, queries.Filters(), 3)
        assert recent == queries.list_submissions(conn, queries.Filters(), limit=3)[0]
        assert recent[0]["submission_id"] == added


def _app(engine: Engine, reuse_s: float) -> FastAPI:
    app = FastAPI()
    app.state.settings = ServerSettings(page_menu_reuse_s=reuse_s)
    install_error_handlers(app)
    install(app, ReadService(engine, wait_s=READ_WAIT_S))  # reads wait for recomputations
    app.include_router(page_routes.router)
    return app


def _chip_menu(page: str) -> list[str]:
    menu = re.search(r'<select name="chip">(.*?)</select>', page, re.S)
    assert menu is not None
    return re.findall(r'<option value="([^"]*)"', menu.group(1))


def test_one_etag_is_one_body_when_menus_lag(engine: Engine) -> None:
    """Two servers on one store: one reads its menus before a new chip arrives and keeps
    them, the other reads them after. At one data version their pages differ, so their
    ETags must; and each still answers 304 to its own ETag."""
    with InProcessClient(_app(engine, 60.0)) as lagging:
        before = lagging.get("/")
        assert before.status_code == 200 and NEW_CHIP not in _chip_menu(before.text)
        _add_new_chip(engine)
        late = lagging.get("/")
        with InProcessClient(_app(engine, 60.0)) as fresh:
            current = fresh.get("/")
            assert NEW_CHIP not in _chip_menu(late.text)  # the menus lag the board...
            assert NEW_CHIP in late.text  # ...which shows the new chip already
            assert NEW_CHIP in _chip_menu(current.text)
            assert late.headers["etag"] != current.headers["etag"]
            for client, response in ((lagging, late), (fresh, current)):
                mine = client.get("/", headers={"If-None-Match": response.headers["etag"]})
                assert mine.status_code == 304
            theirs = lagging.get("/", headers={"If-None-Match": current.headers["etag"]})
            assert theirs.status_code == 200 and theirs.content == late.content
    assert before.headers["etag"] != late.headers["etag"]


def test_page_data_reads_every_part_from_one_state(engine: Engine) -> None:
    """The page's data at one version: the menus read there too when nothing is held."""
    reads, reuse = ReadService(engine), PageReuse(60.0)
    version = _version(engine)
    with engine.connect() as conn:
        data = page_data(reads, reuse, conn, queries.data_version(conn), queries.Filters(), 100)
    assert data.menus_version == version and len(data.recent) == 8
    assert page_version(version, data) == version


def test_a_machines_forecast_is_kept_on_the_menus_terms_and_labels_the_page(
        engine: Engine) -> None:
    """The first screen's forecast costs as much as the rest of the page: it is computed
    once per chosen machine and kept like the menus (never past a moderation action), and
    a page whose forecast lags names the forecast's version."""
    now = [1000.0]
    reads, reuse = ReadService(engine), PageReuse(60.0, clock=lambda: now[0])
    asked: list[tuple[str, ...]] = []

    def forecaster(conn: Any, engines: Any) -> dict[str, Any]:
        asked.append(tuple(engines))
        return {name: f"forecast {len(asked)}" for name in engines}

    machine = queries.Filters.of({"chip": "Apple M2", "target": "qwen3.5:9b-mtp"})

    def data() -> tuple[str, Any]:
        with engine.connect() as conn:
            version = queries.data_version(conn)
            return version, page_data(reads, reuse, conn, version, machine, 100, forecaster)

    first_version, first = data()
    assert first.forecasts == {"ollama": "forecast 1"} and asked == [("ollama",)]
    assert page_version(first_version, first) == first_version
    _add_new_chip(engine)
    later_version, later = data()
    assert later.forecasts == first.forecasts and len(asked) == 1  # kept
    assert later.forecasts_version == first_version
    assert page_version(later_version, later).endswith(f" forecasts {first_version}")
    now[0] += 60.0
    _, again = data()
    assert again.forecasts == {"ollama": "forecast 2"}  # computed again once too old
    with engine.connect() as conn:
        page_data(reads, reuse, conn, queries.data_version(conn), queries.Filters(), 100,
                  forecaster)
    assert len(asked) == 2  # no machine chosen: no forecast
    with engine.begin() as conn:
        moderation.hide(conn, _add_new_chip(engine, seed=901), "a test", "test")
    _, moderated = data()
    assert moderated.forecasts == {"ollama": "forecast 3"}  # a moderation action: at once
    assert reuse.forecast_reads == 3
