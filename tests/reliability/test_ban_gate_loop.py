"""The ban gate never blocks the event loop.

The attack: with the read pool exhausted, one POST whose ban cache had expired opened a
database connection *on the event loop*, and /openapi.json, which needs no database, took
29 s. Here the store's connections are made to hang (``engine.connect`` waits on an event)
after the app has started; a POST is sent, and /openapi.json must be answered while the
ban reload is still hanging. Before the fix the POST held the loop until the connection
came (the ``finished`` event was set before /openapi.json could even start).

The gate fails open to the last loaded set, so a key banned before the hang stays refused.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from specserver.store import tables
from tests.reliability.apps import app_on
from tests.reliability.hostile import key_id, valid_envelope

HANG_S = 8.0  # the longest a hung connect waits before it goes on anyway


async def _scenario(app: Any, banned_seed: int) -> dict[str, Any]:
    store = app.state.store
    entered, finished, release = threading.Event(), threading.Event(), threading.Event()
    connect = store.engine.connect

    def hanging_connect() -> Any:
        entered.set()
        release.wait(HANG_S)
        try:
            return connect()
        finally:
            finished.set()

    transport = httpx.ASGITransport(app=app, client=("203.0.113.10", 50000))
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=transport, base_url="http://testserver") as client:
        # A banned key, loaded by the gate before the database hangs.
        await store.awrite(lambda conn: conn.execute(insert(tables.bans).values(
            key_id=key_id(banned_seed), reason="test", banned_at=datetime.now(UTC))))
        store.invalidate_bans()
        refused = await client.post("/v1/submissions", content=valid_envelope(banned_seed))

        store.engine.connect = hanging_connect  # every new read connection hangs now
        try:
            post = asyncio.create_task(client.post("/v1/submissions",
                                                   content=valid_envelope(7)))
            while not entered.is_set() and not post.done():
                await asyncio.sleep(0.01)
            openapi = await client.get("/openapi.json")
            answered_while_hung = not finished.is_set()
            banned_again = await client.post("/v1/submissions",
                                             content=valid_envelope(banned_seed))
            release.set()
            accepted = await post
        finally:
            release.set()
            store.engine.connect = connect
    return {"refused": refused, "openapi": openapi, "answered_while_hung": answered_while_hung,
            "accepted": accepted, "banned_again": banned_again}


def test_a_hanging_ban_reload_never_blocks_the_event_loop(tmp_path: Path) -> None:
    with app_on("duckdb", tmp_path, ban_cache_s=0, ban_wait_s=0.5) as app:
        seen = asyncio.run(_scenario(app, banned_seed=3))
    assert seen["refused"].status_code == 403
    assert seen["openapi"].status_code == 200
    assert seen["answered_while_hung"], "the POST's ban reload held the event loop"
    # The gate used the last loaded set: the honest key is stored, the banned one refused.
    assert seen["accepted"].status_code == 201, seen["accepted"].text
    assert seen["banned_again"].status_code == 403
    assert seen["banned_again"].json()["error"]["code"] == "key_banned"
