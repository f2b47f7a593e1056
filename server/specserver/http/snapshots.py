"""The signed snapshots over HTTP: the newest at stable URLs,
``/v1/snapshots/latest.parquet`` and ``/v1/snapshots/latest.manifest`` (a signed note,
``snapshots/manifest.py``), and ``POST /admin/v1/snapshot``, which writes one now.

A snapshot is written every ``snapshot_interval_s`` by a thread the app's lifespan starts
(``SnapshotTimer``), signed with the transparency log's key, its checkpoint's root read
from the log's tiles (``http/log.py``'s ``LogService``). One is written at a time.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool

from specserver.errors import NotFound
from specserver.http.admin import Actor
from specserver.http.errors import error_doc
from specserver.http.log import LogService
from specserver.licence import LICENCE_ID, LINK_HEADER
from specserver.settings import ServerSettings
from specserver.snapshots import Snapshot, SnapshotTimer, due_in, newest, write_snapshot
from specserver.store import Store

router = APIRouter(tags=["public"])
admin_router = APIRouter(prefix="/admin/v1", tags=["admin"])
LATEST_CACHE = "public, max-age=60, must-revalidate"
PARQUET = "application/vnd.apache.parquet"
TEXT = "text/plain; charset=utf-8"


class Timers:
    """Periodic jobs started and stopped as one."""

    def __init__(self, timers: tuple[SnapshotTimer, ...]) -> None:
        self.timers = timers

    def start(self) -> None:
        for timer in self.timers:
            timer.start()

    def stop(self) -> None:
        for timer in self.timers:
            timer.stop()


class SnapshotService:
    def __init__(self, store: Store, log: LogService, settings: ServerSettings) -> None:
        self.store = store
        self.log = log
        self.folder = settings.resolved_snapshot_dir
        self.keep = settings.snapshot_keep
        self._lock = threading.Lock()
        # The app's lifespan starts and stops this one object: the snapshots' timer and
        # the log's checkpoint timer together.
        self.timer = Timers((
            SnapshotTimer(self.write, settings.snapshot_interval_s,
                          lambda: due_in(self.folder, settings.snapshot_interval_s)),
            log.timer))

    def write(self) -> Snapshot:
        with self._lock:
            return write_snapshot(self.store.engine, self.folder, self.store.scratch_dir,
                                  self.log.signer, self.log.tree.root, keep=self.keep)

    def newest(self) -> tuple[Path, Path]:
        found = newest(self.folder)
        if found is None:
            raise NotFound("no snapshot has been written yet", {})
        return found


def service_of(request: Request) -> SnapshotService:
    service: SnapshotService = request.app.state.snapshots
    return service


def _headers(manifest: Path) -> dict[str, str]:
    # The manifest's name holds its time and log size: an ETag that moves with each snapshot.
    return {"Cache-Control": LATEST_CACHE, "ETag": f'"{manifest.stem}"', "Link": LINK_HEADER,
            "X-Data-License": LICENCE_ID}


@router.get("/v1/snapshots/latest.manifest",
            summary="The newest snapshot's manifest, signed with the log's key",
            response_class=Response,
            responses={200: {"content": {TEXT: {}}}, 404: error_doc("no snapshot yet")})
def latest_manifest(request: Request) -> Response:
    """A signed note: the log's checkpoint when the rows were read, the Parquet file's
    sha256 and size, its row count, the store's schema version, the licence (CC BY 4.0),
    when it was written and the query that selected the rows."""
    manifest, _ = service_of(request).newest()
    return Response(manifest.read_bytes(), media_type=TEXT, headers=_headers(manifest))


@router.get("/v1/snapshots/latest.parquet",
            summary="The newest snapshot of the public data (Parquet, CC BY 4.0)",
            response_class=Response,
            responses={200: {"content": {PARQUET: {}}}, 404: error_doc("no snapshot yet")})
def latest_parquet(request: Request) -> Response:
    """Every visible submission x config (the export's columns) when the snapshot was
    written; its sha256 is in ``latest.manifest``."""
    manifest, parquet = service_of(request).newest()
    headers = {**_headers(manifest),
               "Content-Disposition": f'attachment; filename="{parquet.name}"'}
    return FileResponse(parquet, media_type=PARQUET, headers=headers)


@admin_router.post("/snapshot", status_code=201)
async def snapshot_now(request: Request, actor: Actor) -> dict[str, Any]:
    """Write a signed snapshot now; its manifest's fields."""
    written = await run_in_threadpool(service_of(request).write)
    m = written.manifest
    return {"file": written.parquet.name, "rows": m.rows, "parquet_sha256": m.parquet_sha256,
            "parquet_bytes": m.parquet_bytes, "log_size": m.checkpoint.size,
            "schema_version": m.schema_version, "licence": m.licence, "created": m.created}


def install(app: FastAPI, settings: ServerSettings, store: Store) -> SnapshotService:
    """Add the snapshot routes (after ``log.install``: the log signs them)."""
    service = SnapshotService(store, app.state.log, settings)
    app.state.snapshots = service
    app.include_router(router)
    app.include_router(admin_router)
    return service
