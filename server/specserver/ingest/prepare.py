"""Checks 2-5 plus the rows to store, as one pure step: body bytes in, ``Prepared`` out.

``prepare_submission`` is what a check worker process runs (``checkpool``) and what the
server runs itself when it has no workers. Its result carries only plain data (ids, the
rendered receipt summary, row tuples) so that it crosses a process boundary cheaply:
no pydantic model is pickled.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pydantic import TypeAdapter

from specschema.summary import ConfigSummary
from specserver.ingest.checks import check_submission
from specserver.ingest.rows import submission_rows
from specserver.store import RowSet

_SUMMARIES = TypeAdapter(list[ConfigSummary])


@dataclass(frozen=True)
class CheckLimits:
    """The settings the checks depend on (created_at's accepted window)."""

    max_age: timedelta
    max_future_skew: timedelta


@dataclass(frozen=True)
class Prepared:
    """A submission that passed checks 2-5, ready for the ban/rate gates and the writer."""

    submission_id: str
    key_id: str
    body_sha256: str
    received_at: datetime
    summary_json: bytes  # the receipt's "summary" value, as JSON
    rows: RowSet
    # CPU seconds the checks and rows took (where they ran: a check worker or this
    # process), charged to the sender by the ingest gate (http/submissions.py ``gated``);
    # a measurement, not the submission: two preparations of one body are equal.
    check_cpu_s: float = field(default=0.0, compare=False)


# The protocol versions this process has checked a submission of: the first check of each
# loads modules, the protocol's plan and tables (16-19 ms more CPU than the next, measured),
# which is no sender's cost, so it is not charged (``check_cpu_s`` 0). At most one free
# check per shipped protocol version and process.
_WARMED: set[tuple[str, int]] = set()


def prepare_submission(body: bytes, received_at: datetime, limits: CheckLimits) -> Prepared:
    """Run checks 2-5 on a body that passed the size limit and build its rows; raise the
    first failure (``specserver.errors`` / ``specschema.errors``)."""
    started = time.thread_time()
    checked = check_submission(
        body, now=received_at, max_age=limits.max_age, max_future_skew=limits.max_future_skew
    )
    summary_json = _SUMMARIES.dump_json(checked.summaries)
    rows = submission_rows(checked, received_at)
    protocol = (checked.submission.protocol.id, checked.submission.protocol.version)
    cpu_s = time.thread_time() - started if protocol in _WARMED else 0.0
    _WARMED.add(protocol)
    return Prepared(
        submission_id=checked.submission_id,
        key_id=checked.key_id,
        body_sha256=checked.body_sha256,
        received_at=received_at,
        summary_json=summary_json,
        rows=rows,
        check_cpu_s=cpu_s,
    )


def _utc_iso(value: datetime) -> str:
    """pydantic's rendering of an aware UTC datetime ("...Z")."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.isoformat().replace("+00:00", "Z")


# ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)`` without building an
# encoder per call (json.dumps does for any non-default argument): the server process
# renders one receipt per submission on its event loop.
_receipt_head = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def receipt_json(prepared: Prepared, received_at: datetime, url: str,
                 log: tuple[int, bytes] | None = None) -> bytes:
    """The receipt body, byte for byte what ``ingest_api.Receipt.model_dump_json`` gives
    (a test holds them equal), without building the model for every submission. ``log``:
    the submission's index in the transparency log and its leaf hash, once stored."""
    head = _receipt_head(
        {"submission_id": prepared.submission_id, "key_id": prepared.key_id,
         "received_at": _utc_iso(received_at), "url": url})
    entry = b"null" if log is None else b'{"index":%d,"leaf_hash":"%s"}' % (
        log[0], base64.b64encode(log[1]))
    return (head[:-1].encode() + b',"summary":' + prepared.summary_json + b',"log":' + entry
            + b"}")
