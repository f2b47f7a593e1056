"""The public server an audit reads, over HTTP: the log's key, checkpoint, tiles, entry
bundles and index (``/log/``), the public API (``/v1/``) and the newest snapshot. Nothing
else: an auditor needs no account and trusts the server for nothing but serving bytes.

``PublicSource`` wraps an ``httpx.Client`` (tests pass one over the app in process). A
server that cannot be reached or answers 5xx raises ``AuditUnreachable``: the audit did
not happen, which is not the same as a finding.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from specschema.tlog import TileRef, encode_index
from specserver.errors import SpecServerError

LIST_PAGE = 500


class AuditUnreachable(SpecServerError):
    code = "audit_unreachable"


class PublicSource:
    def __init__(self, client: httpx.Client, url: str) -> None:
        self.client = client
        self.url = url.rstrip("/")

    @classmethod
    def for_url(cls, url: str, timeout: float = 60.0) -> PublicSource:
        return cls(httpx.Client(base_url=url.rstrip("/"), timeout=timeout,
                                headers={"User-Agent": "specserver-audit"}), url)

    def get(self, path: str, **params: Any) -> httpx.Response:
        try:
            response = self.client.get(path, params=params or None)
        except httpx.HTTPError as exc:
            raise AuditUnreachable(f"cannot read {self.url}{path}: {exc}") from None
        if response.status_code >= 500:
            raise AuditUnreachable(f"{self.url}{path} answered HTTP {response.status_code}")
        return response

    def body(self, path: str) -> bytes | None:
        """The body of a 200, else None (404: not served)."""
        response = self.get(path)
        return response.content if response.status_code == 200 else None

    def key(self) -> str:
        response = self.get("/log/key")
        if response.status_code != 200:
            raise AuditUnreachable(f"{self.url}/log/key answered HTTP {response.status_code}")
        return response.text.strip()

    def checkpoint(self) -> bytes:
        found = self.body("/log/checkpoint")
        if found is None:
            raise AuditUnreachable(f"{self.url}/log/checkpoint is not served")
        return found

    def tile(self, ref: TileRef) -> bytes | None:
        return self.body("/log/" + ref.path)

    def index(self, bundle: int, width: int) -> list[dict[str, Any]] | None:
        tail = "" if width == 256 else f".p/{width}"
        response = self.get(f"/log/index/{encode_index(bundle)}{tail}")
        if response.status_code != 200:
            return None
        items: list[dict[str, Any]] = response.json().get("items", [])
        return items

    def public_submissions(self) -> Iterator[dict[str, Any]]:
        """Every submission the public list shows, following its cursor."""
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": LIST_PAGE}
            if cursor:
                params["cursor"] = cursor
            response = self.get("/v1/submissions", **params)
            if response.status_code != 200:
                raise AuditUnreachable(f"{self.url}/v1/submissions answered HTTP "
                                       f"{response.status_code}")
            page = response.json()
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def submission(self, submission_id: str) -> dict[str, Any] | None:
        """``GET /v1/submissions/{id}`` (the view, with the envelope's bytes while public and
        the moderation history), or None when the server has no such submission."""
        response = self.get(f"/v1/submissions/{submission_id}")
        if response.status_code in (404, 422):
            return None
        view: dict[str, Any] = response.json()
        return view

    def envelope(self, submission_id: str) -> bytes | None:
        """The exact bytes stored for a public submission, or None (hidden: 410, gone:
        404): then its view says more."""
        return self.body(f"/v1/submissions/{submission_id}/envelope")

    def snapshot_manifest(self) -> bytes | None:
        return self.body("/v1/snapshots/latest.manifest")

    def download(self, path: str, into: Path) -> bool:
        """Stream ``path`` into the file ``into``; False when it is not served."""
        try:
            with self.client.stream("GET", path) as response:
                if response.status_code != 200:
                    return False
                with open(into, "wb") as handle:
                    for chunk in response.iter_bytes():
                        handle.write(chunk)
        except httpx.HTTPError as exc:
            raise AuditUnreachable(f"cannot read {self.url}{path}: {exc}") from None
        return True

    def close(self) -> None:
        self.client.close()
