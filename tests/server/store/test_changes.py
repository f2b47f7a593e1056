"""The change log (store/changes.py) as the real write paths fill it: the group-commit
writer (DuckDB's appenders, PostgreSQL's COPY) and every moderation action."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from specschema.envelope import key_id_of
from specserver.store import changes, moderation, tables
from specserver.store.database import make_engine
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for
from tests.support.signed import signer, valid_body


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def _log(url: str) -> list[tuple[int, str | None, int, int]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            log = tables.board_changes
            return [(int(r[0]), r[1], int(r[2]), int(r[3])) for r in conn.execute(
                select(log.c.seq, log.c.contributor, log.c.submissions, log.c.audits)
                .order_by(log.c.seq, log.c.contributor)).all()]
    finally:
        engine.dispose()


def test_every_write_logs_the_contributors_it_touched(store_url: str, tmp_path: Path) -> None:
    alice, bob = (key_id_of(bytes(signer(seed).verify_key)) for seed in (1, 2))
    with Served(settings_for(tmp_path, database_url=store_url)) as served:
        bodies = [valid_body(seed=10, key_seed=1), valid_body(seed=11, key_seed=1),
                  valid_body(seed=12, key_seed=2)]
        responses = served.post_many(bodies)
        assert [r.status_code for r in responses] == [201, 201, 201]
        again = served.post(bodies[2])
        assert again.status_code == 200  # a duplicate stores nothing and logs nothing
        hidden = responses[0].json()["submission_id"]
        store = served.store
        store.write(lambda c: moderation.hide(c, hidden, "test", "tester"))
        store.write(lambda c: moderation.hide(c, hidden, "test", "tester"))  # no change
        store.write(lambda c: moderation.ban(c, bob, "test", "tester"))
        store.write(lambda c: moderation.record_query(c, "SELECT 1", "tester"))
        with store.engine.connect() as conn:
            at = changes.position(conn)
            assert (at.submissions, at.audits) == (3, 3)
            logged = changes.since(conn, 0, at.seq)
        assert logged.contributors == {alice, bob}
        assert (logged.submissions, logged.audits) == (3, 3)
    log = _log(store_url)
    stored = [(who, n) for _, who, n, _audits in log if n]  # one row per batch and key
    assert sum(n for _, n in stored) == 3 and {who for who, _ in stored} == {alice, bob}
    tail = [(who, n, audits) for _, who, n, audits in log[-3:]]
    assert tail == [(alice, 0, 1), (bob, 0, 1), (None, 0, 1)]  # hide, ban, query
    seqs = [seq for seq, *_ in log]
    assert seqs == sorted(seqs) and len(set(seqs[-3:])) == 3  # one number per transaction
