"""The server is SIGKILLed under load, five times in a row, on one DuckDB file.

Each round: start the server, post fresh submissions plus every one not yet acknowledged
(the client's retries) from 16 threads, SIGKILL the server once enough acknowledgements
came back while requests are still in flight, then audit the file with the server dead:
every acknowledged submission is there with its exact bytes and all its rows, nothing is
half-stored. A final round re-sends everything (acknowledged or not) and checks each id
is stored exactly once. Run with ``-s`` for the per-round figures.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import httpx
import pytest

from tests.reliability.load import drive, make_items
from tests.reliability.servers import ServerProcess
from tests.reliability.storecount import audit_file

ROUNDS = 5
PER_ROUND = 100
KILL_AFTER_ACKS = 40


@pytest.mark.slow
def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db = str(tmp_path / "store.duckdb")
    server = ServerProcess(db, tmp_path)
    items = make_items(range(50_000, 50_000 + ROUNDS * PER_ROUND))
    acked: dict[str, bytes] = {}
    pending: dict[str, bytes] = {}
    figures = []
    try:
        for round_no in range(ROUNDS):
            server.start()
            _served_after_restart(server.url, acked)
            fresh = items[round_no * PER_ROUND:(round_no + 1) * PER_ROUND]
            batch = list(pending.items()) + fresh
            killed = threading.Event()

            def on_ack(count: int, killed: threading.Event = killed) -> None:
                if count >= KILL_AFTER_ACKS and not killed.is_set():
                    killed.set()
                    server.kill()

            result = drive(server.url, batch, concurrency=16, on_ack=on_ack)
            assert killed.is_set(), f"round {round_no}: server was not killed under load"
            acked.update(result.acked)
            pending = {sid: body for sid, body in {**pending, **dict(fresh)}.items()
                       if sid not in acked}
            audit = audit_file(db, acked)
            figures.append((round_no + 1, len(batch), len(result.acked),
                            dict(result.statuses), audit))
            print(f"round {round_no + 1}: sent {len(batch)}, acked {len(result.acked)}, "
                  f"statuses {dict(result.statuses)}; store: {audit['stored']} stored, "
                  f"{audit['acked_found']}/{audit['acked']} acked found, "
                  f"{audit['stored_not_acked']} stored but unacknowledged")
            assert audit["problems"] == [], audit
            assert audit["acked_found"] == len(acked)
        # Final: everything again, as a client that never got (or lost) its receipts.
        server.start()
        _served_after_restart(server.url, acked)
        result = drive(server.url, items, concurrency=16)
        server.stop()
        assert set(result.statuses) <= {"200", "201"}, result.statuses
        final = audit_file(db, dict(items))
        print(f"final resend of all {len(items)}: statuses {dict(result.statuses)}; store: "
              f"{final['stored']} stored, {final['acked_found']}/{len(items)} found, "
              f"problems {final['problems']}")
        assert final["problems"] == []
        assert final["stored"] == len(items)
        # Whatever was stored before answers 200 (never stored twice); the rest 201.
        stored_before = figures[-1][4]["stored"]
        assert result.statuses["201"] == len(items) - stored_before
        assert result.statuses["200"] == stored_before
    finally:
        server.stop()



def _served_after_restart(url: str, acked: dict[str, bytes]) -> None:
    """The restarted server itself serves what was acknowledged, byte for byte."""
    for sid in random.Random(len(acked)).sample(sorted(acked), min(20, len(acked))):
        response = httpx.get(f"{url}/v1/submissions/{sid}/envelope", timeout=10)
        assert response.status_code == 200, (sid, response.status_code)
        assert response.content == acked[sid]
    stats = httpx.get(f"{url}/v1/stats", timeout=10).json()
    assert stats["submissions"] >= len(acked)
