"""The public read API tests' store (16 submissions from 4 machines x 4 contributors and
one imported reference) and what those tests do to it; the fixtures are in conftest.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import FastAPI
from sqlalchemy import insert, update

from specschema.examples import example_submission
from specserver.board.leaderboard import ReadService
from specserver.http import public
from specserver.http.errors import install_error_handlers
from specserver.http.page import routes as page_routes
from specserver.settings import ServerSettings
from specserver.store import tables
from tests.conftest import READ_WAIT_S
from tests.support.boardfill import BASE_TIME, insert_submission, key
from tests.support.inprocess import InProcessClient

COUNT = 16  # 4 machines x 4 contributors, ollama-draft, 2 draft configs each


def app_client(store, settings: ServerSettings):  # type: ignore[no-untyped-def]
    app = FastAPI()
    app.state.settings = settings  # as create_app does: the pages read it too
    install_error_handlers(app)
    public.install(app, ReadService(store[0], wait_s=READ_WAIT_S))
    app.include_router(page_routes.router)  # the HTML pages read the same service
    try:
        with InProcessClient(app, lifespan=False) as test_client:
            yield test_client
    finally:
        app.state.export_files.clear()  # create_app's lifespan does this


def insert_one(store, seed: int = 4242) -> None:  # type: ignore[no-untyped-def]
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1",
                             created_at=datetime(2026, 11, 1, tzinfo=UTC))
    insert_submission(store[0], sub, key(77), received_at=BASE_TIME + timedelta(days=2))


def hide(engine, submission_id: str) -> None:  # type: ignore[no-untyped-def]
    """Hide a submission as the moderation code does: the row and its audit row."""
    with engine.begin() as conn:
        conn.execute(update(tables.submissions).where(
            tables.submissions.c.submission_id == submission_id).values(hidden=True))
        conn.execute(insert(tables.audit_log).values(
            audit_id="a1", at=datetime(2026, 11, 2), action="hide", target=submission_id,
            reason="test", actor="test"))
