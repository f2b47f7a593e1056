"""A failed admin action must not reset the single writer.

Before: ``GroupCommitWriter._run_job`` reset the writer on any exception, so every 404
(hide an unknown id), 409 (import the same file twice) or 422 (a bad key id) closed the
writer's connection and, on DuckDB, disposed the engine: the database instance under the
ingest path was torn down and reopened by a maintainer's typo. Now a domain refusal leaves
the connection as it is; a connection that is really gone is still replaced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from specserver.errors import NotFound
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import valid_envelope
from tests.support.inprocess import InProcessClient

TOKEN = "test-admin-token-" + "y" * 20
ADMIN = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def admin_post(client: InProcessClient, url: str, body: dict[str, Any]) -> int:
    return client.post(url, content=json.dumps(body).encode(), headers=ADMIN).status_code


@pytest.mark.parametrize("store", STORES)
def test_failed_admin_actions_keep_the_writer_connection(store: str, tmp_path: Path) -> None:
    with app_on(store, tmp_path, admin_token=TOKEN) as app, InProcessClient(app) as client:
        assert client.post("/v1/submissions", content=valid_envelope(1)).status_code == 201
        writer = app.state.store.writer
        connection = writer._conn
        assert connection is not None and writer.resets == 0
        missing = "00000000-0000-4000-8000-000000000000"
        assert admin_post(client, "/admin/v1/hide", {"submission_id": missing,
                                                     "reason": "x"}) == 404
        assert admin_post(client, "/admin/v1/ban", {"key_id": "not-hex",
                                                    "reason": "x"}) == 422
        assert admin_post(client, "/admin/v1/unban", {"key_id": "Z" * 64}) == 422
        # A statement the database refuses is no broken connection either (it still answers).
        with pytest.raises(DBAPIError):
            app.state.store.write(lambda conn: conn.exec_driver_sql("SELECT * FROM nowhere"))
        # Ingest right after, on the same connection, and nothing was reset.
        assert client.post("/v1/submissions", content=valid_envelope(2)).status_code == 201
        assert writer.resets == 0
        assert writer._conn is connection and not connection.closed


@pytest.mark.parametrize("store", STORES)
def test_a_broken_connection_is_still_replaced(store: str, tmp_path: Path) -> None:
    """The other half: a job that leaves the connection unusable does reset the writer,
    and the next submission is stored on a new connection."""
    with app_on(store, tmp_path, admin_token=TOKEN) as app, InProcessClient(app) as client:
        assert client.post("/v1/submissions", content=valid_envelope(1)).status_code == 201
        store_ = app.state.store
        connection = store_.writer._conn

        def breaks(conn: Connection) -> None:
            conn.invalidate()  # the connection is gone, as after a dropped socket
            raise NotFound("a refusal raised on a connection that broke meanwhile")

        with pytest.raises(Exception):  # noqa: B017 - whatever the rollback of a dead one says
            store_.write(breaks)
        assert store_.writer.resets == 1
        assert client.post("/v1/submissions", content=valid_envelope(2)).status_code == 201
        assert store_.writer._conn is not connection
