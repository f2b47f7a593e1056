"""The one place that turns errors into HTTP: a status per domain error class, and the one
JSON error shape ``{"error": {"code": str, "message": str, "details": any}}`` for ours,
FastAPI's 404/405/422, and unexpected exceptions (500, without internals).

    SpecServerError 500 · Malformed 400 · NotAuthenticated 401 · NotPermitted 403 ·
    NotFound 404 · BodyTimeout 408 · Conflict 409 · Gone 410 · BodyTooLarge 413 · Invalid 422 ·
    RateLimited 429 · Unavailable 503

A lost or unreachable database (``specserver.store.outage.is_store_down``) is 503
``store_unavailable`` with Retry-After, never a 500.

An error quotes what it refuses (an unknown parameter's value, an envelope field), and what
it quotes comes from the client: every answer cuts its message and each string of its
details (``capped``), here, whatever raised it, so that a megabyte-long value is never sent
back (it was, twice: in the message and in the details).
"""

from __future__ import annotations

import base64
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from specschema.errors import SpecSchemaError
from specserver.errors import (
    BodyTimeout,
    BodyTooLarge,
    Conflict,
    Gone,
    Invalid,
    Malformed,
    NotAuthenticated,
    NotFound,
    NotPermitted,
    RateLimited,
    SpecServerError,
    Unavailable,
    as_domain_error,
)
from specserver.store import STORE_DOWN_RETRY_AFTER_S, is_store_down, store_down_errors

log = logging.getLogger("specserver")

# What one error answer quotes at most: enough to recognise a value, the rest counted.
MESSAGE_LIMIT = 500  # characters of the message
DETAIL_LIMIT = 200  # characters of each string (or key) in the details
DETAIL_ITEMS = 100  # items of each list (or keys of each object) in the details

# Most specific first: a subclass defined elsewhere (QueryRejected(Invalid)) finds its base.
STATUS: tuple[tuple[type[SpecServerError], int], ...] = (
    (Malformed, 400),
    (NotAuthenticated, 401),
    (NotPermitted, 403),
    (NotFound, 404),
    (BodyTimeout, 408),
    (Conflict, 409),
    (Gone, 410),
    (BodyTooLarge, 413),
    (Invalid, 422),
    (RateLimited, 429),
    (Unavailable, 503),
)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
}


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorBody(BaseModel):
    error: ErrorDetail


def error_doc(description: str) -> dict[str, Any]:
    """An OpenAPI ``responses`` entry for an error status."""
    return {"model": ErrorBody, "description": description}


# The header of a refusal the transparency log holds (``response_for``), for OpenAPI.
LOG_ENTRY_HEADER = {"Log-Entry": {
    "description": "on a refusal after the envelope's signature verified: its entry in the "
                   "transparency log, `index=N, leaf-hash=:<base64>:` (the leaf hash of "
                   "0x03 || SHA-256 of the envelope's bytes)",
    "schema": {"type": "string"}}}


def logged_error_doc(description: str) -> dict[str, Any]:
    """``error_doc`` for a status that a refusal the log holds may answer."""
    return {**error_doc(description), "headers": LOG_ENTRY_HEADER}


def status_of(error: SpecServerError) -> int:
    return next((status for kind, status in STATUS if isinstance(error, kind)), 500)


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


def capped(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and a count of the rest."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\u2026 ({len(text) - limit:,} more characters)"


def capped_details(value: Any) -> Any:
    """JSON-ready ``details`` with every string cut (``capped``) and every list and object
    cut to ``DETAIL_ITEMS`` (a list of strings says how many more there were)."""
    if isinstance(value, str):
        return capped(value, DETAIL_LIMIT)
    if isinstance(value, dict):
        items = list(value.items())[:DETAIL_ITEMS]
        return {capped(str(k), DETAIL_LIMIT): capped_details(v) for k, v in items}
    if isinstance(value, list):
        kept = [capped_details(v) for v in value[:DETAIL_ITEMS]]
        more = len(value) - len(kept)
        if more > 0 and all(isinstance(v, str) for v in kept):
            kept.append(f"\u2026 ({more:,} more)")
        return kept
    return value


def error_response(
    status: int,
    code: str,
    message: str,
    details: Any = None,
    *,
    retry_after: float | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    all_headers = dict(headers or {})
    if retry_after is not None:
        all_headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    body = jsonable_encoder(error_body(code, capped(message, MESSAGE_LIMIT), None))
    body["error"]["details"] = capped_details(jsonable_encoder(details))
    return JSONResponse(body, status_code=status, headers=all_headers or None)


def as_server_error(exc: Exception) -> SpecServerError:
    """The one mapping from an exception to what the API answers (status, code, message,
    details, Retry-After), as a ``SpecServerError``; unexpected ones are logged."""
    if is_store_down(exc):  # PostgreSQL restarting, a pool exhausted: retry later
        log.warning("store unavailable: %s", str(exc).strip().splitlines()[:1])
        return Unavailable("the store does not answer right now",
                           retry_after=STORE_DOWN_RETRY_AFTER_S)
    return as_domain_error(exc)


def response_for(exc: Exception) -> JSONResponse:
    """The JSON error response for any exception; a refusal the transparency log holds
    says where in a ``Log-Entry`` header (``log_entry_header``)."""
    error = as_server_error(exc)
    headers = None if error.logged is None else {"Log-Entry": log_entry_header(*error.logged)}
    return error_response(status_of(error), error.code, error.message, error.details,
                          retry_after=error.retry_after, headers=headers)


def log_entry_header(index: int, leaf_hash: bytes) -> str:
    """A log entry's place as an RFC 8941 dictionary: ``index=12, leaf-hash=:<base64>:``."""
    return f"index={index}, leaf-hash=:{base64.b64encode(leaf_hash).decode()}:"


async def _ours(request: Request, exc: Exception) -> JSONResponse:
    return response_for(exc)


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    details = None if isinstance(exc.detail, str) else exc.detail
    headers = dict(exc.headers) if exc.headers else None
    return error_response(exc.status_code, code, message, details, headers=headers)


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    paths = [
        {"path": ".".join(str(p) for p in err.get("loc", ())), "message": str(err.get("msg"))}
        for err in exc.errors()[:50]
    ]
    first = paths[0] if paths else {"path": "$", "message": "invalid request"}
    return error_response(
        422, "invalid_request", f"invalid request: {first['path']}: {first['message']}", paths
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SpecServerError, _ours)
    app.add_exception_handler(SpecSchemaError, _ours)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(RequestValidationError, _validation)
    for down in store_down_errors():
        app.add_exception_handler(down, _ours)
    app.add_exception_handler(Exception, _ours)
