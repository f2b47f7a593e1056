"""The public read API, in process, on a real DuckDB file in tmp_path."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta

import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, insert, update

from specschema.examples import EXAMPLE_MACHINES, example_submission
from specschema.protocol_files import get_protocol
from specserver.board.leaderboard import ReadService
from specserver.http import public
from specserver.http.errors import install_error_handlers
from specserver.http.page import routes as page_routes
from specserver.settings import ServerSettings
from specserver.store import tables
from tests.conftest import READ_WAIT_S
from tests.server.http.public_store import COUNT, hide
from tests.support.boardfill import BASE_TIME, fill, insert_submission, key
from tests.support.inprocess import InProcessClient


def test_leaderboard_groups_by_comparison_keys_and_default_chip_memory(client):
    body = client.get("/v1/leaderboard").json()
    # The engine is a comparison dimension: never merged across engines.
    assert body["group_by"] == ["protocol", "target", "draft", "engine", "chip", "memory_gb"]
    groups = body["groups"]
    # ollama-draft: 2 draft configs x 4 machines; the imported reference is noise floor only.
    assert len(groups) == 8
    assert {g["key"]["protocol"]["protocol_id"] for g in groups} == {"ollama-draft"}
    for group in groups:
        assert group["submissions"] == 4
        assert group["contributors"] == 1  # fill(): machine i%4 and key i%4 coincide
        assert group["few_results"] is True and group["p25_speedup"] is None
        assert group["verdicts"]["confirmed"] == 4
    speedups = [g["median_speedup"] for g in groups]
    assert speedups == sorted(speedups, reverse=True)
    # Both views show the verdict counts of every draft result the filters match.
    assert body["verdict_counts"] == {"confirmed": 32, "not_observed": 0, "not_applied": 2,
                                      "unknown": 0, "baseline_speculated": 0, "synthetic": 0,
                                      "cannot_compare": 0, "unstable": 0, "incompatible": 0}


def test_noise_floor_view_holds_not_applied_drafts(client):
    body = client.get("/v1/leaderboard", params={"view": "noise_floor"}).json()
    assert sorted(g["key"]["draft"]["config_name"] for g in body["groups"]) == [
        "draft_qwen2.5_0.5b", "draft_qwen2.5_1.5b"]
    assert all(g["verdicts"]["not_applied"] == 1 for g in body["groups"])
    assert body["verdict_counts"]["not_applied"] == 2


def test_filters_narrow_the_leaderboard(client):
    body = client.get("/v1/leaderboard", params={"chip": "Apple M2", "draft": "spec_4"}).json()
    assert len(body["groups"]) == 1
    assert body["groups"][0]["key"]["chip"] == {"chip": "Apple M2"}
    assert body["filters"]["chip"] == "Apple M2"
    assert client.get("/v1/leaderboard", params={"memory_gb": 36}).json()["total_groups"] == 2
    assert client.get("/v1/leaderboard", params={"os": "linux"}).json()["total_groups"] == 4
    unknown_only = client.get("/v1/leaderboard", params={"verdict": "unknown"}).json()
    assert unknown_only["groups"] == []


def test_percentiles_appear_with_three_contributors(store, client):
    engine, _ = store
    m2 = EXAMPLE_MACHINES[0]
    for seed in (1000, 1001):  # two more contributors on the Apple M2
        sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1", machine=m2,
                                 draft_speedups={"spec_4": 1.5}, counters_seen=True,
                                 created_at=datetime(2026, 11, 1, tzinfo=UTC))
        insert_submission(engine, sub, key(seed), received_at=BASE_TIME + timedelta(hours=1))
    body = client.get("/v1/leaderboard", params={"chip": "Apple M2", "draft": "spec_4"}).json()
    group = body["groups"][0]
    assert group["contributors"] == 3 and group["submissions"] == 6
    assert group["few_results"] is False
    assert group["p25_speedup"] <= group["median_speedup"] <= group["p75_speedup"]
    assert group["min_speedup"] <= group["p25_speedup"]


def test_aggregates_use_exactly_the_requested_dimensions(client):
    body = client.get("/v1/aggregates", params={"group_by": "os,memory_gb"}).json()
    assert body["group_by"] == ["os", "memory_gb"]
    assert {tuple(g["key"]) for g in body["groups"]} == {("os", "memory_gb")}
    assert sum(g["submissions"] for g in body["groups"]) == COUNT


@pytest.mark.parametrize(("params", "code", "allowed_contains"), [
    ({"group_by": "chip,colour"}, "unknown_group_by", "ollama_version"),
    ({"colour": "red"}, "unknown_parameter", "memory_gb"),
    ({"verdict": "maybe"}, "unknown_verdict", "not_applied"),
    ({"protocol": "nope"}, "unknown_protocol", "hardnumbers-m2"),
    ({"os": "beos"}, "unknown_os", "macos"),
    ({"sort": "fastest"}, "unknown_sort", "-speedup"),
])
def test_unknown_values_are_422_listing_the_allowed_ones(client, params, code, allowed_contains):
    response = client.get("/v1/leaderboard", params=params)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == code
    assert set(error) == {"code", "message", "details"}
    assert allowed_contains in error["details"]["allowed"]


def test_bad_integer_is_422(client):
    response = client.get("/v1/leaderboard", params={"memory_gb": "lots"})
    assert response.status_code == 422 and response.json()["error"]["code"] == "bad_parameter"


def test_pagination_of_groups(client):
    first = client.get("/v1/leaderboard", params={"limit": 3}).json()
    second = client.get("/v1/leaderboard", params={"limit": 3, "offset": 3}).json()
    everything = client.get("/v1/leaderboard").json()
    assert first["next_offset"] == 3
    assert first["groups"] + second["groups"] == everything["groups"][:6]


@pytest.mark.parametrize("path", ["/v1/leaderboard", "/v1/aggregates", "/v1/submissions",
                                  "/v1/protocols", "/v1/stats", "/v1/export?format=jsonl"])
def test_etag_and_304(unreused_client, store, path):
    client = unreused_client  # the export reuses its file across inserts by default
    response = client.get(path)
    assert response.status_code == 200
    etag = response.headers["etag"]
    assert "max-age" in response.headers["cache-control"]
    again = client.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    # A write changes the data version, so the old ETag no longer matches.
    sub = example_submission("ollama-draft", seed=4242, engine_version="0.30.1",
                             created_at=datetime(2026, 11, 1, tzinfo=UTC))
    insert_submission(store[0], sub, key(77), received_at=BASE_TIME + timedelta(days=2))
    after = client.get(path, headers={"If-None-Match": etag})
    assert after.status_code == 200 and after.headers["etag"] != etag


def test_leaderboard_sees_hides_and_bans_at_once(client, store):
    engine, ids = store
    before = client.get("/v1/leaderboard", params={"chip": "Apple M2"}).json()
    assert before["groups"][0]["submissions"] == 4
    hide(engine, ids[0])
    after = client.get("/v1/leaderboard", params={"chip": "Apple M2"}).json()
    assert after["groups"][0]["submissions"] == 3
    with engine.begin() as conn:
        key_id = conn.execute(tables.submissions.select().where(
            tables.submissions.c.submission_id == ids[1])).one().key_id
        conn.execute(insert(tables.bans).values(key_id=key_id, reason="x",
                                                banned_at=datetime(2026, 11, 2)))
    banned = client.get("/v1/leaderboard").json()
    assert sum(g["submissions"] for g in banned["groups"]) == 2 * (COUNT - 1 - 4)


def test_cors_for_get(client):
    response = client.get("/v1/stats", headers={"Origin": "https://example.org"})
    assert response.headers["access-control-allow-origin"] == "*"
    assert "etag" in response.headers["access-control-expose-headers"].lower()
    preflight = client.options("/v1/leaderboard", headers={
        "Origin": "https://example.org", "Access-Control-Request-Method": "GET"})
    assert preflight.status_code == 200
    refused = client.options("/v1/leaderboard", headers={
        "Origin": "https://example.org", "Access-Control-Request-Method": "DELETE"})
    assert refused.status_code == 400


def test_submissions_cursor_pagination_walks_everything_once(client, store):
    _, ids = store
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 5} | ({"cursor": cursor} if cursor else {})
        body = client.get("/v1/submissions", params=params).json()
        seen += [item["submission_id"] for item in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == len(ids)
    assert pages == 4
    newest = client.get("/v1/submissions", params={"limit": 1}).json()["items"][0]
    assert newest["received_at"] == (BASE_TIME + timedelta(seconds=COUNT - 1)).isoformat() + "Z"
    assert {d["config_name"] for d in newest["drafts"]} == {"spec_4", "spec_8"}


def test_submissions_filters_and_bad_cursor(client):
    body = client.get("/v1/submissions", params={"verdict": "not_applied"}).json()
    assert [i["protocol_id"] for i in body["items"]] == ["hardnumbers-m2"]
    bad = client.get("/v1/submissions", params={"cursor": "garbage!"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "bad_cursor"


def test_protocols_and_stats(client):
    protocols = {p["id"]: p for p in client.get("/v1/protocols").json()["items"]}
    assert protocols["ollama-draft"]["submissions"] == COUNT
    assert protocols["hardnumbers-m2"]["submissions"] == 1
    assert len(protocols["hardnumbers-m2"]["sha256"]) == 64
    # every accepted version in its own words (the two mended ones: Protocol.published_sha256)
    items = client.get("/v1/protocols").json()["items"]
    old = next(p for p in items if (p["id"], p["version"]) == ("llamacpp-draft", 1))
    assert "designed from" in old["description"]
    assert not any(re.search(r"\bissues? ?#?\d+", p["description"], re.I) for p in items)
    stats = client.get("/v1/stats").json()
    assert stats["submissions"] == COUNT + 1
    assert stats["contributors"] == 4
    assert stats["imported"] == 1
    per_run = {p: len(get_protocol(p).schedule()) for p in ("ollama-draft", "hardnumbers-m2")}
    assert stats["trials"] == COUNT * per_run["ollama-draft"] + per_run["hardnumbers-m2"]
    assert stats["draft_verdicts"]["confirmed"] == 2 * COUNT


def test_min_contributors_comes_from_settings(store):
    from specserver.http.app import create_app

    engine, _ = store
    url = str(engine.url).removeprefix("duckdb:///")
    engine.dispose()
    app = create_app(ServerSettings(database_url=url, min_contributors=1))
    with InProcessClient(app, lifespan=False) as client:
        body = client.get("/v1/leaderboard", params={"chip": "Apple M2"}).json()
    assert body["min_contributors"] == 1
    assert all(not g["few_results"] and g["p25_speedup"] is not None for g in body["groups"])


def test_the_page_escapes_what_contributors_send(client, store):
    engine, _ = store
    machine = dict(EXAMPLE_MACHINES[0], chip='<script>alert("x")</script> & M2')
    sub = example_submission("ollama-draft", seed=31337, engine_version="0.30.1", machine=machine,
                             counters_seen=True, created_at=datetime(2026, 11, 1, tzinfo=UTC))
    sid = insert_submission(engine, sub, key(9), received_at=BASE_TIME + timedelta(days=3))
    for path in ("/", f"/submissions/{sid}"):
        page = client.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "<script>" not in page.text
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; M2" in page.text


@pytest.mark.postgres
def test_the_public_api_on_postgres(postgres_url):
    engine = create_engine(postgres_url)
    tables.metadata.create_all(engine)
    try:
        ids = fill(engine, 9)
        app = FastAPI()
        app.state.settings = ServerSettings()  # as create_app does: the pages read it too
        install_error_handlers(app)
        public.install(app, ReadService(engine, wait_s=READ_WAIT_S))
        app.include_router(page_routes.router)  # the page below is read on PostgreSQL too
        with InProcessClient(app, lifespan=False) as client:
            seen, cursor = [], None
            while True:
                params = {"limit": 4} | ({"cursor": cursor} if cursor else {})
                body = client.get("/v1/submissions", params=params).json()
                seen += [i["submission_id"] for i in body["items"]]
                if not (cursor := body["next_cursor"]):
                    break
            assert seen == list(reversed(ids))
            board = client.get("/v1/leaderboard").json()
            assert sum(g["submissions"] for g in board["groups"]) == 2 * 9
            per_run = len(get_protocol("ollama-draft").schedule())
            assert client.get("/v1/stats").json()["trials"] == 9 * per_run
            rows = list(csv.DictReader(io.StringIO(client.get("/v1/export").text)))
            assert len(rows) == 9 * 3
            page = client.get("/", params={"chip": "Apple M2"})
            assert page.status_code == 200 and 'class="group"' in page.text
    finally:
        engine.dispose()


def test_reads_may_reuse_a_version_for_max_stale_s(store):
    engine, _ = store
    app = FastAPI()
    install_error_handlers(app)
    public.install(app, ReadService(engine, max_stale_s=3600, wait_s=READ_WAIT_S))
    with InProcessClient(app, lifespan=False) as client:
        before = client.get("/v1/stats")
        sub = example_submission("ollama-draft", seed=2024, engine_version="0.30.1",
                                 created_at=datetime(2026, 11, 1, tzinfo=UTC))
        insert_submission(engine, sub, key(5), received_at=BASE_TIME + timedelta(days=4))
        after = client.get("/v1/stats")
        # Same version, so the same ETag and the same (consistent) body.
        assert after.headers["etag"] == before.headers["etag"]
        assert after.json()["submissions"] == before.json()["submissions"] == COUNT + 1


@pytest.mark.parametrize(("path", "params", "code", "allowed_contains"), [
    ("/v1/leaderboard", {"chip": "Apple M9"}, "unknown_chip", "Apple M2"),
    ("/v1/leaderboard", {"memory_gb": 999}, "unknown_memory_gb", 24),
    ("/v1/aggregates", {"target": "llama3:8b"}, "unknown_target", "qwen3.5:9b-mtp"),
    ("/v1/submissions", {"draft": "spec_16"}, "unknown_draft", "spec_4"),
    ("/v1/export", {"ollama_version": "9.9.9"}, "unknown_ollama_version", "0.30.1"),
])
def test_filter_values_no_submission_has_are_422_listing_those_there_are(
        client, path, params, code, allowed_contains):
    response = client.get(path, params=params)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == code and allowed_contains in error["details"]["allowed"]
    # Draft models count as draft values too.
    assert client.get("/v1/leaderboard", params={"draft": "qwen2.5:0.5b"}).status_code == 200


def test_a_hidden_submission_keeps_its_page_with_a_banner(client, store):
    engine, ids = store
    with engine.begin() as conn:
        conn.execute(update(tables.submissions).where(
            tables.submissions.c.submission_id == ids[0]).values(hidden=True))
    page = client.get(f"/submissions/{ids[0]}").text
    assert "Hidden by a maintainer" in page
    listed = client.get("/v1/submissions", params={"limit": 100}).json()["items"]
    assert ids[0] not in {i["submission_id"] for i in listed}
    assert "Hidden by a maintainer" not in client.get(f"/submissions/{ids[1]}").text
