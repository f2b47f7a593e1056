"""A real `specserver serve` on a DuckDB file, SIGKILLed under concurrent load.

After the restart every submission that got a 201 is there and complete, no submission is
half stored, and re-sending the unacknowledged ones stores each exactly once; the
transparency log holds one entry per stored envelope, without gaps, at the index each
receipt gave.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import httpx
import pytest

from specschema.envelope import verify_envelope
from specschema.payload import parse_submission
from tests.support.ports import free_port
from tests.support.signed import valid_body

SPECSERVER = str(Path(sys.executable).with_name("specserver"))


class Server:
    def __init__(self, database: Path, log: Path) -> None:
        self.database = database
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.first_line = ""

    def start(self) -> None:
        env = dict(os.environ, SPECSERVER_RATE_KEY_PER_MINUTE="0",
                   SPECSERVER_RATE_ADDR_PER_MINUTE="0")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [SPECSERVER, "serve", "--port", str(self.port), "--database",
                 str(self.database)],
                stdout=subprocess.PIPE, stderr=log, env=env,
            )
        assert self.proc.stdout is not None
        self.first_line = self.proc.stdout.readline().decode()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise AssertionError("server did not start: " + self.log.read_text())

    def kill(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stdout.close()

    def stop(self) -> None:
        """SIGTERM: uvicorn shuts down gracefully, then re-raises the signal."""
        assert self.proc is not None and self.proc.stdout is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) in (0, -signal.SIGTERM)
        self.proc.stdout.close()


def submission_id(body: bytes) -> str:
    return str(parse_submission(verify_envelope(json.loads(body)).payload).submission_id)


@pytest.mark.slow  # SIGKILL under load: a fault and load test (full tier)
def test_sigkill_under_load_loses_no_acknowledged_submission(tmp_path: Path) -> None:
    started = time.monotonic()
    database = tmp_path / "store.duckdb"
    bodies = [valid_body(seed=5000 + i, key_seed=i % 7) for i in range(240)]
    ids = [submission_id(b) for b in bodies]
    server = Server(database, tmp_path / "server.log")
    print(f"generated in {time.monotonic() - started:.1f} s")
    server.start()
    assert server.first_line.startswith(f"specserver {server.url}")

    acked: dict[int, int] = {}  # body index -> status (201/200)
    logged: dict[int, int] = {}  # body index -> the log index its receipt gave
    lock = threading.Lock()
    next_index = iter(range(len(bodies)))

    def client() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            for i in next_index:
                try:
                    response = http.post("/v1/submissions", content=bodies[i])
                except httpx.HTTPError:
                    continue  # not acknowledged
                if response.status_code in (200, 201):
                    with lock:
                        acked[i] = response.status_code
                        logged[i] = response.json()["log"]["index"]

    threads = [threading.Thread(target=client) for _ in range(12)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acked) < 80 and time.monotonic() < deadline:
        time.sleep(0.005)
    server.kill()  # mid-load: the clients are still sending
    for t in threads:
        t.join()
    acknowledged = set(acked)
    print(f"killed after {len(acknowledged)} acks at {time.monotonic() - started:.1f} s")
    assert 80 <= len(acknowledged) < len(bodies)

    server.start()
    with httpx.Client(base_url=server.url, timeout=10) as http:
        for i in sorted(acknowledged):
            view = http.get(f"/v1/submissions/{ids[i]}")
            assert view.status_code == 200, (i, view.text)
            data = view.json()
            assert len(data["trials"]) == 15 and len(data["configs"]) == 3
            assert len(data["summary"]) == 3
        # Re-send everything that was not acknowledged: each is stored exactly once.
        resent = [i for i in range(len(bodies)) if i not in acknowledged]
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(
                lambda i: http.post("/v1/submissions", content=bodies[i]).status_code, resent))
        assert set(statuses) <= {200, 201}
        assert statuses.count(201) >= 1  # some had never reached the store
        # An acknowledged one sent again is a 200, not a second copy.
        again = http.post("/v1/submissions", content=bodies[min(acknowledged)])
        assert again.status_code == 200
    server.stop()
    print(f"re-sent {len(resent)} ({statuses.count(201)} new) at "
          f"{time.monotonic() - started:.1f} s")

    with duckdb.connect(str(database), read_only=True) as conn:
        stored = {r[0] for r in conn.execute("SELECT submission_id FROM submissions").fetchall()}
        assert stored == set(ids)
        half = conn.execute("""
            SELECT s.submission_id FROM submissions s
            LEFT JOIN (SELECT submission_id, count(*) n FROM trials GROUP BY 1) t
                USING (submission_id)
            LEFT JOIN (SELECT submission_id, count(*) n FROM configs GROUP BY 1) c
                USING (submission_id)
            LEFT JOIN (SELECT submission_id, count(*) n FROM summaries GROUP BY 1) m
                USING (submission_id)
            LEFT JOIN envelopes e USING (submission_id)
            LEFT JOIN fingerprints f USING (submission_id)
            WHERE t.n IS DISTINCT FROM 15 OR c.n IS DISTINCT FROM 3 OR m.n IS DISTINCT FROM 3
               OR e.submission_id IS NULL OR f.submission_id IS NULL
        """).fetchall()
        assert half == []
        for table in ("envelopes", "fingerprints", "trials", "configs", "summaries"):
            orphans = conn.execute(
                f"SELECT count(*) FROM {table} WHERE submission_id NOT IN "
                "(SELECT submission_id FROM submissions)").fetchone()
            assert orphans == (0,), table
        envelopes = dict(conn.execute("SELECT submission_id, body FROM envelopes").fetchall())
    assert all(envelopes[ids[i]] == bodies[i] for i in range(len(bodies)))
    # The transparency log moved in step: every stored envelope has exactly one entry
    # (0x01 || SHA-256 of its bytes), numbered without gaps, and each acknowledged
    # submission has the index its receipt gave.
    with duckdb.connect(str(database), read_only=True) as conn:
        entries = conn.execute(
            "SELECT idx, entry, submission_id FROM log_entries ORDER BY idx").fetchall()
    assert [e[0] for e in entries] == list(range(len(bodies)))
    by_id = {e[2]: (e[0], bytes(e[1])) for e in entries}
    assert set(by_id) == set(ids)
    assert all(by_id[ids[i]][1] == b"\x01" + hashlib.sha256(bodies[i]).digest()
               for i in range(len(bodies)))
    assert all(by_id[ids[i]][0] == logged[i] for i in acknowledged)
