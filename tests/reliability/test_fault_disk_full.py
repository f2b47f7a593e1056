"""The store cannot grow: every file write of the server process fails, then space returns.

How: the server runs with SIGXFSZ ignored, and the test lowers its RLIMIT_FSIZE soft
limit to 0 with prlimit(2) while it runs, so every write(2) to a regular file fails with
EFBIG, exactly as on a full disk (ENOSPC) from the process's point of view. Raising the
limit again is "space returns". Nothing is mocked; it is the server's real DuckDB file.

Expected: 503 with Retry-After while writes fail, the server stays up and keeps serving
reads, accepts again once space returns, and every acknowledged submission is in the file
afterwards, complete. Run with ``-s`` for the figures.
"""

from __future__ import annotations

import resource
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.reliability.load import drive, make_items
from tests.reliability.servers import ServerProcess
from tests.reliability.storecount import audit_file

UNLIMITED = resource.RLIM_INFINITY


def _ignore_sigxfsz() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _set_fsize(pid: int, soft: int) -> None:
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, UNLIMITED))


@pytest.mark.slow  # a fault test under load: ~100 s on the loaded 2-core machine (full tier)
@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs Linux prlimit(2)")
def test_store_that_cannot_grow_answers_503_and_recovers(tmp_path: Path) -> None:
    db = str(tmp_path / "store.duckdb")
    server = ServerProcess(db, tmp_path, preexec_fn=_ignore_sigxfsz)
    before, during, after = (make_items(range(60_000, 60_100)), make_items(range(60_100, 60_160)),
                             make_items(range(60_160, 60_220)))
    acked: dict[str, bytes] = {}
    try:
        server.start()
        assert server.proc is not None
        pid = server.proc.pid
        first = drive(server.url, before, concurrency=8)
        assert set(first.statuses) == {"201"}, first.statuses
        acked.update(first.acked)

        _set_fsize(pid, 0)  # the disk is full
        full = drive(server.url, during, concurrency=8)
        acked.update(full.acked)
        alive_during = server.alive()
        read_back = httpx.get(f"{server.url}/v1/submissions/{before[0][0]}", timeout=5)
        health = httpx.get(f"{server.url}/healthz", timeout=5)
        reads = {path: httpx.get(f"{server.url}{path}", timeout=10).status_code
                 for path in ("/v1/leaderboard", "/", "/v1/export?format=csv",
                              "/v1/export?format=parquet")}
        print(f"disk full: {len(during)} sent, statuses {dict(full.statuses)}, Retry-After "
              f"{dict(full.retry_after)}; server alive {alive_during}; read of a stored "
              f"submission -> {read_back.status_code}; /healthz -> {health.status_code}; "
              f"other reads {reads}")
        assert alive_during
        assert full.statuses["503"] >= len(during) - full.statuses["201"] - full.statuses["200"]
        assert full.statuses["503"] > 0
        assert sum(full.retry_after.values()) == full.statuses["503"]
        assert read_back.status_code == 200
        # Reads that need no file keep working. Every export is written to a temporary
        # file first (a stalled client never holds a database connection), so on a
        # full disk both formats answer 503 with Retry-After, never a 500.
        assert all(reads[p] == 200 for p in ("/v1/leaderboard", "/"))
        assert reads["/v1/export?format=csv"] == reads["/v1/export?format=parquet"] == 503

        _set_fsize(pid, UNLIMITED)  # space returns
        recovered_at = time.monotonic()
        retry = list(full.unacked.items()) + after
        statuses: list[dict[str, int]] = []
        for _attempt in range(10):
            result = drive(server.url, retry, concurrency=8)
            acked.update(result.acked)
            statuses.append(dict(result.statuses))
            retry = list(result.unacked.items())
            if not retry:
                break
            time.sleep(1.0)
        print(f"space back: attempts {statuses}, all delivered after "
              f"{time.monotonic() - recovered_at:.1f}s; server alive {server.alive()}")
        assert retry == [], f"still refused after space returned: {statuses}"
        assert server.alive()
        server.stop()
        audit = audit_file(db, acked)
        print(f"audit: acked {audit['acked']}, found {audit['acked_found']}, stored "
              f"{audit['stored']}, problems {audit['problems']}")
        assert audit["problems"] == []
        assert audit["stored"] == len(before) + len(during) + len(after)
        server.start()  # the file opens again after all this
        last = httpx.get(f"{server.url}/v1/submissions/{after[-1][0]}", timeout=5)
        assert last.status_code == 200
    finally:
        server.stop()
