"""The app under test with its store, served in-process: ``Served`` and its settings.

``Served`` is a fixture bundle, not a client: it builds the app from settings (a DuckDB
file in tmp, rate limits off), runs it through the one in-process client
(``tests.support.inprocess``) with its lifespan (store opened: migrations, the writer
thread), and adds what ingestion tests ask of it: POST a body to /v1/submissions (whole,
streamed, or many at once), the store, and its row counts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from sqlalchemy import func, select

from specserver.http.app import create_app
from specserver.settings import ServerSettings
from specserver.store import tables
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
PEER = ("203.0.113.5", 40000)

T = TypeVar("T")


def settings_for(tmp: Path, **overrides: Any) -> ServerSettings:
    """Rate limits off; a limit a test turns on takes one token a POST, whatever its
    checks cost on a loaded machine (the check charge is turned on by its own tests). The
    log's key in ``tmp``: a key is bound to its origin, and an app made by a module-scoped
    fixture, before the per-test key path is set, would read the user's."""
    values: dict[str, Any] = {
        "database_url": str(tmp / "store.duckdb"),
        "log_key_file": str(tmp / "log-key"),
        "rate_key_per_minute": 0,
        "rate_addr_per_minute": 0,
        "rate_reject_per_minute": 0,
        "rate_check_ms_per_token": 0,
        "ban_cache_s": 0,
        "public_base_url": "http://testserver",
        "group_commit_ms": 2,
    }
    values.update(overrides)
    return ServerSettings(**values)


class Served:
    """The app with its lifespan running, for synchronous tests."""

    def __init__(self, settings: ServerSettings, **app_kwargs: Any) -> None:
        self.settings = settings
        self.app = create_app(settings, **app_kwargs)
        # An app error answers 500 here, as it would to a real client.
        self.client = InProcessClient(self.app, peer=PEER, raise_app_exceptions=False)

    @property
    def store(self) -> Any:
        return self.app.state.store

    def __enter__(self) -> Served:
        self.client.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.__exit__(*exc)

    def run(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` on the app's event loop."""
        return self.client.run(awaitable)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.client.request(method, url, **kwargs)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.client.get(url, **kwargs)

    def post(self, body: bytes, **kwargs: Any) -> httpx.Response:
        return self.client.post(URL, content=body, **kwargs)

    def post_stream(self, parts: Iterable[bytes], delay: float = 0.0,
                    **kwargs: Any) -> httpx.Response:
        return self.client.post(URL, stream=parts, delay=delay, **kwargs)

    def post_many(self, bodies: list[bytes]) -> list[httpx.Response]:
        return self.client.post_all(URL, bodies)

    def counts(self) -> dict[str, int]:
        with self.store.engine.connect() as conn:
            return {
                t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                # the migrations' own rows (the schema version, the board clock's one row)
                for t in tables.metadata.sorted_tables
                if t.name not in ("schema_version", "board_clock")
            }


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The one error shape, checked."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error
