"""Several real `specserver serve` processes on one PostgreSQL schema, as behind a balancer.

Concurrent clients send every submission to two or three replicas at once (deliberate
duplicates) and a few other-bytes versions of stored ids (conflicts). Then: each
submission id got exactly one 201, every repeat of the same bytes a 200 with the original
receipt whichever replica answered, every other-bytes version a 409; each acknowledged
submission is stored exactly once and complete; and every replica serves the same
leaderboard, aggregates, stats and export, with the same ETag.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from specserver.store.database import make_engine
from tests.reliability.servers import ServerProcess
from tests.support.backends import (
    board_bodies,
    board_submission,
    expected_rows,
    signed,
    stored_counts,
    stored_envelope_sha,
    submission_id_of,
)

pytestmark = pytest.mark.postgres

REPLICAS = 3
DISTINCT = 60
CONFLICTS = 6
CLIENTS = 12


PASSWORD = "never-in-the-logs"


@pytest.fixture
def replicas(postgres_url: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    # Trust authentication ignores the password; the servers must not print it.
    with_password = postgres_url.replace("postgres@", f"postgres:{PASSWORD}@", 1)
    assert PASSWORD in with_password
    servers = [ServerProcess(with_password, tmp_path, env={"SPECSERVER_GROUP_COMMIT_MS": "5"})
               for _ in range(REPLICAS)]
    starters = [threading.Thread(target=s.start) for s in servers]
    try:
        for t in starters:  # start together: they race on the migration too
            t.start()
        for t in starters:
            t.join(60)
        for s in servers:
            assert s.proc is not None and s.proc.poll() is None, s.log()
            assert httpx.get(f"{s.url}/healthz").json()["store"] == "postgresql"
        yield servers
    finally:
        for s in servers:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.terminate()
                s.proc.wait(30)
    for s in servers:
        log = s.log()
        assert "(store: postgresql+psycopg://postgres:***@" in log
        assert PASSWORD not in log


def test_replicas_store_each_submission_once_and_agree(
    replicas: list[ServerProcess], postgres_url: str
) -> None:
    bodies = board_bodies(DISTINCT, contributors=6, start=6000)
    others = [signed(board_submission(6000 + i), key_seed=90 + i) for i in range(CONFLICTS)]
    rng = random.Random(11)
    plan: list[tuple[int, bytes]] = []
    for body in bodies:
        fanout = rng.choice((2, 2, 3))
        plan += [(r, body) for r in rng.sample(range(REPLICAS), fanout)]
    plan += [(rng.randrange(REPLICAS), body) for body in others]
    rng.shuffle(plan)

    local = threading.local()
    clients: list[httpx.Client] = []

    def send(item: tuple[int, bytes]) -> tuple[bytes, int, dict[str, object]]:
        replica, body = item
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=30)
            clients.append(local.client)
        response = local.client.post(f"{replicas[replica].url}/v1/submissions", content=body,
                                     headers={"Content-Type": "application/json"})
        return body, response.status_code, response.json()

    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            results = list(pool.map(send, plan))
    finally:
        for client in clients:
            client.close()

    by_id: dict[str, list[tuple[bytes, int, dict[str, object]]]] = defaultdict(list)
    for body, status, answer in results:
        assert status in (200, 201, 409), (status, answer)
        by_id[submission_id_of(body)].append((body, status, answer))
    engine = make_engine(postgres_url)
    try:
        stored = stored_envelope_sha(engine)
        counts = stored_counts(engine, by_id)
    finally:
        engine.dispose()
    assert set(stored) == set(by_id) and len(by_id) == DISTINCT
    for sid, sends in by_id.items():
        created = [(b, a) for b, s, a in sends if s == 201]
        assert len(created) == 1, (sid, [s for _, s, _ in sends])
        winner, receipt = created[0]
        assert stored[sid] == hashlib.sha256(winner).hexdigest()
        assert counts[sid] == expected_rows(winner)
        for body, status, answer in sends:
            if status == 201:
                continue
            if body == winner:
                assert status == 200
                assert answer["received_at"] == receipt["received_at"]  # the original
                assert answer["summary"] == receipt["summary"]
            else:
                assert status == 409
                assert answer["error"]["code"] == "submission_conflict"  # type: ignore[index]

    # Every replica serves the same public answers from the one store.
    for path in ("/v1/leaderboard", "/v1/leaderboard?view=noise_floor",
                 "/v1/aggregates?group_by=chip,memory_gb,ollama_version", "/v1/stats",
                 "/v1/export?format=csv"):
        answers = [httpx.get(f"{s.url}{path}", timeout=30) for s in replicas]
        assert all(a.status_code == 200 for a in answers), path
        assert len({a.content for a in answers}) == 1, path
        assert len({a.headers.get("etag") for a in answers}) == 1, path
    board = httpx.get(f"{replicas[0].url}/v1/leaderboard").json()
    assert board["groups"], "the leaderboard must have groups for the comparison to mean much"
    csv_lines = httpx.get(f"{replicas[1].url}/v1/export?format=csv").text.splitlines()
    assert len(csv_lines) == 1 + sum(expected_rows(b)["summaries"] for b in bodies)
