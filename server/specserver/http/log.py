"""The transparency log over HTTP, as C2SP tlog-tiles: ``/log/checkpoint`` (a signed note,
briefly cached), ``/log/tile/<L>/<N>[.p/<W>]`` and ``/log/tile/entries/<N>[.p/<W>]``
(immutable: cached for a year, so a CDN or an object store can serve them), and
``/log/key``, the verifier key of the checkpoints' signature. ``/log/index/<N>[.p/<W>]``
(not C2SP: this log's own) says in JSON what each entry of bundle N names, for auditors
(``store/logindex.py``).

A checkpoint is signed at most every ``log_checkpoint_s`` while the log grows; an
unchanged log keeps its last one. A timer (``log_checkpoint_timer_s``; started with the
snapshots' timer by the app's lifespan) asks for one that often, so that a checkpoint
covering the newest entries is signed a few seconds after they are committed even when
nobody reads ``/log/checkpoint``. A tile or bundle the log does not hold yet is 404, as a
static file would be; its path is read as the spec writes it (``x001/x234/067``) and any
other spelling is 404 too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import Engine

from specschema.errors import TileInvalid
from specschema.tlog import (
    TILE_WIDTH,
    Checkpoint,
    Signer,
    parse_tile_path,
    sign_checkpoint,
    tile_width,
)
from specserver.errors import NotFound
from specserver.http.errors import error_doc
from specserver.http.logkey import load_or_create
from specserver.settings import ServerSettings
from specserver.snapshots import SnapshotTimer
from specserver.store import LogTree, index_of

router = APIRouter(tags=["log"])
IMMUTABLE = "public, max-age=31536000, immutable"
CHECKPOINT_CACHE = "public, max-age=2, must-revalidate"
TEXT = "text/plain; charset=utf-8"
TILE = "application/octet-stream"


class LogService:
    """The tree's tiles and its signed checkpoints; the key is read on first use."""

    def __init__(self, tree: LogTree, signer: Callable[[], Signer], interval_s: float,
                 clock: Callable[[], float] = time.monotonic, timer_s: float = 0.0) -> None:
        self.tree = tree
        self.timer = SnapshotTimer(self.checkpoint, timer_s, job="checkpoints")
        self._load_signer = signer
        self._signer: Signer | None = None
        self.interval_s = interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._note: tuple[float, int, bytes] | None = None  # made at, size, note

    @property
    def signer(self) -> Signer:
        if self._signer is None:
            self._signer = self._load_signer()
        return self._signer

    @property
    def latest(self) -> bytes | None:
        """The newest checkpoint signed so far, without signing one."""
        note = self._note
        return None if note is None else note[2]

    def checkpoint(self) -> bytes:
        with self._lock:
            now = self.clock()
            if self._note is not None and now - self._note[0] < self.interval_s:
                return self._note[2]
            size = self.tree.size()
            if self._note is not None and self._note[1] == size:
                note = self._note[2]
            else:
                checkpoint = Checkpoint(self.signer.name, size, self.tree.root(size))
                note = sign_checkpoint(checkpoint, self.signer).encode()
            self._note = (now, size, note)
            return note


def service_of(request: Request) -> LogService:
    service: LogService = request.app.state.log
    return service


@router.get("/log/checkpoint", summary="The log's newest signed checkpoint (C2SP signed note)",
            response_class=Response,
            responses={200: {"content": {TEXT: {}}}})
def checkpoint(request: Request) -> Response:
    return Response(service_of(request).checkpoint(), media_type=TEXT,
                    headers={"Cache-Control": CHECKPOINT_CACHE})


@router.get("/log/key", summary="The verifier key of the log's checkpoints",
            response_class=Response, responses={200: {"content": {TEXT: {}}}})
def verifier_key(request: Request) -> Response:
    return Response(service_of(request).signer.verifier.vkey + "\n", media_type=TEXT,
                    headers={"Cache-Control": CHECKPOINT_CACHE})


@router.get("/log/tile/{path:path}", summary="A tile of the log's tree or an entry bundle",
            response_class=Response,
            responses={200: {"content": {TILE: {}}},
                       404: error_doc("no such tile in the log (yet)")})
def tile(request: Request, path: str) -> Response:
    try:
        ref = parse_tile_path(path)
    except TileInvalid as exc:
        raise NotFound(f"not a tile: {exc.message}", {"path": path[:200]}) from None
    service = service_of(request)
    size = service.tree.size()
    if ref.level is None:
        body = service.tree.entry_bundle(ref.index, ref.width, size)
    else:
        body = service.tree.tile(ref.level, ref.index, ref.width, size)
    if body is None:
        raise NotFound("the log holds no such tile yet", {"path": ref.path})
    return Response(body, media_type=TILE, headers={"Cache-Control": IMMUTABLE})


@router.get("/log/index/{path:path}", summary="What the entries of an entry bundle name",
            responses={404: error_doc("no such bundle in the log (yet)")})
def entry_index(request: Request, path: str) -> Response:
    """For bundle N (entries 256·N ..), in order: an envelope entry's submission id, or a
    moderation entry's decision as the public history shows it and the indexes it
    affects (its hash recomputes from them; ``decision`` null: no audit row does)."""
    try:
        ref = parse_tile_path("tile/entries/" + path)
    except TileInvalid as exc:
        raise NotFound(f"not a bundle: {exc.message}", {"path": path[:200]}) from None
    tree = service_of(request).tree
    if ref.width > tile_width(0, ref.index, tree.size()):
        raise NotFound("the log holds no such bundle yet", {"path": path[:200]})
    start = ref.index * TILE_WIDTH
    with tree.engine.connect() as conn:
        items = index_of(conn, start, start + ref.width)
    return JSONResponse({"items": items}, headers={"Cache-Control": CHECKPOINT_CACHE})


def install(app: FastAPI, settings: ServerSettings, engine: Engine) -> None:
    """Add the log's routes to ``app``, reading the store through ``engine``."""
    app.state.log = LogService(
        LogTree(engine),
        lambda: load_or_create(settings.resolved_log_key_file, settings.resolved_log_origin),
        settings.log_checkpoint_s, timer_s=settings.log_checkpoint_timer_s)
    app.include_router(router)
