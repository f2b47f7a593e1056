"""GET /v1/export's delivery: a bounded number of exports, each streamed from a file.

Why: the export used to stream rows from a pooled DuckDB connection held while the
client read, so 15 clients that stopped reading held the whole pool and every read and POST
got 503; a cancelled stream gave its connection back only through the cyclic GC. Now:

- ``ExportSlots``: at most ``export_max_concurrent`` exports are in progress (waiting for
  their file or being sent), at most ``export_max_per_client`` per client address range;
  one more is ``Unavailable`` (503 with Retry-After, one error shape), refused before any
  database work. Files are written one at a time (``ExportSlots.writer``): a request whose
  file must be written waits at most ``export_build_wait_s`` for the writer; a request
  served from a kept file never waits for it. So a visitor who is not already downloading
  gets an export at once when a kept file serves it, and within ``export_build_wait_s``
  plus one file's writing otherwise, however many others download slowly (as long as
  fewer than ``export_max_concurrent`` do: a slot is a download, and its cost is a file
  descriptor, not a database connection or a file's CPU).
- the route writes the export with ``exporting.materialize``: a connection is held only
  while the file is written, never while a client reads.
- ``ExportFiles`` keeps each written file for the next requests with the same filters and
  format, for ``export_reuse_s`` after it was written or as long as the data version is
  the same: attackers who are dropped and ask again get the file that is there, and cost
  no rewrite (the soak, bench/stalled_exports.py). A file is never reused across a
  moderation action (hide, ban, reject...): what was withdrawn leaves the export at once;
  only new submissions may be up to ``export_reuse_s`` late.
- ``ExportFileResponse`` sends that file. A client that takes no data for
  ``export_send_timeout_s`` is dropped; on the end, a disconnect or a drop, the file is
  closed (it is already unlinked) and the slot freed, in ``__call__``'s ``finally``, never
  left to the garbage collector.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Hashable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from typing import IO

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from specserver.errors import Unavailable
from specserver.store import moderation_version

log = logging.getLogger("specserver")
CHUNK_BYTES = 64 * 1024  # what one stalled connection can leave buffered in the server


class ExportSlot:
    """One export in progress, held by one client address; ``release`` is idempotent."""

    def __init__(self, slots: ExportSlots, client: str) -> None:
        self._slots: ExportSlots | None = slots
        self.client = client

    def release(self) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots.release_one(self.client)


class ExportSlots:
    """A counter of exports in progress, in all and per client address range, safe across
    the threadpool and the event loop.

    The bound per address (``export_max_per_client``) is what keeps one person from holding
    every slot with a few stalled connections, and so every other visitor's export at 503.
    """

    def __init__(self, limit: int, retry_after_s: float, per_client: int | None = None) -> None:
        self.limit = limit
        self.per_client = per_client or limit
        self.retry_after_s = retry_after_s
        self.in_progress = 0
        self._by_client: dict[str, int] = {}
        self._lock = threading.Lock()
        # Held while a file is written: writing is CPU in Python (CSV, JSON), so more than
        # one at a time only makes the event loop wait longer for the GIL.
        self.writing = threading.Lock()

    def acquire(self, client: str = "") -> ExportSlot:
        with self._lock:
            if self._by_client.get(client, 0) >= self.per_client:
                raise Unavailable(
                    "this address has as many exports in progress as it may; retry later",
                    {"max_exports_per_client": self.per_client},
                    code="exports_busy", retry_after=self.retry_after_s)
            if self.in_progress >= self.limit:
                raise Unavailable(
                    "too many exports are in progress; retry later",
                    {"max_concurrent_exports": self.limit},
                    code="exports_busy", retry_after=self.retry_after_s)
            self.in_progress += 1
            self._by_client[client] = self._by_client.get(client, 0) + 1
        return ExportSlot(self, client)

    @contextmanager
    def writer(self, wait_s: float) -> Iterator[None]:
        """One export file written at a time: its CPU never comes in a burst."""
        if not self.writing.acquire(timeout=wait_s):
            raise Unavailable("the export cannot be written now; retry later",
                              code="exports_busy", retry_after=self.retry_after_s)
        try:
            yield
        finally:
            self.writing.release()

    def release_one(self, client: str) -> None:
        with self._lock:
            self.in_progress -= 1
            left = self._by_client.pop(client) - 1
            if left:
                self._by_client[client] = left


@dataclass(frozen=True)
class KeptExport:
    path: str
    version: str  # the data version the file was written at: its ETag
    written_at: float  # ExportFiles.clock()


class ExportFiles:
    """Written export files, kept for reuse by filters and format (at most ``keep`` files,
    the least recently asked for dropped first: filters are the client's to vary).

    A kept file is opened under the lock, so it is never unlinked between the lookup and
    the open; an open file outlives its unlinking (POSIX), so a file replaced or dropped
    while clients download it stays whole for them.
    """

    def __init__(self, reuse_s: float, keep: int = 8,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reuse_s = reuse_s
        self.keep = keep
        self.clock = clock
        self._kept: OrderedDict[Hashable, KeptExport] = OrderedDict()
        self._lock = threading.Lock()

    def _reusable(self, kept: KeptExport, version: str) -> bool:
        if kept.version == version:
            return True
        return (moderation_version(kept.version) == moderation_version(version)
                and self.clock() - kept.written_at < self.reuse_s)

    def open_kept(self, key: Hashable, version: str) -> tuple[IO[bytes], str] | None:
        """The kept file for ``key`` that may be served at data ``version``, opened, and
        the version it holds; None when there is none."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is None or not self._reusable(kept, version):
                return None
            self._kept.move_to_end(key)
            return open(kept.path, "rb"), kept.version  # noqa: SIM115 - the caller closes it

    def add(self, key: Hashable, version: str, path: str) -> IO[bytes]:
        """Open the new file ``path`` (written at ``version``) and keep it in place of the
        key's older one; the files this pushes out are unlinked."""
        handle = open(path, "rb")  # noqa: SIM115 - the caller closes it
        with self._lock:
            dropped = [self._kept.pop(key)] if key in self._kept else []
            self._kept[key] = KeptExport(path, version, self.clock())
            while len(self._kept) > self.keep:
                dropped.append(self._kept.popitem(last=False)[1])
        for kept in dropped:
            _unlink(kept.path)
        return handle

    def open_or_write(self, key: Hashable, version: str, writing: AbstractContextManager[None],
                      write: Callable[[], str]) -> tuple[IO[bytes], str]:
        """``open_kept``, else the file ``write()`` makes inside ``writing`` (one writer at
        a time), kept; with the version it holds."""
        ready = self.open_kept(key, version)
        if ready is not None:
            return ready
        with writing:
            # Another request may have written it while this one waited.
            ready = self.open_kept(key, version)
            if ready is not None:
                return ready
            return self.add(key, version, write()), version

    def clear(self) -> None:
        """Unlink every kept file (the server stops)."""
        with self._lock:
            dropped, self._kept = list(self._kept.values()), OrderedDict()
        for kept in dropped:
            _unlink(kept.path)


def _unlink(path: str) -> None:
    with suppress(FileNotFoundError):  # the store's scratch folder may be gone already
        os.unlink(path)


def _abort_connection(receive: Receive) -> None:
    """Reset the client's connection now, without flushing what is buffered for it.

    ASGI has no message for this, so it reaches for the server's transport: uvicorn's
    ``receive`` is a method of the request cycle, which holds it (h11 and httptools alike).
    Under another server nothing happens and the connection is closed the ordinary way.
    """
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    abort = getattr(transport, "abort", None)  # asyncio's and uvloop's transports have it
    if callable(abort):
        abort()


async def _file_chunks(handle: IO[bytes]) -> AsyncGenerator[bytes, None]:
    while chunk := await anyio.to_thread.run_sync(handle.read, CHUNK_BYTES):
        yield chunk


class ExportFileResponse(StreamingResponse):
    """An open export file, sent with a per-chunk deadline.

    A StreamingResponse, so ``caching.conditional`` never remembers its (empty) ``body``.
    """

    def __init__(self, handle: IO[bytes], slot: ExportSlot, *, media_type: str,
                 headers: Mapping[str, str], send_timeout_s: float) -> None:
        self.handle = handle
        self.slot = slot
        self.send_timeout_s = send_timeout_s
        self._chunks = _file_chunks(handle)
        size = os.fstat(handle.fileno()).st_size
        super().__init__(self._chunks, media_type=media_type,
                         headers={**headers, "Content-Length": str(size)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_in_time(message: Message) -> None:
            with anyio.fail_after(self.send_timeout_s):
                await send(message)

        try:
            await super().__call__(scope, receive, send_in_time)
        except TimeoutError:
            # The client had its chance. Returning before the response is complete makes
            # uvicorn close the connection, but asyncio closes a socket only once its
            # buffered bytes are flushed, which a client that never reads never allows.
            log.warning("export dropped: the client took no data for %g s",
                        self.send_timeout_s)
            _abort_connection(receive)
        finally:
            await self.close()

    async def close(self) -> None:
        """Close this request's handle on the file and free the slot (also when the
        response is never sent)."""
        try:
            await self._chunks.aclose()
        finally:
            self.handle.close()
            self.slot.release()
