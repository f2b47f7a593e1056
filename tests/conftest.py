"""Fixtures shared by every test package.

Board reads serve the last computed board and recompute it beside the reads
(board/leaderboard.py); most tests write and then read, and expect to see the write, so
``SPECSERVER_READ_WAIT_S`` lets a read wait for that recomputation (through the refresher,
as in production), and ``SPECSERVER_BOARD_REFRESH_S`` 0 lets it start at once (in
production a board is recomputed at most once a second). Tests of the never-waiting read
set the wait to 0; tests of the spacing set their own.

PostgreSQL: ``postgres_url`` gives each test its own schema (tests/support/postgres.py:
skipped without a server, failed instead under CI=true).

Property tests try fewer examples outside the full tier (tests/support/tiers.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.support import tiers

READ_WAIT_S = 30.0


def pytest_configure(config: pytest.Config) -> None:
    # Before collection imports any test module: ``@settings`` reads the profile then. A
    # profile named on the command line (--hypothesis-profile) is left to Hypothesis.
    if config.getoption("hypothesis_profile", None) is None:
        try:
            tiers.load_profile()
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> str:
    return (f"hypothesis profile: {settings.get_current_profile_name()} "
            f"({tiers.TIER_VARIABLE}=full for the full tier's example counts)")


_log_keys = itertools.count()


@pytest.fixture(autouse=True)
def _own_log_key(monkeypatch: pytest.MonkeyPatch,
                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test's servers sign their log with a key of their own, never the one in the
    user's data folder (a key is bound to its origin, which varies with the port; the
    checkpoint timer reads it in any app that lives a few seconds). Only a path: no file
    or folder is made unless a server signs."""
    path = tmp_path_factory.getbasetemp() / "log-keys" / f"{next(_log_keys)}"
    monkeypatch.setenv("SPECSERVER_LOG_KEY_FILE", str(path))


@pytest.fixture(autouse=True)
def _reads_wait_for_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECSERVER_READ_WAIT_S", str(READ_WAIT_S))
    monkeypatch.setenv("SPECSERVER_BOARD_REFRESH_S", "0")


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A SQLAlchemy URL for a fresh, empty PostgreSQL schema, dropped afterwards."""
    # Imported here: psycopg is the server's dependency, and the schema and client tests
    # must still collect without it.
    from tests.support.postgres import private_schema_url

    with private_schema_url() as url:
        yield url
