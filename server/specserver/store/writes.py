"""What the single writer (``store/writer.py``) is handed and what it answers: a submission's
rows to store (``WriteRequest``) and its outcome (``WriteOutcome``, with the submission's
place in the transparency log when it was stored), any other write (``WriteJob``), and
when the next commit may start (``Pacing``), the transaction of a batch being gathered
(``Staging``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, RootTransaction

from specserver.store.logentries import LogReceipt
from specserver.store.rowset import RowSet

Status = Literal["created", "duplicate", "conflict"]


@dataclass(frozen=True)
class WriteOutcome:
    status: Status
    received_at: datetime  # the original one for a duplicate
    log: LogReceipt | None = None  # its log entry, when this write stored it


@dataclass
class WriteRequest:
    submission_id: str
    body_sha256: str
    received_at: datetime
    rows: RowSet
    future: Future[WriteOutcome]


@dataclass
class Pacing:
    """When the next commit may start: ``per_commit`` times the last commit's CPU after it
    ended, at most ``cap_s`` (times from ``time.monotonic``)."""

    per_commit: float
    cap_s: float
    next_at: float = float("-inf")  # nothing committed yet: the first commit need not wait

    def committed(self, ended: float, cpu_s: float) -> None:
        self.next_at = ended + min(self.per_commit * max(cpu_s, 0.0), self.cap_s)


@dataclass
class WriteJob:
    """Any other write (moderation, import), run alone in its own transaction."""

    fn: Callable[[Connection], Any]
    future: Future[Any]


@dataclass
class Staging:
    """The open transaction of a batch being gathered, and the ids appended to it."""

    transaction: RootTransaction | None
    ids: set[str]
    failed: bool = False
