"""The admin API: maintainer actions on a running server, behind a bearer token.

Why an API: an embedded DuckDB file can be open in one process only, so while the server
runs, ``specserver hide ...`` cannot open the file. The maintainer CLI therefore talks to
the running server here (``--server URL`` with ``SPECSERVER_ADMIN_TOKEN``), and every write
runs on the server's single writer thread (``store.write``), in one transaction with its
audit row. With no server running, the CLI opens the store itself (docs/maintainers.md).

The token is ``settings.admin_token`` (``SPECSERVER_ADMIN_TOKEN``); when it is empty the
admin API answers 403 to everything. A wrong or missing token is 401.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from specserver.board import GroupAggregate, ReadService, aggregate, newkeys
from specserver.errors import NotAuthenticated, NotPermitted
from specserver.http.errors import ErrorBody
from specserver.ingest import hardnumbers
from specserver.settings import ServerSettings
from specserver.store import OS_NAMES, Filters, Store, adhoc, moderation, queries

router = APIRouter(prefix="/admin/v1", tags=["admin"], responses={
    400: {"model": ErrorBody, "description": "the body is not JSON"},
    401: {"model": ErrorBody, "description": "no or wrong bearer token"},
    403: {"model": ErrorBody, "description": "the admin API is off (no token configured)"},
    404: {"model": ErrorBody, "description": "no such submission"},
})


def require_admin(request: Request) -> str:
    """The actor name for the audit log, once the bearer token checks out."""
    settings: ServerSettings = request.app.state.settings
    if not settings.admin_token:
        raise NotPermitted("the admin API is off: set SPECSERVER_ADMIN_TOKEN on the server",
                        code="admin_disabled")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), settings.admin_token.encode()):
        raise NotAuthenticated("missing or wrong admin token (Authorization: Bearer ...)",
                           code="admin_token")
    return request.headers.get("x-specserver-actor", "admin-api")[:120] or "admin-api"


Actor = Annotated[str, Depends(require_admin)]


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HideBody(_Body):
    submission_id: str = Field(min_length=1, max_length=64)
    reason: str = Field(min_length=1, max_length=2000)


class UnhideBody(_Body):
    submission_id: str = Field(min_length=1, max_length=64)
    reason: str | None = Field(default=None, max_length=2000)


class BanBody(_Body):
    key_id: str = Field(min_length=1, max_length=64)
    reason: str = Field(min_length=1, max_length=2000)


class UnbanBody(_Body):
    key_id: str = Field(min_length=1, max_length=64)
    reason: str | None = Field(default=None, max_length=2000)


class QueryBody(_Body):
    sql: str = Field(min_length=1, max_length=20_000)
    limit: int = Field(default=1000, ge=1, le=adhoc.QUERY_ROW_LIMIT)


class ImportBody(_Body):
    content: str = Field(min_length=2, max_length=5_000_000, description="the results file")
    source: str = Field(min_length=1, max_length=500, description="where the file came from")
    chip: str = Field(min_length=1, max_length=200)
    memory_gb: int = Field(ge=1, le=2**20)
    ollama_version: str = Field(pattern=r"^[0-9A-Za-z.+\-]{1,40}$")
    os: str | None = Field(default=None, description=f"one of {', '.join(OS_NAMES)}")


@router.post("/hide")
async def hide(body: HideBody, request: Request, actor: Actor) -> dict[str, Any]:
    result = await _store(request).awrite(
        lambda conn: moderation.hide(conn, body.submission_id, body.reason, actor))
    return result.as_dict()


@router.post("/unhide")
async def unhide(body: UnhideBody, request: Request, actor: Actor) -> dict[str, Any]:
    result = await _store(request).awrite(
        lambda conn: moderation.unhide(conn, body.submission_id, body.reason, actor))
    return result.as_dict()


@router.get("/quarantine")
async def quarantine(request: Request, actor: Actor) -> dict[str, Any]:
    """Submissions stored quarantined (a physically implausible baseline), with the reason;
    release one with /unhide, reject it with /reject (both audited)."""
    items = await run_in_threadpool(_read, request, moderation.quarantined)
    return {"items": items}


def _read(request: Request, fn: Any) -> Any:
    with _store(request).engine.connect() as conn:
        return fn(conn)


@router.post("/reject")
async def reject(body: HideBody, request: Request, actor: Actor) -> dict[str, Any]:
    result = await _store(request).awrite(
        lambda conn: moderation.reject(conn, body.submission_id, body.reason, actor))
    return result.as_dict()


@router.post("/ban")
async def ban(body: BanBody, request: Request, actor: Actor) -> dict[str, Any]:
    store = _store(request)
    result = await store.awrite(lambda conn: moderation.ban(conn, body.key_id, body.reason, actor))
    store.invalidate_bans()
    return result.as_dict()


@router.post("/unban")
async def unban(body: UnbanBody, request: Request, actor: Actor) -> dict[str, Any]:
    store = _store(request)
    result = await store.awrite(
        lambda conn: moderation.unban(conn, body.key_id, body.reason, actor))
    store.invalidate_bans()
    return result.as_dict()


class CohortBody(_Body):
    cohort: str = Field(pattern=r"^[0-9a-f]{64}$", description="the cohort's first key id")
    reason: str = Field(min_length=1, max_length=2000)


# Disputes are listed from the public leaderboard's board: every protocol, target, draft
# and engine, by chip and memory, in the speedup view.
DISPUTE_DIMENSIONS = tuple(aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY))


def disputed_groups(groups: list[GroupAggregate]) -> list[dict[str, Any]]:
    """The disputed groups with both sides and the recent cohorts' first keys (to accept
    or hide), the widest disagreement first."""
    found: list[tuple[float, dict[str, Any]]] = []
    for group in groups:
        dispute = group.dispute
        if dispute is None:
            continue
        found.append((-abs(dispute.recent_median - dispute.established_median), {
            "label": group.label(DISPUTE_DIMENSIONS), "key": group.key,
            "median_speedup": group.median_speedup, "contributors": group.contributors,
            "established": {"median_speedup": dispute.established_median,
                            "contributors": dispute.established_contributors},
            "recent": {"median_speedup": dispute.recent_median,
                       "contributors": dispute.recent_contributors,
                       "cohorts": list(dispute.recent_cohorts)}}))
    found.sort(key=lambda item: item[0])
    return [item for _, item in found]


@router.get("/disputes")
async def disputes(request: Request, actor: Actor) -> dict[str, Any]:
    """Groups whose recently graduated cohorts disagree with their established
    contributors (docs/aggregation.md, "Disputes"); settle one with /disputes/accept or
    /disputes/hide."""
    reads: ReadService = request.app.state.reads
    board = await run_in_threadpool(reads.cold_board, Filters(), DISPUTE_DIMENSIONS,
                                    "speedup")
    return {"items": disputed_groups(board.groups)}


async def _cohort_keys(request: Request, cohort: str) -> list[str]:
    reads: ReadService = request.app.state.reads
    keys: list[str] = await run_in_threadpool(
        _read, request, lambda conn: newkeys.cohort_members(conn, reads.rules, cohort))
    return keys


@router.post("/disputes/accept")
async def accept_cohort(body: CohortBody, request: Request, actor: Actor) -> dict[str, Any]:
    """Count a cohort as established from now on (an audit row)."""
    await _cohort_keys(request, body.cohort)
    result = await _store(request).awrite(
        lambda conn: moderation.accept_cohort(conn, body.cohort, body.reason, actor))
    return result.as_dict()


@router.post("/disputes/hide")
async def hide_cohort(body: CohortBody, request: Request, actor: Actor) -> dict[str, Any]:
    """Hide every visible submission of a cohort's keys (an audit row each; ``unhide``
    shows one again)."""
    keys = await _cohort_keys(request, body.cohort)
    hidden = await _store(request).awrite(
        lambda conn: moderation.hide_keys(conn, keys, body.reason, actor))
    return {"action": "hide_cohort", "target": body.cohort, "changed": bool(hidden),
            "keys": keys, "hidden": hidden}


@router.post("/query")
async def query(body: QueryBody, request: Request, actor: Actor) -> dict[str, Any]:
    """One SELECT, read only, bounded (``store/adhoc.py``); rows as JSON (values rendered
    with str when needed). The audit row is written first, so a query that is refused or
    never returns is recorded too."""
    store = _store(request)
    settings: ServerSettings = request.app.state.settings
    await store.awrite(lambda conn: moderation.record_query(conn, body.sql, actor))
    result = await run_in_threadpool(adhoc.run_query_on, store.query_engine, body.sql,
                                     body.limit, settings.admin_query_timeout_s)
    result["rows"] = [[_jsonable(v) for v in row] for row in result["rows"]]
    return result


@router.post("/import-hardnumbers", status_code=201)
async def import_hardnumbers(body: ImportBody, request: Request, actor: Actor) -> dict[str, Any]:
    imported = await run_in_threadpool(
        hardnumbers.build_submission, body.content.encode(), chip=body.chip,
        memory_gb=body.memory_gb, ollama_version=body.ollama_version, os_name=body.os,
        source=body.source)
    return await _store(request).awrite(
        lambda conn: hardnumbers.import_into(conn, imported, actor))


@router.get("/stats")
def stats(request: Request, actor: Actor) -> dict[str, Any]:
    with _store(request).engine.connect() as conn:
        return queries.stats(conn)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def install(app: FastAPI) -> None:
    app.include_router(router)
