"""Fixtures shared by every test package.

Board reads serve the last computed board and recompute it beside the reads
(board/leaderboard.py); most tests write and then read, and expect to see the write, so
``SPECSERVER_READ_WAIT_S`` lets a read wait for that recomputation (through the refresher,
as in production), and ``SPECSERVER_BOARD_REFRESH_S`` 0 lets it start at once (in
production a board is recomputed at most once a second). Tests of the never-waiting read
set the wait to 0; tests of the spacing set their own.

User state: the platform data folder is a temporary one for the session, for each module
and for each test (``_point_data_home``), so that no test, fixture or server it starts
writes a store, a log key or a snapshot into the user's (tests/test_state_folders.py).

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


_data_homes = itertools.count()
# The server's settings that name where it keeps state; unset, each is in the data folder.
STATE_VARIABLES = ("SPECSERVER_DATABASE_URL", "SPECSERVER_LOG_KEY_FILE",
                   "SPECSERVER_SNAPSHOT_DIR")


def _point_data_home(monkeypatch: pytest.MonkeyPatch, factory: pytest.TempPathFactory) -> None:
    """The platform data folder (``XDG_DATA_HOME``, read by platformdirs) in the session's
    temp folder: the server's default store, its log's key and its snapshots go there,
    never into the user's (``~/.local/share/specserver``), and so does anything a server
    started as a subprocess keeps. Only a path: no folder is made unless something writes."""
    monkeypatch.setenv("XDG_DATA_HOME", str(factory.getbasetemp() / "data-homes"
                                            / f"{next(_data_homes)}"))


# One data folder per scope: an app built by a module-scoped fixture exists before any
# test's own folder is set, and lives long enough for its snapshot timer (60 s after the
# start) to write; apps of two modules must not share one log key either (a key is bound
# to its origin, which varies with the port, and a log on another origin's key answers 500).
@pytest.fixture(scope="session", autouse=True)
def _session_data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        # A developer's own server settings name their real files: never the tests'.
        for variable in STATE_VARIABLES:
            monkeypatch.delenv(variable, raising=False)
        _point_data_home(monkeypatch, tmp_path_factory)
        yield


@pytest.fixture(scope="module", autouse=True)
def _module_data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _point_data_home(monkeypatch, tmp_path_factory)
        yield


@pytest.fixture(autouse=True)
def _test_data_home(monkeypatch: pytest.MonkeyPatch,
                    tmp_path_factory: pytest.TempPathFactory) -> None:
    _point_data_home(monkeypatch, tmp_path_factory)


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
