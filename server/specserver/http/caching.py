"""Conditional GETs: an ETag from the store's data version and the request's URL,
Cache-Control, 304 on an If-None-Match naming that ETag before any work, and remembered
bodies (``RememberedBodies``: by ETag, and the bodies of a board read rendered again for
each new snapshot before it is served); and the freshness headers of a board read
(``freshness_headers``).

``If-None-Match: *`` (RFC 9110 13.1.2) matches only when a current representation exists:
a read that would answer 404 (no such submission) or 422 (a bad filter) answers that, and
``*`` is a 304 only where the answer would have been 200."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from specserver.board import Freshness, Lru, ReadService, Snapshot
from specserver.http.deps import reads_of

CACHE_CONTROL = "public, max-age=5, must-revalidate"
# A board read serves the last computed board (board/leaderboard.py); these say how fresh:
AS_OF = "Board-As-Of"  # when the state of the store it shows was read (ISO 8601, UTC)
AGE = "Board-Age"  # seconds since then, at this response
# "true": every write committed 0.1 s (``ReadService.check_s``) before the request is in it
CURRENT = "Board-Current"
FRESHNESS_HEADERS = (AS_OF, AGE, CURRENT)
T = TypeVar("T")

log = logging.getLogger(__name__)
Body = tuple[int, bytes, str]  # status, bytes, media type
# A body of one snapshot: (its ETag, status, bytes, media type), or None when it is not to
# be remembered (streamed, or not a 200).
Rendered = tuple[str, int, bytes, str] | None
Render = Callable[[Snapshot[Any]], Rendered]
WARM_BODIES = 4  # bodies of one snapshot rendered ahead, the most recently read
WARM_FOR_S = 30.0  # a body not read for this long is no longer rendered ahead


class RememberedBodies:
    """Rendered bodies by ETag (which covers the data version and the whole URL), and the
    render-ahead: for each board snapshot (by its key in ``ReadService``), the bodies read
    from it most recently are rendered again from each new snapshot the refresher
    computes, before that snapshot is served (``ReadService.before_serving``), so that
    the first read after a recomputation finds its body remembered instead of rendering
    it (a page at a million submissions takes tens of milliseconds to render)."""

    def __init__(self, reads: ReadService, size: int = 256) -> None:
        self._bodies: Lru[str, Body] = Lru(size)
        # snapshot key -> URL -> (render, last read), the most recently read last
        self._warm: Lru[Hashable, OrderedDict[str, tuple[Render, float]]] = Lru(size)
        self._lock = threading.Lock()
        reads.before_serving(self._render_ahead)

    def get(self, etag: str) -> Body | None:
        with self._lock:
            return self._bodies.get(etag)

    def remember(self, etag: str, body: Body) -> None:
        with self._lock:
            self._bodies.put(etag, body)

    def keep_warm(self, key: Hashable, url: str, render: Render) -> None:
        """Render this URL's body of snapshot ``key`` again from each new snapshot of it."""
        with self._lock:
            warm = self._warm.get(key)
            if warm is None:
                warm = OrderedDict()
                self._warm.put(key, warm)
            warm[url] = (render, time.monotonic())
            warm.move_to_end(url)
            while len(warm) > WARM_BODIES:
                warm.popitem(last=False)

    def _render_ahead(self, key: Hashable, snapshot: Snapshot[Any]) -> None:
        now = time.monotonic()
        with self._lock:
            warm = self._warm.items.get(key)  # not a use: no move in the LRU
            renders = [render for render, read in (warm or {}).values()
                       if now - read < WARM_FOR_S]
        for render in renders:
            try:
                rendered = render(snapshot)
            except Exception:  # noqa: BLE001 - the read renders it itself, and says why
                log.warning("rendering a body ahead failed", exc_info=True)
                continue
            if rendered is not None:
                etag, status, body, media_type = rendered
                self.remember(etag, (status, body, media_type))


def bodies_of(request: Request) -> RememberedBodies:
    bodies: RememberedBodies = request.app.state.bodies
    return bodies


def freshness_headers(fresh: Freshness) -> dict[str, str]:
    stamp = datetime.fromtimestamp(fresh.read_at, UTC).isoformat(timespec="milliseconds")
    return {AS_OF: stamp.replace("+00:00", "Z"), AGE: f"{fresh.age_s:.3f}",
            CURRENT: "true" if fresh.current else "false"}


def content_etag(body: bytes) -> str:
    """The ETag of a body that is its own version (one stored submission)."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def make_etag(version: str, request: Request) -> str:
    return url_etag(version, request.url.path, request.url.query)


def url_etag(version: str, path: str, query: str) -> str:
    basis = f"{version}\n{path}\n{query}".encode()
    return '"' + hashlib.sha256(basis).hexdigest()[:32] + '"'


def _tags(if_none_match: str | None) -> list[str]:
    if not if_none_match:
        return []
    return [t.strip().removeprefix("W/") for t in if_none_match.split(",")]


def matches(if_none_match: str | None, etag: str) -> bool:
    """If-None-Match (RFC 9110 13.1.2) against a representation that exists (one about to
    be answered 200): ``*`` matches any, a list by weak comparison."""
    tags = _tags(if_none_match)
    return "*" in tags or etag in tags


def names(if_none_match: str | None, etag: str) -> bool:
    """If-None-Match names ``etag`` itself: a 304 before the representation is built. ``*``
    does not: it matches only a current representation, so a read that would answer 404
    or 422 answers that (``conditional`` answers ``*`` once it has a 200)."""
    return etag in _tags(if_none_match)


def not_modified(request: Request, etag: str, *, exists: bool = False) -> Response | None:
    """A 304 when the client already has ``etag`` (``make_etag``), else None; ``exists``:
    a representation with that ETag is known to exist (then ``*`` matches too)."""
    header = request.headers.get("if-none-match")
    if matches(header, etag) if exists else names(header, etag):
        return Response(status_code=304, headers=cache_headers(etag))
    return None


def cache_headers(etag: str) -> dict[str, str]:
    return {"ETag": etag, "Cache-Control": CACHE_CONTROL}


def conditional(request: Request, version: str, build: Callable[[], Response],
                extra: Mapping[str, str] | None = None) -> Response:
    """304 when the client has this version; else the body built for this version and URL
    (remembered, except streamed responses), or ``build()``; with caching headers and
    ``extra`` ones (on a 304 too)."""
    etag = make_etag(version, request)
    unchanged = not_modified(request, etag)
    if unchanged is not None:
        unchanged.headers.update(extra or {})
        return unchanged
    headers = {**cache_headers(etag), **(extra or {})}
    bodies = bodies_of(request)
    cached = bodies.get(etag)
    if cached is not None:
        status, body, media_type = cached
        response: Response = Response(body, status_code=status, media_type=media_type,
                                      headers=headers)
    else:
        response = build()
        if not isinstance(response, StreamingResponse) and response.status_code == 200:
            bodies.remember(etag, (response.status_code, bytes(response.body),
                                   response.media_type or "application/octet-stream"))
        response.headers.update(headers)
    if response.status_code == 200:  # a current representation: ``*`` matches it
        unchanged = not_modified(request, etag, exists=True)
        if unchanged is not None:
            unchanged.headers.update(extra or {})
            return unchanged
    return response


def board_conditional(request: Request, key: Hashable, snapshot: Snapshot[T],
                      build: Callable[[Snapshot[T]], Response],
                      version_of: Callable[[Snapshot[T]], str] | None = None,
                      asked_at: float | None = None) -> Response:
    """``conditional`` for a read of a board snapshot (``ReadService.latest``), whose body
    the refresher also renders ahead for every new snapshot of ``key``
    (``RememberedBodies.keep_warm``):
    ``build`` renders the body of any snapshot of it, ``version_of`` names that body's
    version (default: the snapshot's data version); ``asked_at``: time.monotonic() when the
    read began, before it asked for the snapshot (``ReadService.freshness``)."""
    path, query = request.url.path, request.url.query

    def version(of: Snapshot[T]) -> str:
        return of.version if version_of is None else version_of(of)

    def render(of: Snapshot[T]) -> Rendered:
        response = build(of)
        if isinstance(response, StreamingResponse) or response.status_code != 200:
            return None
        return (url_etag(version(of), path, query), response.status_code,
                bytes(response.body), response.media_type or "application/octet-stream")

    bodies_of(request).keep_warm(key, f"{path}?{query}", render)
    return conditional(request, version(snapshot), lambda: build(snapshot),
                       freshness_headers(reads_of(request).freshness(snapshot, asked_at)))
