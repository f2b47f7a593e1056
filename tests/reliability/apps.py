"""The app under test: settings for a tmp store, on DuckDB or a private PostgreSQL schema."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from specserver.http.app import create_app
from specserver.settings import ServerSettings
from tests.reliability.hostile import BODY_LIMIT
from tests.support.postgres import STORES, private_schema_url

__all__ = ["STORES", "app_on", "make_settings"]  # STORES: the stores app_on takes


def make_settings(tmp: Path, **overrides: Any) -> ServerSettings:
    """A DuckDB file in ``tmp``, rate limits off, bans not cached (tests turn them on);
    a POST takes one token of a limit a test turns on, whatever its checks cost (the
    check charge is turned on by the tests of it)."""
    values: dict[str, Any] = {
        "database_url": str(tmp / "store.duckdb"),
        "log_key_file": str(tmp / "log-key"),  # bound to its origin: never the user's
        "max_body_bytes": BODY_LIMIT,
        "rate_key_per_minute": 0,
        "rate_addr_per_minute": 0,
        "rate_reject_per_minute": 0,
        "rate_check_ms_per_token": 0,
        "ban_cache_s": 0,
        "public_base_url": "http://testserver",
    }
    values.update(overrides)
    return ServerSettings(**values)


@contextlib.contextmanager
def app_on(store: str, tmp: Path, *, clock: Callable[[], datetime] | None = None,
           **overrides: Any) -> Iterator[Any]:
    """An app on ``store`` ("duckdb" or "postgres"); not started (use InProcessClient).
    ``clock`` stamps receipts (tests/support/clock.py); the wall clock by default."""
    with contextlib.ExitStack() as stack:
        if store == "postgres":
            overrides["database_url"] = stack.enter_context(private_schema_url())
        yield create_app(make_settings(tmp, **overrides), clock=clock)
