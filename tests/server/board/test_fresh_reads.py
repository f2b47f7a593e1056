"""Board reads never wait for a recomputation: they serve the last computed board, say how
fresh it is, and the refresher brings it up to date beside them (board/leaderboard.py).

A recomputation is held back on an Event: a read that returns while it is held cannot have
waited for it (no timings). Reads here never wait (``wait_s`` 0) and look at the store's
data version on every read (``check_s`` 0)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import Connection, Engine, create_engine

from specschema.examples import example_submission
from specserver.board import aggregate
from specserver.board.leaderboard import ReadService
from specserver.board.snapshots import Board
from specserver.http import caching, public
from specserver.http.errors import install_error_handlers
from specserver.http.page import routes as page_routes
from specserver.settings import ServerSettings
from specserver.store import queries, tables
from tests.support.boardfill import BASE_TIME, fill, insert_submission, key, new_engine
from tests.support.inprocess import InProcessClient

COUNT = 6


@pytest.fixture
def engine(tmp_path) -> Iterator[Engine]:
    engine = new_engine(tmp_path / "store.duckdb")
    fill(engine, COUNT)
    yield engine
    engine.dispose()


class HeldComputation:
    """Wraps ``ReadService.compute_board``: once ``hold()`` is called, every computation
    waits for ``release()`` (and may run ``before`` first, once, or raise ``error``)."""

    def __init__(self, reads: ReadService) -> None:
        self.original = reads.compute_board
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.error: Exception | None = None
        self.before: Any = None
        reads.compute_board = self  # type: ignore[method-assign]

    def hold(self) -> None:
        self.gate.clear()
        self.started.clear()

    def release(self) -> None:
        self.gate.set()

    def __call__(self, conn: Connection, version: str, *args: Any) -> Board:
        self.started.set()
        assert self.gate.wait(30), "the test never released the computation"
        before, self.before = self.before, None  # once
        if before is not None:
            before()
        if self.error is not None:
            raise self.error
        return self.original(conn, version, *args)


@pytest.fixture
def pg_engine(postgres_url) -> Iterator[Engine]:
    engine = create_engine(postgres_url)
    tables.metadata.create_all(engine)
    fill(engine, COUNT)
    yield engine
    engine.dispose()


@pytest.fixture
def served(engine) -> Iterator[tuple[InProcessClient, ReadService, HeldComputation]]:
    reads = ReadService(engine, wait_s=0, retry_s=0, check_s=0)
    held = HeldComputation(reads)
    app = FastAPI()
    app.state.settings = ServerSettings()
    install_error_handlers(app)
    public.install(app, reads)
    app.include_router(page_routes.router)
    with InProcessClient(app, lifespan=False) as client:
        yield client, reads, held
    held.release()
    reads.close()


def _add(engine: Engine, seed: int) -> str:
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1",
                             created_at=datetime(2026, 11, 1, tzinfo=UTC))
    return insert_submission(engine, sub, key(seed), received_at=BASE_TIME + timedelta(days=3))


def _submissions(response: Any) -> int:
    """Draft results the filters match (on a board or not): two per example submission."""
    return sum(response.json()["verdict_counts"].values())


@pytest.mark.parametrize("path", ["/v1/leaderboard", "/v1/aggregates?group_by=chip", "/"])
def test_a_read_during_a_recomputation_serves_the_last_board_at_once(served, engine, path):
    client, reads, held = served
    first = client.get(path)
    assert first.status_code == 200 and first.headers[caching.CURRENT] == "true"
    held.hold()
    _add(engine, 9001)
    during = client.get(path)  # the recomputation this read asked for is held
    assert held.started.wait(30)
    assert during.status_code == 200 and during.content == first.content
    # Labelled with the data it shows: the old version's ETag, and it says it is behind.
    assert during.headers["etag"] == first.headers["etag"]
    assert during.headers[caching.AS_OF] == first.headers[caching.AS_OF]
    assert during.headers[caching.CURRENT] == "false"
    assert float(during.headers[caching.AGE]) >= float(first.headers[caching.AGE])
    again = client.get(path, headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.headers[caching.CURRENT] == "false"
    held.release()
    assert reads.settle()
    after = client.get(path, headers={"If-None-Match": first.headers["etag"]})
    assert after.status_code == 200 and after.headers["etag"] != first.headers["etag"]
    assert after.headers[caching.CURRENT] == "true"
    assert after.headers[caching.AS_OF] > first.headers[caching.AS_OF]
    assert reads.refreshes >= 1
    if path == "/v1/leaderboard":
        assert _submissions(after) > _submissions(first)
    if path == "/":
        assert "These boards count the results received up to" in after.text


@pytest.mark.parametrize(("path", "renderer"), [
    ("/v1/leaderboard?sort=key", (public, "board_json")),
    ("/v1/aggregates?group_by=chip", (public, "board_json")),
    ("/", (page_routes, "page_response")),
])
def test_the_refresher_renders_a_read_body_before_its_board_is_served(
        served, engine, monkeypatch, path, renderer):
    """The first read after a recomputation finds its body rendered already (the
    refresher renders the bodies read most recently before it serves the new snapshot):
    the body is rendered once per snapshot, by the refresher, never by that read."""
    client, reads, _ = served
    module, name = renderer
    original = getattr(module, name)
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    first = client.get(path)
    assert first.status_code == 200 and len(calls) == 1
    _add(engine, 9010)
    behind = client.get(path)  # finds its board behind: the refresher recomputes it
    assert behind.headers["etag"] == first.headers["etag"] and len(calls) == 1
    assert reads.settle()
    rendered = len(calls)
    assert rendered == 2  # by the refresher, for the new snapshot
    after = client.get(path)
    assert after.headers["etag"] != first.headers["etag"] and len(calls) == rendered
    assert after.content != first.content


def test_each_new_snapshot_is_handed_to_the_hooks_before_it_is_served(engine, caplog):
    """``before_serving``: the refresher hands each snapshot it computed to the hooks
    (with its key) before a read can see it; a hook that fails is logged and the snapshot
    is served all the same."""
    reads = ReadService(engine, wait_s=0, check_s=0)
    dims = held_dimensions()
    key = reads.board_key(queries.Filters(), dims, "speedup")
    seen: list[tuple[Any, str, str]] = []  # (key, its version, the version served then)

    def hook(of: Any, snapshot: Any) -> None:
        seen.append((of, snapshot.version, reads.latest(of, lambda c, v: None).version))

    def broken(of: Any, snapshot: Any) -> None:
        raise RuntimeError("a hook that fails")

    reads.before_serving(hook)
    reads.before_serving(broken)
    try:
        first = reads.board(queries.Filters(), dims, "speedup")
        assert seen == []  # a first computation is served as it is computed
        _add(engine, 9200)
        reads.board(queries.Filters(), dims, "speedup")  # finds it behind
        with caplog.at_level(logging.WARNING, logger="specserver.board.leaderboard"):
            assert reads.settle()
        served = reads.board(queries.Filters(), dims, "speedup")
        assert served.version != first.version
        assert seen == [(key, served.version, first.version)]
        assert "a hook before serving a new snapshot failed" in caplog.text
    finally:
        reads.close()


def test_a_board_is_recomputed_at_most_once_per_refresh_interval(engine):
    """``refresh_s``: a board found behind within the interval after its last computation
    waits for the interval's end (here an hour: it is not recomputed meanwhile), and serves
    the last board meanwhile; with 0 it is recomputed at once."""
    dims = held_dimensions()
    for refresh_s, recomputed in ((3600.0, False), (0.0, True)):
        reads = ReadService(engine, wait_s=0, check_s=0, refresh_s=refresh_s)
        try:
            first = reads.board(queries.Filters(), dims, "speedup")
            _add(engine, 9100 + int(refresh_s))
            assert reads.board(queries.Filters(), dims, "speedup") is first
            assert reads.settle(timeout_s=1.0) is recomputed
            assert (reads.refreshes == 1) is recomputed
        finally:
            reads.close()


def test_board_reads_never_query_the_store_themselves_after_the_first(engine):
    """With a check window (``check_s``), a board read answers from memory: the store's data
    version is read by the refresher thread, which asks for the boards behind it; the new
    submission still shows, without any read having waited or queried."""
    reads = ReadService(engine, wait_s=0, check_s=0.01)
    readers: list[str] = []
    original = reads.version

    def version() -> str:
        readers.append(threading.current_thread().name)
        return original()

    reads.version = version  # type: ignore[method-assign]
    try:
        dims = held_dimensions()
        first = reads.board(queries.Filters(), dims, "speedup")
        reads.board(queries.Filters(), dims, "speedup")  # the first look, by the read
        _add(engine, 9200)
        del readers[:]
        for _ in range(2000):  # ~20 s at most; each read returns at once
            shown = reads.board(queries.Filters(), dims, "speedup")
            if shown.version != first.version:
                break
            threading.Event().wait(0.01)
        assert shown.version != first.version
        assert sum(shown.value.verdict_counts.values()) == sum(
            first.value.verdict_counts.values()) + 2
        assert readers and set(readers) == {"board-refresher"}
    finally:
        reads.close()


def test_a_new_submission_shows_after_the_refresh(served, engine):
    client, reads, _ = served
    before = client.get("/v1/stats").json()["submissions"]
    board = client.get("/v1/leaderboard")
    listed = client.get("/").text
    sid = _add(engine, 9002)
    client.get("/v1/leaderboard")  # finds its board behind: the refresher recomputes it
    assert reads.settle()
    shown = client.get("/v1/leaderboard")
    assert _submissions(shown) == _submissions(board) + 2  # two draft configs
    assert client.get("/v1/stats").json()["submissions"] == before + 1
    client.get("/")  # finds the page behind (or already refreshed by the reads above)
    assert reads.settle()
    assert sid[:8] not in listed and sid[:8] in client.get("/").text  # the recent list too


def test_the_version_labels_exactly_the_data_the_board_shows(served, engine):
    """A write committed while a board is computed is not in it, and its version is the
    one read on the computation's own connection: the board is labelled neither newer nor
    older than it is, and the next read finds it behind."""
    client, reads, held = served
    first = client.get("/v1/leaderboard")
    version_before = reads.version()
    held.hold()
    held.before = lambda: _add(engine, 9003)  # commits after the computation's version read
    _add(engine, 9004)
    client.get("/v1/leaderboard")
    held.release()
    assert reads.settle()
    snapshot = reads.board(queries.Filters(), held_dimensions(), "speedup")
    assert snapshot.version != version_before
    assert sum(snapshot.value.verdict_counts.values()) == _submissions(first) + 2  # 9004 only
    assert reads.version() != snapshot.version  # 9003 came after: behind, asks again
    client.get("/v1/leaderboard")
    assert reads.settle()
    assert _submissions(client.get("/v1/leaderboard")) == _submissions(first) + 4


def held_dimensions() -> list[str]:
    return aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY)


def test_a_failed_recomputation_is_logged_and_reads_go_on(served, engine, caplog):
    client, reads, held = served
    first = client.get("/v1/leaderboard")
    held.error = RuntimeError("the database went away")
    _add(engine, 9005)
    with caplog.at_level(logging.ERROR, logger="specserver.board.leaderboard"):
        during = client.get("/v1/leaderboard")
        assert reads.settle()
        later = client.get("/v1/leaderboard")  # asks again (retry_s 0), fails again
        assert reads.settle()
    assert during.status_code == later.status_code == 200
    assert later.content == first.content and later.headers["etag"] == first.headers["etag"]
    # Visible: the board keeps its time and ages, and says it is behind.
    assert later.headers[caching.AS_OF] == first.headers[caching.AS_OF]
    assert later.headers[caching.CURRENT] == "false"
    assert float(later.headers[caching.AGE]) >= float(during.headers[caching.AGE])
    assert reads.failures >= 2 and isinstance(reads.last_error, RuntimeError)
    assert any("board computation failed" in r.getMessage() and r.exc_info
               for r in caplog.records)
    held.error = None  # the store is back: the next read's request succeeds
    client.get("/v1/leaderboard")
    assert reads.settle()
    assert _submissions(client.get("/v1/leaderboard")) == _submissions(first) + 2


def test_max_stale_s_spaces_recomputations(engine):
    reads = ReadService(engine, wait_s=0, max_stale_s=3600, check_s=0)
    try:
        dims = held_dimensions()
        first = reads.board(queries.Filters(), dims, "speedup")
        _add(engine, 9006)
        assert reads.board(queries.Filters(), dims, "speedup") is first  # the version is reused
        reads.max_stale_s = 0  # the window passes: the next read finds it behind
        reads.board(queries.Filters(), dims, "speedup")
        assert reads.settle()
        assert reads.board(queries.Filters(), dims, "speedup").version != first.version
    finally:
        reads.close()


def test_board_reads_look_at_the_data_version_at_most_every_check_s(engine):
    reads = ReadService(engine, wait_s=0, check_s=3600)
    try:
        dims = held_dimensions()
        first = reads.board(queries.Filters(), dims, "speedup")
        reads.board(queries.Filters(), dims, "speedup")  # reads the version once more
        _add(engine, 9007)
        assert reads.board(queries.Filters(), dims, "speedup") is first  # not looked at
        assert reads.freshness(first).current  # as far as this server has looked
        reads.check_s = 0
        reads.board(queries.Filters(), dims, "speedup")
        assert reads.settle()
        assert reads.board(queries.Filters(), dims, "speedup").version != first.version
    finally:
        reads.close()


@pytest.mark.postgres
def test_two_services_on_postgres_each_keep_their_own_board(pg_engine):
    """Two server processes on one database: each serves its last board at once and
    refreshes it from the one store, labelled with the data version it shows."""
    first, second = (ReadService(pg_engine, wait_s=0, check_s=0) for _ in range(2))
    try:
        dims = held_dimensions()
        old = [reads.board(queries.Filters(), dims, "speedup") for reads in (first, second)]
        assert old[0].version == old[1].version
        held = HeldComputation(first)
        held.hold()
        _add(pg_engine, 9008)
        assert first.board(queries.Filters(), dims, "speedup") is old[0]  # held: at once
        assert held.started.wait(30)
        second.board(queries.Filters(), dims, "speedup")
        assert second.settle()
        fresh = second.board(queries.Filters(), dims, "speedup")
        assert fresh.version != old[1].version and fresh.version == second.version()
        assert not first.freshness(old[0]).current
        held.release()
        assert first.settle()
        assert first.board(queries.Filters(), dims, "speedup").version == fresh.version
    finally:
        first.close()
        second.close()
