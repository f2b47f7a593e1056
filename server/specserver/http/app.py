"""The app factory: ``create_app(settings) -> FastAPI``. Nothing connects at import time.

The store is built here (its engine is lazy) and opened by the lifespan: migrations run,
the single writer starts, then the check workers (``settings.check_workers``); at shutdown
the workers stop, the writer drains and the engine is disposed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from specserver import __version__
from specserver.board import ReadService
from specserver.http import admin, log, predict, probes, public, snapshots, submissions
from specserver.http.errors import install_error_handlers
from specserver.http.licenceheader import LicenceHeader
from specserver.http.page import routes as page_routes
from specserver.ingest import CheckPool, known_chips
from specserver.licence import LICENCE_NAME, LICENCE_URL, SENTENCE
from specserver.ratelimit import (
    CheckQueue,
    Limit,
    MemoryRateLimiter,
    RateLimiter,
    Schedule,
    rejections,
)
from specserver.settings import ServerSettings, get_settings
from specserver.store import Store


def default_rate_limiter(settings: ServerSettings) -> RateLimiter:
    limits = {
        "key": Limit(settings.rate_key_per_minute, settings.rate_key_burst),
        "address": Limit(settings.rate_addr_per_minute, settings.rate_addr_burst),
        rejections.SCOPE: Limit(settings.rate_reject_per_minute, settings.rate_reject_burst),
    }
    if settings.redis_url:  # replicas share their buckets (docs/deploying.md)
        from specserver.ratelimit import RedisRateLimiter

        return RedisRateLimiter.from_url(settings.redis_url, limits)
    return MemoryRateLimiter(limits)


def build_store(settings: ServerSettings) -> Store:
    return Store(
        settings.resolved_database_url,
        group_commit_s=settings.group_commit_ms / 1000.0,
        group_commit_max=settings.group_commit_max,
        ban_cache_s=settings.ban_cache_s,
        ban_wait_s=settings.ban_wait_s,
        duckdb_threads=settings.effective_duckdb_threads(),
        query_url=settings.admin_query_url,
        address_rotation_days=settings.address_hash_rotation_days,
        address_retention_days=settings.address_secret_retention_days,
    )


def _wall_clock() -> datetime:
    return datetime.now(UTC)


class SpecServer(FastAPI):
    """FastAPI, with POST /v1/submissions answered by ``submissions.ingest_asgi`` directly
    (same checks and errors as the documented route, less framework CPU per request)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"] == submissions.SUBMISSIONS_PATH):
            await submissions.ingest_asgi(self.state, scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(
    settings: ServerSettings | None = None,
    *,
    store: Store | None = None,
    rate_limiter: RateLimiter | None = None,
    clock: Callable[[], datetime] | None = None,
) -> FastAPI:
    """``clock`` stamps each submission's receipt (aware UTC). The board's rules measure
    time on the store's clock, its newest receipt, so a test that shortens the probation
    moves this clock instead of sleeping: its rounds of submissions then take no time."""
    settings = settings or get_settings()
    store = store or build_store(settings)
    limiter = rate_limiter or default_rate_limiter(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(store.open)
        pool = None
        try:
            if settings.check_workers:
                pool = CheckPool(settings.check_workers, submissions.check_limits(settings))
                await pool.start()
                app.state.check_pool = pool
            app.state.snapshots.timer.start()
            yield
        finally:
            app.state.check_pool = None
            await run_in_threadpool(app.state.snapshots.timer.stop)
            await run_in_threadpool(app.state.reads.close)  # before the engine goes
            if pool is not None:
                await pool.stop()
            app.state.export_files.clear()
            await run_in_threadpool(store.close)

    app = SpecServer(
        title="specatlas server",
        version=__version__,
        description="Collects signed speculative-decoding benchmark results and serves the "
                    f"leaderboard. {SENTENCE}",
        license_info={"name": f"the data: {LICENCE_NAME}", "url": LICENCE_URL},
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.store = store
    app.state.rate_limiter = limiter
    app.state.rejection_gate = rejections.RejectionGate(limiter)
    # every signed POST's checks wait their address's turn (ratelimit/checkqueue.py)
    app.state.check_queue = CheckQueue(Schedule(slots=max(1, settings.check_workers)))
    app.state.check_pool = None
    app.state.clock = clock or _wall_clock
    install_error_handlers(app)
    app.include_router(submissions.router)
    app.include_router(probes.router)  # POST /v1/probes

    # --- read side: public API, web page, admin API ------------------------------------
    # Reads use ``store.engine``; admin writes go through ``store.awrite`` (the one writer).
    reads = ReadService(store.engine, min_contributors=settings.min_contributors,
                        max_stale_s=settings.read_max_stale_s,
                        refresh_s=settings.board_refresh_s,
                        wait_s=settings.read_wait_s,
                        probation_days=settings.new_key_probation_days,
                        cohort_window_hours=settings.cohort_window_hours,
                        graduations_per_day=settings.range_graduations_per_day,
                        settle_days=settings.cohort_settle_days,
                        listed_chips=frozenset(c["name"] for c in known_chips()))
    public.install(app, reads)  # /v1 reads, CORS for GET
    predict.install(app)  # GET /v1/predict
    app.include_router(page_routes.router)  # the HTML page
    admin.install(app)  # /admin/v1, bearer token from settings.admin_token
    log.install(app, settings, store.engine)  # /log/: checkpoints and tiles
    snapshots.install(app, settings, store)  # /v1/snapshots/: signed Parquet snapshots
    app.add_middleware(LicenceHeader)  # the data's licence on every public read
    # --- end of read side -------------------------------------------------------------

    return app
