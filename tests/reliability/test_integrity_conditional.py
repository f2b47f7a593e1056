"""``If-None-Match: *`` answered 304 on every resource, a submission that does not exist
included: a cache (or a script) asking "anything there?" was told "yes, unchanged". RFC 9110
13.1.2: ``*`` matches only when a current representation exists; a GET whose condition is
false is a 304, one whose resource does not exist is its 404. Replayed against the
in-process app on DuckDB with one stored submission.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.apps import app_on
from tests.reliability.hostile import dict_bytes, payload_dict, signed, signing_key
from tests.reliability.test_hostile_inputs import assert_error_shape
from tests.support.inprocess import InProcessClient

ANY = {"If-None-Match": "*"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[InProcessClient]:
    with app_on("duckdb", tmp_path) as app, InProcessClient(app) as c:
        yield c


@pytest.fixture
def stored(client: InProcessClient) -> str:
    data = payload_dict(1)
    response = client.post("/v1/submissions", content=signed(dict_bytes(data),
                                                              signing_key(1)))
    assert response.status_code == 201, response.text
    return str(data["submission_id"])


def test_star_is_not_a_304_where_nothing_exists(client: InProcessClient, stored: str) -> None:
    missing = str(uuid.uuid4())
    for path in (f"/v1/submissions/{missing}/envelope", f"/v1/submissions/{missing}"):
        response = client.get(path, headers=ANY)
        assert response.status_code == 404, (path, response.status_code)
        assert_error_shape(response)
    page = client.get(f"/submissions/{missing}", headers=ANY)
    assert page.status_code == 404 and "not found" in page.text
    refused = client.get("/v1/leaderboard", params={"chip": "No Such Chip"}, headers=ANY)
    assert refused.status_code == 422


@pytest.mark.parametrize("path", [
    "/v1/submissions/{id}/envelope", "/v1/submissions/{id}", "/submissions/{id}",
    "/v1/leaderboard", "/v1/stats", "/v1/submissions", "/v1/export", "/",
])
def test_star_is_a_304_where_a_current_representation_exists(
        client: InProcessClient, stored: str, path: str) -> None:
    url = path.format(id=stored)
    full = client.get(url)
    assert full.status_code == 200, full.text[:200]
    etag = full.headers["etag"]
    unchanged = client.get(url, headers=ANY)
    assert unchanged.status_code == 304 and unchanged.content == b""
    assert unchanged.headers["etag"] == etag
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert client.get(url, headers={"If-None-Match": '"other"'}).status_code == 200
