"""PostgreSQL going away and coming back: 503 with Retry-After, then recovery by itself.

The app reaches PostgreSQL through a loopback TCP proxy that can sever every connection
and refuse new ones, which is what a restarting PostgreSQL looks like to a client, without
disturbing the shared server (tests/reliability restarts the real cluster, marked slow).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support.backends import (
    TcpProxy,
    board_bodies,
    expected_rows,
    stored_counts,
    submission_id_of,
)
from tests.support.served import Served, error_of, settings_for

pytestmark = pytest.mark.postgres

# Generous: the bound on a wait is what is tested (no hang), not speed.
NO_HANG_S = 20.0


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[TcpProxy]:
    parts = urlsplit(postgres_url)
    forwarder = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    yield forwarder
    forwarder.close()


def _through(postgres_url: str, proxy: TcpProxy) -> str:
    parts = urlsplit(postgres_url)
    netloc = f"{parts.username}@127.0.0.1:{proxy.port}" if parts.username else (
        f"127.0.0.1:{proxy.port}")
    return urlunsplit(parts._replace(netloc=netloc))


def _timed(call: object) -> tuple[float, object]:
    started = time.monotonic()
    result = call()  # type: ignore[operator]
    return time.monotonic() - started, result


def test_outage_is_503_with_retry_after_then_recovers(
    tmp_path: Path, postgres_url: str, proxy: TcpProxy
) -> None:
    bodies = board_bodies(5, start=3000)
    settings = settings_for(tmp_path, database_url=_through(postgres_url, proxy))
    with Served(settings) as served:
        for body in bodies[:3]:
            assert served.post(body).status_code == 201
        proxy.cut()
        checks = {
            "post": lambda: served.post(bodies[3]),
            "healthz": lambda: served.get("/healthz"),
            "leaderboard": lambda: served.get("/v1/leaderboard"),
            "submission": lambda: served.get(f"/v1/submissions/{submission_id_of(bodies[0])}"),
        }
        for name, call in checks.items():
            took, response = _timed(call)
            assert took < NO_HANG_S, name
            assert response.status_code == 503, (name, response.text)  # type: ignore[attr-defined]
            assert int(response.headers["Retry-After"]) >= 1, name  # type: ignore[attr-defined]
            assert error_of(response)["code"] == "store_unavailable", name  # type: ignore[arg-type]
        proxy.restore()
        # Recovery without a restart: the refused submission goes in on a retry, the stored
        # ones are still recognised, reads answer again.
        assert served.post(bodies[3]).status_code == 201
        assert served.post(bodies[0]).status_code == 200
        assert served.get("/healthz").status_code == 200
        assert served.get("/v1/leaderboard").status_code == 200
        counts = stored_counts(served.store.engine, [submission_id_of(b) for b in bodies])
    for body in bodies[:4]:
        assert counts[submission_id_of(body)] == expected_rows(body)
    assert sum(counts[submission_id_of(bodies[4])].values()) == 0


def test_dropped_connections_are_replaced_without_an_error(
    tmp_path: Path, postgres_url: str, proxy: TcpProxy
) -> None:
    """Every open connection dies (a failover, PostgreSQL restarted between requests):
    the next requests reconnect by themselves and nobody sees a 503."""
    bodies = board_bodies(4, start=3100)
    settings = settings_for(tmp_path, database_url=_through(postgres_url, proxy))
    with Served(settings) as served:
        assert served.post(bodies[0]).status_code == 201
        assert served.get("/v1/leaderboard").status_code == 200
        proxy.cut()
        proxy.restore()
        assert served.post(bodies[1]).status_code == 201
        assert served.get("/v1/leaderboard").status_code == 200
        assert served.get("/healthz").status_code == 200
        proxy.cut()
        proxy.restore()
        statuses = [r.status_code for r in served.post_many(bodies[2:] + bodies[:1])]
        assert sorted(statuses) == [200, 201, 201]
        counts = stored_counts(served.store.engine, [submission_id_of(b) for b in bodies])
    for body in bodies:
        assert counts[submission_id_of(body)] == expected_rows(body)
