"""The ingestion API: POST /v1/submissions, GET /v1/submissions/{id}, GET /healthz.

Routes are thin: read the body under the size limit and a deadline, run the pure checks
(``prepared.prepare_submission``, in a check worker process when the server has them), the
ban and rate-limit gates, then hand the rows to the store's single writer and answer only
after the commit that holds them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, TypeVar
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from specschema import SCHEMA_VERSIONS
from specschema.errors import SpecSchemaError
from specschema.jsonschema_export import ENVELOPE_SCHEMA as PUBLISHED_ENVELOPE_SCHEMA
from specschema.summary import ConfigSummary
from specserver.errors import (
    BodyTimeout,
    BodyTooLarge,
    Conflict,
    Invalid,
    Malformed,
    NotAuthenticated,
    NotFound,
    NotPermitted,
    RateLimited,
    SpecServerError,
    signed_refusal,
)
from specserver.http import caching
from specserver.http.errors import error_body, error_doc, logged_error_doc, response_for
from specserver.ingest import CheckLimits, CheckPool, Prepared, prepare_submission, receipt_json
from specserver.ratelimit import (
    CheckQueue,
    RateLimiter,
    RejectionGate,
    charge,
    client_address,
    first_refusal,
    rejections,
)
from specserver.settings import ServerSettings
from specserver.store import Store, origins, redact_view

T = TypeVar("T")
router = APIRouter()
SUBMISSIONS_PATH = "/v1/submissions"


class LogEntry(BaseModel):
    """Where the submission's envelope is in the transparency log (``/log/``): its index and
    its RFC 6962 leaf hash, SHA-256(0x00 || 0x01 || SHA-256(the envelope's bytes))."""

    index: int
    leaf_hash: str  # base64


class Receipt(BaseModel):
    """What the server answers for an accepted submission (201, or 200 when repeated);
    ``log`` is null only when the server keeps no store."""

    submission_id: str
    key_id: str
    received_at: datetime
    url: str
    summary: list[ConfigSummary]
    log: LogEntry | None = None


class Health(BaseModel):
    """``store_version``: the store's migration (store/migrations.py); ``submission_schema_
    versions``: the wire format versions POST accepts. ``schema_version`` is the store's
    migration under its first name, kept so that existing monitors keep working."""

    status: str
    store: str
    store_version: int | None
    submission_schema_versions: list[int]
    schema_version: int | None


# The published envelope schema (schema/jsonschema/envelope.v1.schema.json), from the schema
# package itself, without "$schema" (OpenAPI 3.1 documents carry their own dialect).
ENVELOPE_SCHEMA: dict[str, Any] = {
    key: value for key, value in PUBLISHED_ENVELOPE_SCHEMA.items() if key != "$schema"
}


# --- dependencies ---------------------------------------------------------------------------


def store_of(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


StoreDep = Annotated[Store, Depends(store_of)]


# --- step 1: the body, under a size limit and a deadline ----------------------------------


# A body's first seconds, before its minimum rate applies (a connection's slow start).
MIN_RATE_GRACE_S = 2.0


async def read_body(
    receive: Receive, content_length: str | None, limit: int, timeout_s: float,
    min_rate: float = 0.0,
) -> bytes:
    """The whole body from the ASGI ``receive``, or 413 as soon as it passes ``limit``
    (Content-Length or not), or 408 when it has not fully arrived within ``timeout_s``,
    or has fallen below ``min_rate`` bytes per second on average after
    ``MIN_RATE_GRACE_S`` (the deadline moves to ``start + grace + received / min_rate``,
    never past ``start + timeout_s``: Apache's ``mod_reqtimeout`` ``body=…,MinRate=…``)."""
    if content_length is not None:
        if not content_length.isdigit():
            raise Malformed("Content-Length is not a number", code="bad_request")
        if int(content_length) > limit:
            raise BodyTooLarge(
                f"body of {content_length} bytes is over the {limit}-byte limit",
                {"limit": limit},
            )
    chunks: list[bytes] = []
    size = 0
    loop = asyncio.get_running_loop()
    start = loop.time()

    def deadline() -> float:
        if min_rate <= 0:
            return start + timeout_s
        return start + min(timeout_s, MIN_RATE_GRACE_S + size / min_rate)

    try:
        async with asyncio.timeout_at(deadline()) as timer:
            while True:
                timer.reschedule(deadline())
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise Malformed("the client went away", code="client_disconnected")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(f"body is over the {limit}-byte limit",
                                          {"limit": limit})
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        waited = loop.time() - start
        if waited < timeout_s - 0.05:
            raise BodyTimeout(
                f"the body arrived slower than {min_rate:g} bytes per second "
                f"({size} bytes in {waited:.1f} s)", {"received_bytes": size}) from None
        raise BodyTimeout(
            f"the body did not arrive within {timeout_s:g} s", {"received_bytes": size}
        ) from None
    return b"".join(chunks)


# --- POST /v1/submissions ---------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]


# What the sender caused (and is charged for in the rejections bucket); not the server's own
# trouble (Unavailable), nor a rate limit itself.
REJECTIONS = (Malformed, NotAuthenticated, NotPermitted, Invalid, BodyTooLarge, BodyTimeout,
              SpecSchemaError)


def check_limits(settings: ServerSettings) -> CheckLimits:
    return CheckLimits(max_age=timedelta(days=settings.max_submission_age_days),
                       max_future_skew=timedelta(seconds=settings.max_future_skew_s))


async def gated(state: Any, address: str, receive: Receive, content_length: str | None,
                check: Callable[[bytes], Awaitable[tuple[T, float]]],
                key_of: Callable[[T], str]) -> T:
    """The gates of every signed POST (submissions, cost probes), in their one order: an
    address blocked for its refusals is refused before its body is read; the body under
    the size limit and its deadline; a token from the address's bucket *before* the checks
    (``check``: the expensive part, with the CPU seconds it took), so a bad body is never
    free; the checks in the address's turn of the check queue (``in_turn``); checks that
    took more than ``rate_check_ms_per_token`` take the rest from the address's bucket
    after them (``check_tokens``: a kind of body that costs 50 ms to check is not 50 times
    cheaper to send than it is to check); the ban list; a token from the
    key's bucket (``key_of``: the checked body's key id). A refusal the sender caused
    (``REJECTIONS``) also costs a token of the address's rejections bucket
    (ratelimit/rejections.py); one that came after the signature verified is logged in the
    transparency log before the answer (``log_refusal``). Returns what ``check`` made of the
    body."""
    settings: ServerSettings = state.settings
    store: Store = state.store
    limiter: RateLimiter = state.rate_limiter
    gate: RejectionGate | None = getattr(state, "rejection_gate", None)
    blocked = gate.blocked(address) if gate is not None else None
    if blocked is not None:
        raise RateLimited("too many refused submissions from this address; retry later",
                          {"scope": rejections.SCOPE}, retry_after=blocked)
    try:
        body = await read_body(receive, content_length, settings.max_body_bytes,
                               settings.body_read_timeout_s, settings.body_min_rate_bytes_s)
        refused = first_refusal(limiter, (("address", address),))
        if refused is None:
            checked, cpu_s = await in_turn(getattr(state, "check_queue", None), address,
                                           check, body)
            charge(limiter, "address", address,
                   check_tokens(cpu_s, settings.rate_check_ms_per_token) - 1.0)
            key_id = key_of(checked)
            if await store.check_banned(key_id):  # never blocks the loop
                raise signed_refusal(NotPermitted("this key id is banned", {"key_id": key_id},
                                                  code="key_banned"), key_id)
    except REJECTIONS as exc:
        if gate is not None:
            gate.rejected(address)
        await log_refusal(state, exc, lambda: hashlib.sha256(body).hexdigest())
        raise
    if refused is None:
        refused = first_refusal(limiter, (("key", key_id),))
    if refused is not None:
        scope, wait = refused
        raise RateLimited(f"too many submissions from this {scope}; retry later",
                          {"scope": scope}, retry_after=wait)
    return checked


async def in_turn(queue: CheckQueue | None, address: str,
                  check: Callable[[bytes], Awaitable[tuple[T, float]]], body: bytes
                  ) -> tuple[T, float]:
    """``check(body)`` in the address's turn of the check queue (served per address by the
    check CPU each took, ratelimit/checkqueue.py), which learns what this one took."""
    if queue is None:
        return await check(body)
    async with queue.turn(address) as ticket:
        checked, cpu_s = await check(body)
        ticket.cost_s = cpu_s
    return checked, cpu_s


async def log_refusal(state: Any, exc: Exception, envelope_sha256: Callable[[], str]) -> None:
    """A refusal that came after the envelope's signature verified (``signed_by``) is an
    entry of the transparency log, committed before the answer, whose place the answer
    carries (``Log-Entry``, http/errors.py); other refusals are not logged."""
    if not isinstance(exc, SpecServerError) or exc.signed_by is None:
        return
    if state.settings.store_enabled:
        entry = await state.store.log_refusal(envelope_sha256())
        exc.logged = (entry.index, entry.leaf_hash)


def check_tokens(cpu_s: float, ms_per_token: float) -> float:
    """The address tokens checks of ``cpu_s`` CPU seconds cost: one at least (what every
    POST takes before its checks), more for each ``ms_per_token`` beyond (0: always one)."""
    if ms_per_token <= 0:
        return 1.0
    return max(1.0, cpu_s * 1e3 / ms_per_token)


async def prepare(state: Any, body: bytes, received_at: datetime) -> Prepared:
    """Checks 2-5 and the rows: in a check worker process when the server has them."""
    pool: CheckPool | None = getattr(state, "check_pool", None)
    if pool is not None:
        return await pool.prepare(body, received_at)
    return prepare_submission(body, received_at, check_limits(state.settings))


async def _prepared(state: Any, body: bytes) -> tuple[Prepared, float]:
    prepared = await prepare(state, body, state.clock())
    return prepared, prepared.check_cpu_s


async def accept_submission(
    state: Any,
    receive: Receive,
    content_length: str | None,
    peer: str | None,
    forwarded_for: str | None,
) -> Answer:
    """Checks 1-7 and the write; raises the errors of ``specserver.errors``."""
    settings: ServerSettings = state.settings
    store: Store = state.store
    address = client_address(peer, forwarded_for, settings.proxy_networks())
    with store.arriving():
        prepared = await gated(state, address, receive, content_length,
                               lambda body: _prepared(state, body), lambda found: found.key_id)
        url = settings.public_url(prepared.submission_id)
        if not settings.store_enabled:
            return Answer(201, receipt_json(prepared, prepared.received_at, url),
                          {"Location": url})
        # The range's keyed hash, never the address (store/origins.py): board cohorts.
        rows = origins.stamp_origin(prepared.rows,
                                    await store.origin_of(address, prepared.received_at))
        committed = store.enqueue(prepared.submission_id, prepared.body_sha256,
                                  prepared.received_at, rows)
    outcome = await asyncio.wrap_future(committed)
    if outcome.status == "conflict":
        conflict = signed_refusal(await _conflict(store, prepared.submission_id),
                                  prepared.key_id)
        await log_refusal(state, conflict, lambda: prepared.body_sha256)
        raise conflict
    status = 201 if outcome.status == "created" else 200
    entry = outcome.log
    if entry is None:  # stored before: its entry is read, off the event loop (rare)
        entry = await asyncio.to_thread(store.log_receipt, prepared.submission_id)
    log = None if entry is None else (entry.index, entry.leaf_hash)
    return Answer(status, receipt_json(prepared, outcome.received_at, url, log),
                  {"Location": url})


async def _conflict(store: Store, submission_id: str) -> Conflict:
    """The 409 for an id stored with other bytes, saying who holds it (a signed key or an
    import): rare, so the holder is read then, off the event loop."""
    view = await asyncio.to_thread(store.get_submission, submission_id)
    row = view.submission if view is not None else {}
    key_id = row.get("key_id")
    if key_id:
        return Conflict(f"this submission id is already stored with other bytes, signed by key "
                        f"{key_id}", {"submission_id": submission_id, "held_by": "signed",
                                      "key_id": key_id})
    if row.get("source") == "imported":
        return Conflict("this submission id is already stored with other bytes, by an import",
                        {"submission_id": submission_id, "held_by": "import"})
    return Conflict("this submission id is already stored with other bytes",
                    {"submission_id": submission_id})


@router.post(
    SUBMISSIONS_PATH,
    status_code=201,
    response_model=Receipt,
    tags=["ingest"],
    summary="Submit a signed benchmark result",
    responses={
        200: {"model": Receipt, "description": "already stored with these exact bytes"},
        400: logged_error_doc("malformed envelope or payload JSON"),
        401: error_doc("the signature does not verify"),
        403: logged_error_doc("the key id is banned"),
        408: error_doc("the body did not arrive in time"),
        409: logged_error_doc("this submission id is stored with other bytes"),
        413: error_doc("the body is over the size limit"),
        422: logged_error_doc("schema, protocol or consistency rule failed (details name "
                              "it)"),
        429: error_doc("rate limited (Retry-After)"),
        503: error_doc("the store cannot take submissions now (Retry-After)"),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ENVELOPE_SCHEMA}},
        }
    },
)
async def post_submission(request: Request) -> Response:
    answer = await accept_submission(
        request.app.state, request.receive, request.headers.get("content-length"),
        request.client.host if request.client else None,
        request.headers.get("x-forwarded-for"),
    )
    return Response(answer.body, status_code=answer.status, media_type="application/json",
                    headers=answer.headers)


async def ingest_asgi(state: Any, scope: Scope, receive: Receive, send: Send) -> None:
    """POST /v1/submissions as a bare ASGI app: the same ``accept_submission`` as the
    FastAPI route, without the framework's routing and middleware (about half of the
    per-request CPU of this endpoint). Errors become the one JSON shape here too."""
    headers = Headers(scope=scope)
    client = scope.get("client")
    try:
        answer = await accept_submission(
            state, receive, headers.get("content-length"),
            client[0] if client else None, headers.get("x-forwarded-for"),
        )
    except Exception as exc:  # noqa: BLE001 - every error has one JSON answer
        await response_for(exc)(scope, receive, send)
        return
    raw_headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(answer.body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status,
                "headers": raw_headers})
    await send({"type": "http.response.body", "body": answer.body})


@router.get(
    "/v1/submissions/{submission_id}",
    tags=["ingest"],
    summary="One stored submission: summary, configs, trials and the raw envelope",
    responses={404: error_doc("no such submission"),
               422: error_doc("the id is not a UUID")},
)
def get_submission(
    request: Request,
    store: StoreDep,
    submission_id: Annotated[UUID, Path(description="the submission's UUID")],
) -> Response:
    view = store.get_submission(str(submission_id))
    if view is None:
        raise NotFound(f"no submission {submission_id}", {"submission_id": str(submission_id)})
    shown = redact_view(view).as_json()  # a hidden submission's free text is not public
    payload = json.dumps(shown, separators=(",", ":"), sort_keys=True).encode("utf-8")
    etag = caching.content_etag(payload)
    headers = {"ETag": etag, "Cache-Control": caching.CACHE_CONTROL}
    if caching.matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    return Response(payload, media_type="application/json", headers=headers)


@router.get("/healthz", tags=["ingest"], response_model=Health,
            responses={503: error_doc("the store does not answer")})
def healthz(store: StoreDep) -> Response:
    if not store.healthy():
        return JSONResponse(
            error_body("store_unavailable", "the store does not answer"), status_code=503,
            headers={"Retry-After": "5"},
        )
    health = Health(status="ok", store=store.dialect, store_version=store.schema_version,
                    submission_schema_versions=list(SCHEMA_VERSIONS),
                    schema_version=store.schema_version)
    return Response(health.model_dump_json(), media_type="application/json")
