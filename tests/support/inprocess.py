"""The one synchronous in-process client for an ASGI app, every test's way in without a socket.

httpx's ASGITransport on an event loop in a background thread (anyio's blocking portal):
the loop keeps running between requests, so the app's background work (the writer's
futures, cache reloads) goes on as in a server, and several test threads may send at once.
A test can choose the peer address of every request (rate limits are per address), stream
a body without Content-Length (optionally slowly), send many requests concurrently, and run
its own coroutine on the app's loop. starlette's TestClient is not used: importing it warns
(httpx is deprecated there), and warnings are errors in this suite.

``lifespan=False`` leaves the app's lifespan alone, for an app assembled by hand around a
store that the test opened itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any, TypeVar

import anyio.from_thread
import httpx

DEFAULT_PEER = ("203.0.113.10", 50000)
BASE_URL = "http://testserver"

T = TypeVar("T")


async def _async_chunks(chunks: Iterable[bytes], delay: float) -> AsyncIterator[bytes]:
    for chunk in chunks:
        if delay:
            await asyncio.sleep(delay)
        yield chunk


class InProcessClient:
    def __init__(self, app: Any, *, lifespan: bool = True,
                 peer: tuple[str, int] = DEFAULT_PEER,
                 raise_app_exceptions: bool = True) -> None:
        self.app = app
        self.peer = peer
        self._lifespan_wanted = lifespan
        self._raise_app_exceptions = raise_app_exceptions
        self._stack = contextlib.ExitStack()
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._lifespan: Any = None

    def __enter__(self) -> InProcessClient:
        self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        if self._lifespan_wanted:
            self._lifespan = self.app.router.lifespan_context(self.app)
            try:
                self._portal.call(self._lifespan.__aenter__)
            except BaseException:
                self._stack.close()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._portal is not None
        try:
            if self._lifespan is not None:
                self._portal.call(self._lifespan.__aexit__, None, None, None)
        finally:
            self._stack.close()

    def run(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` on the app's event loop and return its result."""
        assert self._portal is not None, "use the client as a context manager"

        async def wait() -> T:
            return await awaitable

        return self._portal.call(wait)

    async def send(self, method: str, url: str, *, peer: tuple[str, int] | None = None,
                   stream: Iterable[bytes] | None = None, delay: float = 0.0,
                   **kwargs: Any) -> httpx.Response:
        """One request, on the app's loop; ``stream`` sends the body in those chunks
        (``delay`` seconds before each), with no Content-Length. Other keyword arguments
        go to httpx (``content``, ``headers``, ``params``, ``json``...)."""
        transport = httpx.ASGITransport(app=self.app, client=peer or self.peer,
                                        raise_app_exceptions=self._raise_app_exceptions)
        if stream is not None:
            kwargs["content"] = _async_chunks(stream, delay)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            response = await client.request(method, url, **kwargs)
            await response.aread()
            return response

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.run(self.send(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def options(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("OPTIONS", url, **kwargs)

    def post_all(self, url: str, bodies: Iterable[bytes]) -> list[httpx.Response]:
        """Every body POSTed at once (concurrent on the app's loop), responses in order."""

        async def all_of() -> list[httpx.Response]:
            return list(await asyncio.gather(*(self.send("POST", url, content=body)
                                               for body in bodies)))

        return self.run(all_of())
