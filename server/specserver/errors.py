"""The one exception hierarchy of specserver, and the one place that turns errors into JSON.

    SpecServerError                 500 internal
    ├── BadRequest                  400 (bad_envelope, bad_json, bad_request)
    ├── Unauthorized                401 (bad_signature, admin_token)
    ├── Forbidden                   403 (key_banned)
    ├── NotFound                    404 (not_found)
    ├── RequestTimeout              408 (body_timeout)
    ├── Conflict                    409 (submission_conflict)
    ├── PayloadTooLarge             413 (body_too_large)
    ├── Unprocessable               422 (schema_invalid, unknown_protocol, inconsistent,
    │                                    invalid_request)
    ├── RateLimited                 429 (rate_limited; Retry-After)
    └── Unavailable                 503 (store_unavailable, storage_off; Retry-After)

A lost or unreachable database (``is_store_down``: SQLAlchemy/psycopg OperationalError,
a pool timeout) is 503 ``store_unavailable`` with Retry-After, never a 500.

specschema's own errors map by class (``SCHEMA_STATUS``). Every response error body is
``{"error": {"code": str, "message": str, "details": any}}``: ours, FastAPI's 404/405/422,
and unexpected exceptions (500, without internals).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from specschema.errors import (
    EnvelopeError,
    PayloadParseError,
    PayloadSchemaError,
    ProtocolError,
    SignatureInvalid,
    SpecSchemaError,
)

log = logging.getLogger("specserver")


class SpecServerError(Exception):
    status = 500
    code = "internal"

    def __init__(
        self,
        message: str,
        details: Any = None,
        *,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        if code is not None:
            self.code = code
        self.retry_after = retry_after


class BadRequest(SpecServerError):
    status = 400
    code = "bad_request"


class Unauthorized(SpecServerError):
    status = 401
    code = "unauthorized"


class Forbidden(SpecServerError):
    status = 403
    code = "forbidden"


class NotFound(SpecServerError):
    status = 404
    code = "not_found"


class RequestTimeout(SpecServerError):
    status = 408
    code = "body_timeout"


class Conflict(SpecServerError):
    status = 409
    code = "submission_conflict"


class PayloadTooLarge(SpecServerError):
    status = 413
    code = "body_too_large"


class Unprocessable(SpecServerError):
    status = 422
    code = "invalid_request"


class RateLimited(SpecServerError):
    status = 429
    code = "rate_limited"


class Unavailable(SpecServerError):
    status = 503
    code = "store_unavailable"


# specschema's errors, by class: the status each one means at the API.
SCHEMA_STATUS: dict[type[SpecSchemaError], int] = {
    EnvelopeError: 400,
    SignatureInvalid: 401,
    PayloadParseError: 400,
    PayloadSchemaError: 422,
    ProtocolError: 422,
}

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


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


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
    return JSONResponse(
        jsonable_encoder(error_body(code, message, details)), status_code=status,
        headers=all_headers or None,
    )


STORE_DOWN_RETRY_AFTER_S = 5.0


def store_down_errors() -> tuple[type[Exception], ...]:
    """Exception classes that mean "the database cannot be reached" (503, not a bug)."""
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    classes: list[type[Exception]] = [OperationalError, PoolTimeout]
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg comes with the server extra
        pass
    else:
        classes.append(psycopg.OperationalError)
    return tuple(classes)


def is_store_down(exc: BaseException) -> bool:
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, store_down_errors())


def as_server_error(exc: Exception) -> SpecServerError:
    """The one mapping from an exception to what the API answers (status, code, message,
    details, Retry-After), as a ``SpecServerError``; unexpected ones are logged here."""
    if is_store_down(exc):  # PostgreSQL restarting, a pool exhausted: retry later
        log.warning("store unavailable: %s", str(exc).strip().splitlines()[:1])
        return Unavailable("the store does not answer right now",
                           retry_after=STORE_DOWN_RETRY_AFTER_S)
    if isinstance(exc, SpecServerError):
        return exc
    if isinstance(exc, SpecSchemaError):
        status = next((s for cls, s in SCHEMA_STATUS.items() if isinstance(exc, cls)), 400)
        return with_status(SpecServerError(exc.message, exc.details, code=exc.code), status)
    log.exception("unexpected error", exc_info=exc)
    return SpecServerError("internal server error")


def with_status(error: SpecServerError, status: int) -> SpecServerError:
    error.status = status
    return error


def response_for(exc: Exception) -> JSONResponse:
    """The JSON error response for any exception."""
    error = as_server_error(exc)
    return error_response(error.status, error.code, error.message, error.details,
                          retry_after=error.retry_after)


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


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return response_for(exc)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SpecServerError, _ours)
    app.add_exception_handler(SpecSchemaError, _ours)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(RequestValidationError, _validation)
    for down in store_down_errors():
        app.add_exception_handler(down, _ours)
    app.add_exception_handler(Exception, _unexpected)
