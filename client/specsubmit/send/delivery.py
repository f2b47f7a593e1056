"""POST one signed envelope to the server, retrying what is worth retrying.

- Connection errors, timeouts, 5xx and 429: retried with exponential backoff and full
  jitter (``delay = random() * min(cap, base * 2**attempt)``); a Retry-After header (seconds
  or an HTTP date) is honoured instead when present. Safe because the server is
  idempotent by submission id.
- 200 / 201: delivered only when the body is a complete, valid receipt (``valid_receipt``:
  JSON, the submission id that was sent, an http(s) URL with nothing to escape); a 201
  whose body stalls, breaks off or is not a receipt is not delivered, and is retried (the
  server answers the same bytes again with 200 and the original receipt).
- Each attempt has a total deadline (``deadline_s``, ``SPECSUBMIT_HTTP_DEADLINE_S``),
  checked as each block of the answer arrives; with the read timeout between blocks an
  attempt ends within ``deadline_s + timeout_s`` however slowly a server trickles. At most
  ``MAX_ANSWER_BYTES`` of an answer are read.
- Any other 4xx: final. The server's ``{"error": {"message"}}`` is shown through
  ``specsubmit.outside_text.visible`` (escapes visible, at most 300 characters).

``check_server`` asks GET /healthz once, before a run spends its minutes: a URL that does
not answer, or answers as something other than a specatlas server, is said at once.

``sleep`` and ``rand`` are passed in, so tests run the whole schedule in milliseconds.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from specsubmit import __version__
from specsubmit.errors import (
    ServerUnreachable,
    SubmissionRejected,
    SubmissionUndelivered,
    UsageError,
)
from specsubmit.outside_text import is_plain, visible

SUBMISSIONS_PATH = "/v1/submissions"
# A receipt is about 1 KB, an error shape a few hundred bytes: more is not read.
MAX_ANSWER_BYTES = 256 * 1024
MAX_URL_CHARS = 2048
HEALTH_PATH = "/healthz"


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    base_s: float = 0.5
    cap_s: float = 30.0
    max_retry_after_s: float = 300.0
    timeout_s: float = 30.0
    deadline_s: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    rand: Callable[[], float] = field(default=random.random, compare=False)


def _env_number(name: str, default: float, low: float, high: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name} must be a number, got {raw!r}") from None
    if not low <= value <= high:
        raise UsageError(f"{name} must be between {low:g} and {high:g}, got {raw!r}")
    return value


def retry_policy_from_env() -> RetryPolicy:
    """SPECSUBMIT_RETRY_ATTEMPTS, SPECSUBMIT_RETRY_BASE_S, SPECSUBMIT_RETRY_CAP_S,
    SPECSUBMIT_HTTP_TIMEOUT_S, SPECSUBMIT_HTTP_DEADLINE_S over the defaults."""
    defaults = RetryPolicy()
    return RetryPolicy(
        attempts=int(_env_number("SPECSUBMIT_RETRY_ATTEMPTS", defaults.attempts, 1, 100)),
        base_s=_env_number("SPECSUBMIT_RETRY_BASE_S", defaults.base_s, 0, 600),
        cap_s=_env_number("SPECSUBMIT_RETRY_CAP_S", defaults.cap_s, 0, 3600),
        timeout_s=_env_number("SPECSUBMIT_HTTP_TIMEOUT_S", defaults.timeout_s, 0.1, 3600),
        deadline_s=_env_number("SPECSUBMIT_HTTP_DEADLINE_S", defaults.deadline_s, 0.1, 3600),
    )


@dataclass(frozen=True)
class Receipt:
    submission_id: str
    url: str | None
    status: int
    body: dict[str, Any]
    server: str


def normalize_server(server: str) -> str:
    """'https://host[:port][/prefix]' without a trailing slash; UsageError otherwise."""
    text = server.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise UsageError(
            f"--server must be an http(s) URL like https://host[:port], got {server!r}")
    return text


def backoff_delay(attempt: int, policy: RetryPolicy) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)]."""
    return float(policy.rand() * min(policy.cap_s, policy.base_s * 2**attempt))


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After header: delta-seconds or an HTTP date; None if unusable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def error_message(response: httpx.Response) -> str:
    """The server's `{"error": {"message"}}`, else a short view of the body: either as
    ``visible`` shows it (escapes visible, capped), never verbatim."""
    return answer_message(response.status_code, response.reason_phrase, response.content)


def answer_message(status: int, reason: str, body: bytes) -> str:
    """``error_message`` over an answer already read (at most MAX_ANSWER_BYTES of it)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str):
            return visible(message)
        if isinstance(error, str):
            return visible(error)
    text = body.decode("utf-8", errors="replace").strip()
    return visible(text) if text else f"HTTP {status} {visible(reason, 80)}"


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Built once per process: loading the CA bundle costs ~0.1 s each time."""
    return httpx.create_ssl_context()


class NotAReceipt(Exception):
    """A 200/201 whose body is not a complete, valid receipt (never shown as delivered)."""


def valid_receipt(body: bytes, status: int, server: str, submission_id: str,
                  id_field: str = "submission_id") -> Receipt:
    """The receipt in a 200/201 body; NotAReceipt unless it is complete JSON naming the
    submission that was sent, with an http(s) URL that prints as it is."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise NotAReceipt(f"the {status} answer is not a complete JSON receipt "
                          f"({len(body):,} bytes read)") from None
    if not isinstance(data, dict):
        raise NotAReceipt(f"the {status} answer is not a receipt object")
    receipt_id = data.get(id_field)
    if receipt_id != submission_id:
        kind = id_field.removesuffix("_id")
        raise NotAReceipt(f"the {status} answer names {kind} {visible(receipt_id, 80)}, "
                          f"not {submission_id}")
    url = data.get("url")
    if url is not None and not (isinstance(url, str) and is_plain(url, MAX_URL_CHARS)
                                and urlsplit(url).scheme in ("http", "https")
                                and urlsplit(url).netloc):
        raise NotAReceipt(f"the {status} answer's url is not an http(s) URL: {visible(url, 80)}")
    return Receipt(submission_id, url, status, data, server)


class _PastDeadline(Exception):
    pass


def _exchange(client: httpx.Client, url: str, envelope: bytes | None, headers: dict[str, str],
              deadline_s: float) -> tuple[httpx.Response, bytes]:
    """One POST (a GET without an envelope); the answer's first MAX_ANSWER_BYTES, read
    before ``deadline_s`` passes."""
    started = time.monotonic()
    method = "GET" if envelope is None else "POST"
    with client.stream(method, url, content=envelope, headers=headers) as response:
        body = bytearray()
        for block in response.iter_bytes():
            body += block
            if time.monotonic() - started > deadline_s:
                raise _PastDeadline
            if len(body) > MAX_ANSWER_BYTES:
                del body[MAX_ANSWER_BYTES:]
                break
        return response, bytes(body)


_LOG_ENTRY = re.compile(r"index=(\d{1,18}), leaf-hash=:([A-Za-z0-9+/]{43}=):")


def log_entry_of(header: str | None) -> tuple[int, str] | None:
    """A refusal's place in the server's transparency log, from its ``Log-Entry`` header
    (``index=N, leaf-hash=:<base64>:``); None when absent or not that."""
    found = _LOG_ENTRY.fullmatch(header.strip()) if header else None
    return None if found is None else (int(found[1]), found[2])


def post_envelope(
    envelope: bytes,
    server: str,
    submission_id: str,
    policy: RetryPolicy | None = None,
    transport: httpx.BaseTransport | None = None,
    *,
    path: str = SUBMISSIONS_PATH,
    id_field: str = "submission_id",
) -> Receipt:
    """Deliver or raise SubmissionRejected (final) / SubmissionUndelivered (retry later).
    ``path`` and ``id_field``: where another kind (a cost probe) goes, and the field of its
    receipt that names it."""
    policy = policy or retry_policy_from_env()
    url = f"{server}{path}"
    headers = {"Content-Type": "application/json",
               "User-Agent": f"specsubmit/{__version__}"}
    last_problem = "no attempt made"
    with httpx.Client(timeout=policy.timeout_s, transport=transport, verify=_tls_context(),
                      follow_redirects=False) as client:
        for attempt in range(policy.attempts):
            delay: float | None = None
            try:
                response, body = _exchange(client, url, envelope, headers, policy.deadline_s)
            except _PastDeadline:
                last_problem = (f"{server} did not finish its answer within "
                                f"{policy.deadline_s:g} s")
            except httpx.TransportError as exc:
                problem = visible(f"{type(exc).__name__}: {exc}".rstrip(": "), 200)
                last_problem = f"cannot reach {server}: {problem}"
            else:
                status = response.status_code
                if status in (200, 201):
                    try:
                        return valid_receipt(body, status, server, submission_id, id_field)
                    except NotAReceipt as exc:
                        last_problem = str(exc)
                elif 300 <= status < 400:
                    location = visible(response.headers.get("Location", "another URL"), 200)
                    raise SubmissionRejected(
                        f"server at {server} answered {status} (moved to {location}): "
                        "use the new address as --server", status)
                else:
                    message = answer_message(status, response.reason_phrase, body)
                    if status == 429 or status >= 500:
                        last_problem = f"server answered {status}: {message}"
                        delay = parse_retry_after(response.headers.get("Retry-After"))
                        if delay is not None and delay > policy.max_retry_after_s:
                            raise SubmissionUndelivered(
                                f"{last_problem} (asked to wait {delay:.0f} s)")
                    else:
                        raise SubmissionRejected(
                            f"server rejected the submission ({status}): {message}", status,
                            log_entry_of(response.headers.get("Log-Entry")))
            if attempt + 1 < policy.attempts:
                policy.sleep(delay if delay is not None else backoff_delay(attempt, policy))
    raise SubmissionUndelivered(f"{last_problem} (after {policy.attempts} attempts)")


def check_server(server: str, timeout_s: float = 10.0,
                 transport: httpx.BaseTransport | None = None) -> None:
    """One GET /healthz; ServerUnreachable (one line) unless a specatlas server answers.

    A 503 with the error shape is a specatlas server whose store is down for now: it
    passes, since delivery retries and an undelivered result waits in pending/."""
    url = f"{server}{HEALTH_PATH}"
    hint = "check the URL, or run with --no-submit"
    try:
        with httpx.Client(timeout=timeout_s, transport=transport, verify=_tls_context(),
                          follow_redirects=False) as client:
            response, content = _exchange(
                client, url, None, {"User-Agent": f"specsubmit/{__version__}"}, timeout_s)
    except _PastDeadline:
        raise ServerUnreachable(f"--server {server} did not finish answering GET {HEALTH_PATH} "
                                f"within {timeout_s:g} s; {hint}") from None
    except httpx.TransportError as exc:
        problem = visible(f"{type(exc).__name__}: {exc}".rstrip(": "), 200)
        raise ServerUnreachable(f"--server {server} does not answer ({problem}); {hint}") from None
    if 300 <= response.status_code < 400:
        location = visible(response.headers.get("Location", "another URL"), 200)
        raise ServerUnreachable(f"--server {server} answered {response.status_code} (moved to "
                                f"{location}): use the new address as --server")
    try:
        body = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        body = None
    looks_like_ours = isinstance(body, dict) and (
        (response.status_code == 200 and body.get("status") == "ok")
        or (response.status_code == 503 and isinstance(body.get("error"), dict)))
    if not looks_like_ours:
        raise ServerUnreachable(
            f"--server {server} is not a specatlas server (GET {HEALTH_PATH} answered "
            f"{response.status_code} {visible(response.reason_phrase, 80)}); {hint}")


__all__ = [
    "MAX_ANSWER_BYTES",
    "NotAReceipt",
    "Receipt",
    "RetryPolicy",
    "backoff_delay",
    "check_server",
    "answer_message",
    "error_message",
    "normalize_server",
    "parse_retry_after",
    "post_envelope",
    "retry_policy_from_env",
    "valid_receipt",
]
