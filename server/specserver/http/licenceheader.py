"""The data's licence on every public read: a ``Link: <...>; rel="license"`` header (RFC
8288's registered relation) on each GET answer under ``/v1/``, ``/log/`` and the page.

A plain ASGI wrapper, so it costs a header per read; POST /v1/submissions never reaches
it (``app.SpecServer`` answers it before any middleware).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specserver.licence import LINK_HEADER

_LINK = (b"link", LINK_HEADER.encode("ascii"))
_ADMIN = "/admin/"


class LicenceHeader:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] not in ("GET", "HEAD")
                or scope["path"].startswith(_ADMIN)):
            await self.app(scope, receive, send)
            return

        async def with_link(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == b"link" for name, _ in headers):
                    headers.append(_LINK)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_link)
