"""How a maintainer command reaches the store: the running server's admin API, or the store
itself when no server holds it (docs/maintainers.md).

``connect(server, token, database, actor)`` yields an ``Admin``: ``HttpAdmin`` when a
server URL is given, else ``DirectAdmin`` on a store opened here, which stops with one
clear line (``AdminError``) if another process holds the DuckDB file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
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


# --- through the running server -----------------------------------------------------------


class HttpAdmin:
    def __init__(self, url: str, token: str | None, actor: str, timeout: float = 120.0) -> None:
        self.url = url.rstrip("/")
        headers = {"X-Specserver-Actor": actor}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.is_success:
            return response
        try:
            error = response.json()["error"]
            message = f"{error['message']} ({error['code']}, HTTP {response.status_code})"
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {response.status_code} from {self.url}"
        raise AdminError(message)

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


class DirectAdmin:
    def __init__(self, store: Any, actor: str, query_timeout_s: float = 30.0,
                 store_name: str = "") -> None:
        self.store = store
        self.actor = actor
        self.query_timeout_s = query_timeout_s
        self.store_name = store_name  # for the user: a path or a URL without its password

    def hide(self, submission_id: str, reason: str) -> dict[str, Any]:
        from specserver.store import moderation

        return self._write(lambda c: moderation.hide(c, submission_id, reason, self.actor))

    def unhide(self, submission_id: str, reason: str | None) -> dict[str, Any]:
        from specserver.store import moderation

        return self._write(lambda c: moderation.unhide(c, submission_id, reason, self.actor))

    def ban(self, key_id: str, reason: str) -> dict[str, Any]:
        from specserver.store import moderation

        return self._write(lambda c: moderation.ban(c, key_id, reason, self.actor))

    def unban(self, key_id: str, reason: str | None) -> dict[str, Any]:
        from specserver.store import moderation

        return self._write(lambda c: moderation.unban(c, key_id, reason, self.actor))

    def quarantined(self) -> list[dict[str, Any]]:
        from specserver.store import moderation

        with self.store.engine.connect() as conn:
            return moderation.quarantined(conn)

    def reject(self, submission_id: str, reason: str) -> dict[str, Any]:
        from specserver.store import moderation

        return self._write(lambda c: moderation.reject(c, submission_id, reason, self.actor))

    def _write(self, fn: Callable[[Any], Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.store.write(fn).as_dict()
        return result

    def query(self, sql: str, limit: int) -> dict[str, Any]:
        """As the admin API does it: the audit row first, then ``store/adhoc.py``."""
        from specserver.store import adhoc, moderation

        self.store.write(lambda c: moderation.record_query(c, sql, self.actor))
        return adhoc.run_query_on(self.store.query_engine, sql, limit, self.query_timeout_s)

    def import_hardnumbers(self, content: bytes, source: str, chip: str, memory_gb: int,
                           ollama_version: str, os_name: str | None) -> dict[str, Any]:
        from specserver.ingest import hardnumbers

        imported = hardnumbers.build_submission(
            content, chip=chip, memory_gb=memory_gb, ollama_version=ollama_version,
            os_name=os_name, source=source)
        result: dict[str, Any] = self.store.write(
            lambda c: hardnumbers.import_into(c, imported, self.actor))
        return result

    def stats(self) -> dict[str, Any]:
        from specserver.store import queries

        with self.store.engine.connect() as conn:
            return queries.stats(conn)

    def export(self, fmt: str, path: Path) -> int:
        from specserver.store import exporting
        from specserver.store.queries import Filters

        if fmt != "parquet":
            with self.store.engine.connect() as conn:
                return exporting.write_export(conn, Filters(), fmt, path)
        # DuckDB writes the file itself, and the store's DuckDB may write only in its
        # scratch folder (store/database.py): write there, then move it into place.
        handle, scratch = tempfile.mkstemp(suffix=".parquet", dir=self.store.scratch_dir)
        os.close(handle)
        try:
            with self.store.engine.connect() as conn:
                exporting.write_parquet(conn, Filters(), scratch)
            shutil.move(scratch, path)
        finally:
            if os.path.exists(scratch):
                os.unlink(scratch)
        return Path(path).stat().st_size


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


@contextmanager
def open_direct(database: str | None, actor: str) -> Iterator[DirectAdmin]:
    from specserver.http.app import build_store
    from specserver.settings import get_settings

    problem = missing_folder(database)
    if problem is not None:
        raise AdminError(problem)
    overrides: dict[str, object] = {"database_url": database} if database else {}
    settings = get_settings(**overrides)
    from specserver.store.database import display_url  # never print a PostgreSQL password

    store = build_store(settings)
    try:
        store.open()
    except Exception as exc:
        store.engine.dispose()
        if _is_lock_error(exc):
            raise AdminError(
                f"the store {settings.resolved_database_url} is held by another process (a "
                "running server?): use --server URL with SPECSERVER_ADMIN_TOKEN") from None
        raise AdminError(f"cannot open the store {display_url(settings.resolved_database_url)}: "
                         f"{str(exc).splitlines()[0]}") from None
    try:
        yield DirectAdmin(store, actor, settings.admin_query_timeout_s,
                          display_url(settings.resolved_database_url))
    finally:
        store.close()


@contextmanager
def connect(server: str | None, token: str | None, database: str | None,
            actor: str) -> Iterator[Admin]:
    if server:
        admin = HttpAdmin(server, token, actor)
        try:
            yield admin
        finally:
            admin.client.close()
    else:
        with open_direct(database, actor) as direct:
            yield direct
