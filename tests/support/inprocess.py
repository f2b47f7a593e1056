"""A synchronous in-process client for the ASGI app, with its lifespan running.

httpx's ASGITransport on an event loop in a background thread (anyio's blocking portal),
so a test can choose the peer address of every request (rate limits are per address)
and stream a body without Content-Length. starlette's TestClient is not used: importing
it warns (httpx is deprecated there), and warnings are errors in this suite.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio.from_thread
import httpx

DEFAULT_PEER = ("203.0.113.10", 50000)


async def _async_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


class InProcessClient:
    def __init__(self, app: Any) -> None:
        self.app = app
        self._stack = contextlib.ExitStack()
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._lifespan: Any = None

    def __enter__(self) -> InProcessClient:
        self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        self._lifespan = self.app.router.lifespan_context(self.app)
        self._portal.call(self._lifespan.__aenter__)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._portal is not None
        try:
            self._portal.call(self._lifespan.__aexit__, None, None, None)
        finally:
            self._stack.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        stream: Iterator[bytes] | None = None,
        headers: dict[str, Any] | None = None,
        peer: tuple[str, int] = DEFAULT_PEER,
        params: Any = None,
    ) -> httpx.Response:
        assert self._portal is not None

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, client=peer)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
                body: Any = _async_chunks(stream) if stream is not None else content
                response = await c.request(method, url, content=body, headers=headers,
                                           params=params)
                await response.aread()
                return response

        return self._portal.call(send)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)
