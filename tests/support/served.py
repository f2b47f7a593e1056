"""Test helpers for ingestion: signed example submissions and an in-process served app.

``Served`` runs the app's lifespan (store opened: migrations, the writer thread) on a
private event loop and sends requests through httpx's ASGITransport, with a chosen peer
address and optionally a streamed body (no Content-Length).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import nacl.signing
from sqlalchemy import func, select

from specschema.envelope import envelope_bytes, sign_envelope
from specschema.examples import example_submission
from specschema.payload import submission_bytes
from specserver.http.app import create_app
from specserver.settings import ServerSettings
from specserver.store import tables

URL = "/v1/submissions"
PEER = ("203.0.113.5", 40000)


def signer(seed: int) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(hashlib.sha256(f"test-key-{seed}".encode()).digest())


def payload_dict(seed: int = 0, protocol: str = "hardnumbers-m2", **kwargs: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        submission_bytes(example_submission(protocol, seed=seed, **kwargs))
    )
    return data


def sign_bytes(payload: bytes, key_seed: int = 0) -> bytes:
    return envelope_bytes(sign_envelope(payload, signer(key_seed)))


def sign_dict(data: dict[str, Any], key_seed: int = 0) -> bytes:
    return sign_bytes(json.dumps(data).encode(), key_seed)


def valid_body(seed: int = 0, key_seed: int = 0, **kwargs: Any) -> bytes:
    return sign_bytes(submission_bytes(example_submission(seed=seed, **kwargs)), key_seed)


def settings_for(tmp: Path, **overrides: Any) -> ServerSettings:
    values: dict[str, Any] = {
        "database_url": str(tmp / "store.duckdb"),
        "rate_key_per_minute": 0,
        "rate_addr_per_minute": 0,
        "rate_reject_per_minute": 0,
        "ban_cache_s": 0,
        "public_base_url": "http://testserver",
        "group_commit_ms": 2,
    }
    values.update(overrides)
    return ServerSettings(**values)


async def _chunks(parts: Iterable[bytes], delay: float) -> AsyncIterator[bytes]:
    for part in parts:
        if delay:
            await asyncio.sleep(delay)
        yield part


class Served:
    """The app with its lifespan running, for synchronous tests."""

    def __init__(self, settings: ServerSettings, **app_kwargs: Any) -> None:
        self.settings = settings
        self.app = create_app(settings, **app_kwargs)
        self.runner = asyncio.Runner()
        self._lifespan: Any = None

    @property
    def store(self) -> Any:
        return self.app.state.store

    def __enter__(self) -> Served:
        self._lifespan = self.app.router.lifespan_context(self.app)
        self.runner.run(self._lifespan.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.runner.run(self._lifespan.__aexit__(None, None, None))
        finally:
            self.runner.close()

    async def _send(self, method: str, url: str, *, peer: tuple[str, int] = PEER,
                    **kwargs: Any) -> httpx.Response:
        transport = httpx.ASGITransport(app=self.app, client=peer, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.request(method, url, **kwargs)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.runner.run(self._send(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, body: bytes, **kwargs: Any) -> httpx.Response:
        return self.request("POST", URL, content=body, **kwargs)

    def post_stream(self, parts: Iterable[bytes], delay: float = 0.0,
                    **kwargs: Any) -> httpx.Response:
        return self.request("POST", URL, content=_chunks(parts, delay), **kwargs)

    def post_many(self, bodies: list[bytes]) -> list[httpx.Response]:
        async def all_of() -> list[httpx.Response]:
            return list(await asyncio.gather(*(self._send("POST", URL, content=b)
                                               for b in bodies)))
        return self.runner.run(all_of())

    def counts(self) -> dict[str, int]:
        with self.store.engine.connect() as conn:
            return {
                t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                for t in tables.metadata.sorted_tables if t.name != "schema_version"
            }


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The one error shape, checked."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


def naive(value: datetime) -> datetime:
    return value.replace(tzinfo=None)
