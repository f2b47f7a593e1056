"""The one exception hierarchy of specserver: what went wrong, in the domain's words.

    SpecServerError                 internal
    ├── Malformed                   bad_envelope, bad_json, bad_request
    ├── NotAuthenticated            bad_signature, admin_token
    ├── NotPermitted                key_banned, admin_off
    ├── NotFound                    not_found
    ├── BodyTimeout                 body_timeout
    ├── Conflict                    submission_conflict
    ├── Gone                        redacted
    ├── BodyTooLarge                body_too_large
    ├── Invalid                     schema_invalid, unknown_protocol, inconsistent,
    │                               invalid_request
    ├── RateLimited                 rate_limited (retry_after)
    └── Unavailable                 store_unavailable, storage_off, exports_busy (retry_after)

No class here knows HTTP: ``specserver.http.errors`` is the one place that maps each to a
status and the one JSON error shape, so the pure checks, the store and the check workers
never import FastAPI. specschema's errors become ours in ``from_schema_error``.
"""

from __future__ import annotations

import logging
from typing import Any

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
    code = "internal"
    # A refusal that came after the envelope's signature verified names the key that signed
    # it; the ingest gate logs such a refusal in the transparency log and keeps the entry's
    # (index, leaf hash) here for the answer (http/submissions.py ``gated``).
    signed_by: str | None = None
    logged: tuple[int, bytes] | None = None

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


class Malformed(SpecServerError):
    """The request cannot be read at all (not JSON, not an envelope)."""

    code = "bad_request"


class NotAuthenticated(SpecServerError):
    """No valid signature or token."""

    code = "unauthorized"


class NotPermitted(SpecServerError):
    """Authenticated, but not allowed (a banned key, an admin API that is off)."""

    code = "forbidden"


class NotFound(SpecServerError):
    code = "not_found"


class BodyTimeout(SpecServerError):
    """The client did not send its body within the deadline."""

    code = "body_timeout"


class Conflict(SpecServerError):
    code = "submission_conflict"


class Gone(SpecServerError):
    """It exists but is withdrawn from public view (a hidden submission's envelope)."""

    code = "gone"


class BodyTooLarge(SpecServerError):
    code = "body_too_large"


class Invalid(SpecServerError):
    """Readable, but breaks a rule (schema, protocol, consistency, a query parameter)."""

    code = "invalid_request"


class RateLimited(SpecServerError):
    code = "rate_limited"


class Unavailable(SpecServerError):
    """Try again later (the store does not answer, storage is off, a worker died)."""

    code = "store_unavailable"


# specschema's errors, by class: which of ours each one is.
_FROM_SCHEMA: tuple[tuple[type[SpecSchemaError], type[SpecServerError]], ...] = (
    (EnvelopeError, Malformed),
    (SignatureInvalid, NotAuthenticated),
    (PayloadParseError, Malformed),
    (PayloadSchemaError, Invalid),
    (ProtocolError, Invalid),
)

# By name, for errors that cross a process boundary (check workers send the kind's name).
KINDS: dict[str, type[SpecServerError]] = {
    cls.__name__: cls
    for cls in (SpecServerError, Malformed, NotAuthenticated, NotPermitted, NotFound,
                BodyTimeout, Conflict, Gone, BodyTooLarge, Invalid, RateLimited, Unavailable)
}


def from_schema_error(exc: SpecSchemaError) -> SpecServerError:
    kind = next((ours for theirs, ours in _FROM_SCHEMA if isinstance(exc, theirs)), Malformed)
    return kind(exc.message, exc.details, code=exc.code)


def signed_refusal(exc: Exception, key_id: str) -> SpecServerError:
    """``exc`` (a refusal) as one of ours, marked as coming after ``key_id``'s signature
    verified."""
    error = as_domain_error(exc)
    error.signed_by = key_id
    return error


def as_domain_error(exc: Exception) -> SpecServerError:
    """Any exception as one of ours; an unexpected one is logged here and becomes internal."""
    if isinstance(exc, SpecServerError):
        return exc
    if isinstance(exc, SpecSchemaError):
        return from_schema_error(exc)
    log.exception("unexpected error", exc_info=exc)
    return SpecServerError("internal server error")
