"""PostgreSQL is restarted while a server on it takes submissions.

The server runs on a private schema of the shared PostgreSQL (database ``test``). Eight
client threads submit and retry like the real client (5xx, 429 and connection errors,
honouring Retry-After capped at 2 s). Once some submissions are in, the test restarts the
cluster with ``pg_ctlcluster ... restart`` (a real outage of a second or two: other test
runs on this PostgreSQL see it too, hence the ``slow`` marker). Expected: 503 with
Retry-After during the outage, never another 5xx, the server process stays up and
recovers by itself, and every acknowledged submission is stored once, complete.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability.load import drive_until_acked, make_items
from tests.reliability.servers import ServerProcess
from tests.reliability.storecount import audit_url
from tests.support.postgres import private_schema_url

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

RESTART_AFTER_ACKS = 60


@pytest.fixture
def restart_safe_postgres_url() -> Iterator[str]:
    """The restart kills every open connection: this schema holds none while in use."""
    with private_schema_url() as url:
        yield url


def _cluster_version() -> str:
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions or shutil.which("pg_ctlcluster") is None:
        pytest.skip("needs a local Debian PostgreSQL cluster (pg_ctlcluster)")
    return versions[-1]


def _restart(version: str) -> float:
    started = time.monotonic()
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
                   check=True, capture_output=True, timeout=60)
    return time.monotonic() - started


def test_postgres_restart_mid_load(tmp_path: Path, restart_safe_postgres_url: str) -> None:
    postgres_url = restart_safe_postgres_url
    version = _cluster_version()
    server = ServerProcess(postgres_url, tmp_path)
    items = make_items(range(70_000, 70_300))
    restarted = threading.Event()
    outage: dict[str, float] = {}
    restarts: list[threading.Thread] = []

    def on_ack(count: int) -> None:
        if count >= RESTART_AFTER_ACKS and not restarted.is_set():
            restarted.set()
            restarts.append(threading.Thread(target=lambda: outage.update(
                took=_restart(version), at=time.monotonic())))
            restarts[0].start()

    try:
        server.start()
        t0 = time.monotonic()
        result = drive_until_acked(server.url, items, concurrency=8, on_ack=on_ack)
        elapsed = time.monotonic() - t0
        # the load can end before the restart does (a fast machine sent all 300 in 4.6 s):
        # the server is checked after it, not while it is still under way
        for thread in restarts:
            thread.join(timeout=90)
        alive = server.alive()
        health = httpx.get(f"{server.url}/healthz", timeout=5).status_code
    finally:
        server.stop()
    audit = audit_url(postgres_url, result.acked)
    errors = {s: n for s, n in result.statuses.items() if s not in ("200", "201")}
    print(f"postgres restart ({outage.get('took', 0):.1f}s) during {len(items)} submissions: "
          f"statuses {dict(result.statuses)}, Retry-After {dict(result.retry_after)}; "
          f"server alive {alive}, /healthz {health}; acked {len(result.acked)}, "
          f"found {audit['acked_found']}, stored {audit['stored']}, problems {audit['problems']}"
          f"; all done in {elapsed:.1f}s")
    assert restarted.is_set() and "took" in outage
    assert alive and health == 200
    assert len(result.acked) == len(items), f"not delivered: {len(result.unacked)}"
    assert audit["problems"] == [] and audit["stored"] == len(items)
    assert not any(s.startswith("5") and s != "503" for s in result.statuses), errors
    assert result.statuses["503"] > 0 or any(not s.isdigit() for s in result.statuses), (
        "the restart was never seen by a client")
