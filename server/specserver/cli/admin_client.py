"""How a maintainer command reaches the store: always through the admin API, of the running
server or of the app run in this process on the store itself (docs/maintainers.md).

``connect(server, token, database, actor)`` yields an ``Admin``: ``HttpAdmin`` on a server
URL when one is given, else ``DirectAdmin``: the same ``HttpAdmin`` over the app built by
``create_app`` and run in process on a store opened here (its lifespan opens and migrates
it, its one writer does the writes), under a token made for this command only. So the
checks, audit rows and answers are the admin API's in both modes; there is no second
implementation of an admin operation. If another process holds the DuckDB file it stops
with one clear line (``AdminError``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import httpx


class AdminError(Exception):
    """A maintainer command failed; the message is the one line the user sees."""


class Admin(Protocol):
    def hide(self, submission_id: str, reason: str) -> dict[str, Any]: ...
    def unhide(self, submission_id: str, reason: str | None) -> dict[str, Any]: ...
    def ban(self, key_id: str, reason: str) -> dict[str, Any]: ...
    def unban(self, key_id: str, reason: str | None) -> dict[str, Any]: ...
    def quarantined(self) -> list[dict[str, Any]]: ...
    def reject(self, submission_id: str, reason: str) -> dict[str, Any]: ...
    def query(self, sql: str, limit: int) -> dict[str, Any]: ...
    def import_hardnumbers(self, content: bytes, source: str, chip: str, memory_gb: int,
                           ollama_version: str, os_name: str | None) -> dict[str, Any]: ...
    def stats(self) -> dict[str, Any]: ...
    def export(self, fmt: str, path: Path) -> int: ...
    def disputes(self) -> list[dict[str, Any]]: ...
    def settle(self, how: str, cohort: str, reason: str) -> dict[str, Any]: ...
    def snapshot(self) -> dict[str, Any]: ...


# --- through the running server -----------------------------------------------------------


def _headers(token: str | None, actor: str) -> dict[str, str]:
    headers = {"X-Specserver-Actor": actor}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


class HttpAdmin:
    """The admin API over ``client``; ``url`` names the server in messages."""

    def __init__(self, client: httpx.Client, url: str) -> None:
        self.client = client
        self.url = url

    @classmethod
    def for_server(cls, url: str, token: str | None, actor: str,
                   timeout: float = 120.0) -> HttpAdmin:
        url = url.rstrip("/")
        return cls(httpx.Client(base_url=url, headers=_headers(token, actor),
                                timeout=timeout), url)

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.is_success:
            return response
        try:
            error = response.json()["error"]
            message = self._refusal(str(error["message"]), str(error["code"]),
                                    response.status_code)
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {response.status_code} from {self.url}"
        raise AdminError(message)

    def _refusal(self, message: str, code: str, status: int) -> str:
        return f"{message} ({code}, HTTP {status})"

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._check(self.client.request(method, path, **kwargs))
        except httpx.TransportError as exc:
            raise AdminError(f"cannot reach the server at {self.url}: {exc}") from None

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/admin/v1/{path}", json=body).json()
        return result

    def hide(self, submission_id: str, reason: str) -> dict[str, Any]:
        return self._post("hide", {"submission_id": submission_id, "reason": reason})

    def unhide(self, submission_id: str, reason: str | None) -> dict[str, Any]:
        return self._post("unhide", {"submission_id": submission_id, "reason": reason})

    def ban(self, key_id: str, reason: str) -> dict[str, Any]:
        return self._post("ban", {"key_id": key_id, "reason": reason})

    def unban(self, key_id: str, reason: str | None) -> dict[str, Any]:
        return self._post("unban", {"key_id": key_id, "reason": reason})

    def quarantined(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call("GET", "/admin/v1/quarantine").json()["items"]
        return items

    def reject(self, submission_id: str, reason: str) -> dict[str, Any]:
        return self._post("reject", {"submission_id": submission_id, "reason": reason})

    def query(self, sql: str, limit: int) -> dict[str, Any]:
        return self._post("query", {"sql": sql, "limit": limit})

    def import_hardnumbers(self, content: bytes, source: str, chip: str, memory_gb: int,
                           ollama_version: str, os_name: str | None) -> dict[str, Any]:
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            raise AdminError("the results file is not UTF-8 text") from None
        return self._post("import-hardnumbers", {
            "content": text, "source": source, "chip": chip, "memory_gb": memory_gb,
            "ollama_version": ollama_version, "os": os_name})

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/admin/v1/stats").json()
        return result

    def disputes(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call("GET", "/admin/v1/disputes").json()["items"]
        return items

    def settle(self, how: str, cohort: str, reason: str) -> dict[str, Any]:
        """``how``: ``accept`` or ``hide`` the cohort whose first key is ``cohort``."""
        return self._post(f"disputes/{how}", {"cohort": cohort, "reason": reason})

    def snapshot(self) -> dict[str, Any]:
        """Write a signed snapshot of the public data now (``/v1/snapshots/latest.*``)."""
        return self._post("snapshot", {})

    def export(self, fmt: str, path: Path) -> int:
        written = 0
        try:
            with self.client.stream("GET", "/v1/export", params={"format": fmt}) as response:
                if not response.is_success:
                    response.read()
                    self._check(response)
                with open(path, "wb") as handle:
                    for chunk in response.iter_bytes():
                        written += handle.write(chunk)
        except httpx.TransportError as exc:
            raise AdminError(f"cannot reach the server at {self.url}: {exc}") from None
        return written


# --- on the store directly (no server holds it) -------------------------------------------


class DirectAdmin(HttpAdmin):
    """``HttpAdmin`` over the app run in this process (``open_direct``); ``store_name`` names
    the store it opened, for the user (a path, or a URL without its password)."""

    def __init__(self, client: httpx.Client, store_name: str) -> None:
        super().__init__(client, f"the store {store_name}")
        self.store_name = store_name

    def _refusal(self, message: str, code: str, status: int) -> str:
        return message  # no server in between: the API's status says nothing to the user


def duckdb_file_of(value: str) -> Path | None:
    """The DuckDB file a --database value names (a path or duckdb:///path), else None."""
    if "://" not in value:
        return Path(value).expanduser()
    if value.startswith("duckdb:///") and not value.endswith(":memory:"):
        return Path(value[len("duckdb:///"):]).expanduser()
    return None


def missing_folder(database: str | None) -> str | None:
    """One line when an explicit --database DuckDB file's folder does not exist: opening it
    would create the folder and a new, empty store, which a typo should not do silently."""
    file = duckdb_file_of(database) if database else None
    if file is None or file.parent.is_dir():
        return None
    return f"no store at {file}: the folder {file.parent} does not exist (a typo?)"


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set" in text)


class _InProcess(httpx.BaseTransport):
    """A synchronous transport to an ASGI app in this process: httpx's ASGI transport, run
    on the event loop of ``portal`` (a thread of this process). A response is read whole
    before it is returned (httpx's ASGI transport gathers the body anyway)."""

    def __init__(self, portal: Any, app: Any) -> None:
        self.portal = portal
        self.inner = httpx.ASGITransport(app=app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def send() -> httpx.Response:
            response = await self.inner.handle_async_request(request)
            body = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers,
                                  content=body, request=request)

        result: httpx.Response = self.portal.call(send)
        return result


@contextmanager
def open_direct(database: str | None, actor: str) -> Iterator[DirectAdmin]:
    """The app of ``create_app`` on the store ``database`` (else the settings' one), run in
    this process for one command: its lifespan opens the store (and migrates it), its admin
    API answers under a token made here, no check workers start."""
    from anyio.from_thread import start_blocking_portal

    from specserver.http import create_app
    from specserver.settings import default_database_path, get_settings
    from specserver.store import display_url  # never print a PostgreSQL password

    problem = missing_folder(database)
    if problem is not None:
        raise AdminError(problem)
    token = secrets.token_urlsafe(32)
    overrides: dict[str, object] = {"database_url": database} if database else {}
    settings = get_settings(**overrides, admin_token=token, check_workers=0)
    name = display_url(settings.resolved_database_url)
    if not settings.database_url and not default_database_path().exists():
        # Opening the default store creates it: counts of a new, empty file would read as
        # an empty board rather than as the wrong store.
        raise AdminError(f"no store at {default_database_path()} (the default): pass "
                         "--database PATH or --server URL (`specserver serve` creates it)")
    app = create_app(settings)
    with start_blocking_portal() as portal:
        try:  # the app's own lifespan: the store opens (and migrates) here
            running = portal.wrap_async_context_manager(app.router.lifespan_context(app))
            running.__enter__()
        except Exception as exc:
            if _is_lock_error(exc):
                raise AdminError(
                    f"the store {settings.resolved_database_url} is held by another process "
                    "(a running server?): use --server URL with SPECSERVER_ADMIN_TOKEN"
                ) from None
            raise AdminError(f"cannot open the store {name}: {str(exc).splitlines()[0]}"
                             ) from None
        client = httpx.Client(transport=_InProcess(portal, app),
                              base_url="http://specserver.in-process",
                              headers=_headers(token, actor), timeout=None)
        try:
            yield DirectAdmin(client, name)
        finally:
            client.close()
            running.__exit__(None, None, None)


@contextmanager
def connect(server: str | None, token: str | None, database: str | None,
            actor: str) -> Iterator[Admin]:
    if server:
        admin = HttpAdmin.for_server(server, token, actor)
        try:
            yield admin
        finally:
            admin.client.close()
    else:
        with open_direct(database, actor) as direct:
            yield direct
