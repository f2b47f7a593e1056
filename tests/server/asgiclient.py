"""A synchronous in-process client for an ASGI app (httpx over ASGITransport on a private
event loop), because starlette's TestClient warns about httpx on this stack."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class AsgiClient:
    def __init__(self, app: Any, base_url: str = "http://testserver") -> None:
        self._runner = asyncio.Runner()
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url=base_url)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._runner.run(self._client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def options(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("OPTIONS", url, **kwargs)

    def close(self) -> None:
        self._runner.run(self._client.aclose())
        self._runner.close()

    def __enter__(self) -> AsgiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
