"""The transparency log's entries in the store: what a leaf holds, and its numbering.

An entry is a type byte and a SHA-256 (``specschema.tlog.entries``): ``ENVELOPE`` then the
digest of the exact envelope bytes the server verified and stored (accepted or
quarantined); ``REFUSED`` then the digest of an envelope whose signature verified and which
a rule then refused (logged in a transaction of its own: ``log_refused``; no submission
id is kept, so nothing but its hash is public); ``PROBE`` then the digest of a stored cost
probe's envelope, in the transaction that stores it, naming the probe's id
(``log_probe``); ``MODERATION`` then the
digest of a maintainer's decision (every audit row: hide, unhide, reject, ban, unban,
import, a settled dispute, an ad-hoc query) as canonical JSON (``moderation_text``): the
audit row as ``GET /v1/submissions/{id}`` shows it, plus ``affects``, the indexes of the
entries it names (the submission's, or a banned key's submissions'). Its leaf hash is RFC
6962's SHA-256(0x00 || entry) (``specschema.tlog``). The log holds hashes only; the bytes
are served where the submission is public.

Entries are numbered 0, 1, 2, ... without gaps, in the same transaction as the rows they
name, so that a commit stores both or neither. One sequencer per store: on DuckDB the
writer thread (a file admits one process), which keeps the next number in memory between
commits and forgets it after anything that failed or that it did not write itself; on
PostgreSQL the transaction reads the next number after ``changes.mark`` has taken the
board clock's row lock, which every replica's storing transaction takes and holds until
its commit, so numbers follow commit order there too. The table's primary key refuses a
number taken twice.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table, func, select

from specschema.tlog import ENVELOPE, MODERATION, PROBE, REFUSED, leaf_hash, typed_entry
from specserver.store import tables
from specserver.store.appenders import insert_for
from specserver.store.backend import backend_of


@dataclass(frozen=True)
class LogReceipt:
    """A stored entry's place: its index and its RFC 6962 leaf hash."""

    index: int
    leaf_hash: bytes


def envelope_entry(envelope_sha256: str) -> bytes:
    return typed_entry(ENVELOPE, bytes.fromhex(envelope_sha256))


def next_index(conn: Connection) -> int:
    # fetched to the end: DuckDB refuses an appender beside an unfinished result
    found = conn.execute(select(func.max(tables.log_entries.c.idx))).scalars().all()
    return 0 if not found or found[0] is None else int(found[0]) + 1


def receipt_of(conn: Connection, submission_id: str) -> LogReceipt | None:
    """The log entry that names a stored submission (none for an import)."""
    log = tables.log_entries
    rows = conn.execute(select(log.c.idx, log.c.entry)
                        .where(log.c.submission_id == submission_id)).all()
    return None if not rows else LogReceipt(int(rows[0][0]), leaf_hash(bytes(rows[0][1])))


class Sequencer:
    """Numbers the entries of the writer's transactions (module doc). ``append`` inside the
    transaction; ``committed`` after its commit; ``forget`` after anything else."""

    def __init__(self, keeps_count: bool) -> None:
        self.keeps_count = keeps_count  # DuckDB: one writer thread, the count in memory
        self._next: int | None = None
        self._pending: int | None = None

    def append(self, conn: Connection, named: Sequence[tuple[str, str]], logged_at: datetime,
               insert: Any) -> list[LogReceipt]:
        """Log (submission id, envelope sha256 hex) pairs in order, with ``insert(conn,
        table, rows)``; their receipts."""
        return self.append_entries(conn, [(envelope_entry(digest), sid) for sid, digest in named],
                                   logged_at, insert)

    def append_entries(self, conn: Connection, entries: Sequence[tuple[bytes, str | None]],
                       logged_at: datetime, insert: Any) -> list[LogReceipt]:
        """Log (entry, submission id or None) pairs in order; their receipts."""
        if not entries:
            return []
        start = self._next if self.keeps_count and self._next is not None else next_index(conn)
        table: Table = tables.log_entries
        insert(conn, table, [(start + i, entry, sid, logged_at)
                             for i, (entry, sid) in enumerate(entries)])
        self._pending = start + len(entries)
        return [LogReceipt(start + i, leaf_hash(entry)) for i, (entry, _) in enumerate(entries)]

    def committed(self) -> None:
        self._next, self._pending = self._pending, None

    def forget(self) -> None:
        self._next = self._pending = None


def create_log(conn: Connection) -> None:
    """The store version that adds the log: its table, and an entry for every signed
    submission already stored, oldest first, so that the log names every one of them."""
    tables.log_entries.create(conn, checkfirst=True)
    if next_index(conn) > 0:
        return
    sub = tables.submissions
    stored = conn.execute(select(sub.c.submission_id, sub.c.envelope_sha256)
                          .where(sub.c.source == "signed")
                          .order_by(sub.c.received_at, sub.c.submission_id)).all()
    insert = insert_for(backend_of(conn))
    Sequencer(keeps_count=False).append(
        conn, [(str(r[0]), str(r[1])) for r in stored],
        datetime.now(UTC).replace(tzinfo=None), insert)


def moderation_text(audit_row: dict[str, Any], affects: Sequence[int]) -> bytes:
    """The decision a ``MODERATION`` entry hashes: the audit row with its time as the public
    view writes it (ISO 8601, ``Z``) and ``affects``, as sorted, compact JSON."""
    shown = {key: value.isoformat() + "Z" if isinstance(value, datetime) else value
             for key, value in audit_row.items()}
    shown["affects"] = sorted(affects)
    return json.dumps(shown, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def moderation_entry(audit_row: dict[str, Any], affects: Sequence[int]) -> bytes:
    return typed_entry(MODERATION, hashlib.sha256(moderation_text(audit_row, affects)).digest())


def affected_indexes(conn: Connection, action: str, target: str,
                     below: int | None = None) -> list[int]:
    """The indexes a decision names: the target submission's entry, or a banned key's
    submissions' entries; with ``below``, only those numbered before it (what the decision
    logged at ``below`` named when it was made: later entries came after it)."""
    log, sub = tables.log_entries, tables.submissions
    if action in ("ban", "unban"):
        named = select(log.c.idx).join(sub, sub.c.submission_id == log.c.submission_id) \
            .where(sub.c.key_id == target)
    else:
        named = select(log.c.idx).where(log.c.submission_id == target)
    if below is not None:
        named = named.where(log.c.idx < below)
    return sorted(int(i) for i in conn.execute(named).scalars().all())


def log_moderation(conn: Connection, audit_row: dict[str, Any]) -> LogReceipt:
    """Log a maintainer's decision, in its transaction (after ``changes.mark``: on
    PostgreSQL the clock's row lock orders it among the replicas' entries)."""
    affects = affected_indexes(conn, str(audit_row["action"]), str(audit_row["target"]))
    entry = moderation_entry(audit_row, affects)
    insert = insert_for(backend_of(conn))
    return Sequencer(keeps_count=False).append_entries(
        conn, [(entry, None)], datetime.now(UTC).replace(tzinfo=None), insert)[0]


# Taken by every storing transaction on PostgreSQL (``changes.mark`` bumps it): holding it
# orders refusals' entries among the replicas' entries without marking a board change.
_LOCK_CLOCK = "SELECT seq FROM board_clock WHERE id = 1 FOR UPDATE"


def log_refused(conn: Connection, envelope_sha256s: Sequence[str]) -> list[LogReceipt]:
    """Log envelopes refused after their signature verified, in one transaction of their
    own (a writer job: on DuckDB the writer thread numbers them; on PostgreSQL after taking
    the board clock's row lock, as every storing transaction does). The same bytes refused
    twice are two entries: each refusal is an event, and dropping repeats would cost a
    lookup per refusal without stopping a sender who changes one byte."""
    if not envelope_sha256s:
        return []
    backend = backend_of(conn)
    if not backend.one_writer:
        conn.exec_driver_sql(_LOCK_CLOCK).all()
    insert = insert_for(backend)
    return Sequencer(keeps_count=False).append_entries(
        conn, [(typed_entry(REFUSED, bytes.fromhex(d)), None) for d in envelope_sha256s],
        datetime.now(UTC).replace(tzinfo=None), insert)


def log_probe(conn: Connection, probe_id: str, envelope_sha256: str) -> LogReceipt:
    """Log a cost probe stored in this transaction (a writer job), under its id; on
    PostgreSQL after taking the board clock's row lock, as every storing transaction
    does."""
    backend = backend_of(conn)
    if not backend.one_writer:
        conn.exec_driver_sql(_LOCK_CLOCK).all()
    insert = insert_for(backend)
    return Sequencer(keeps_count=False).append_entries(
        conn, [(typed_entry(PROBE, bytes.fromhex(envelope_sha256)), probe_id)],
        datetime.now(UTC).replace(tzinfo=None), insert)[0]


RunJob = Callable[[Callable[[Connection], Any]], "Future[Any]"]


class RefusalLog:
    """Refusals logged together: those that queue while the writer is busy go in one job,
    one transaction and one read of the next number (a refusal alone costs a transaction,
    about 2 ms of CPU on DuckDB: BENCHMARKS.md, "Refused envelopes in the log"; a flood
    of them then costs one per writer turn, not one each). Each future resolves after the
    commit that holds its entry."""

    def __init__(self, run_job: RunJob) -> None:
        self._run_job = run_job
        self._lock = threading.Lock()
        self._queued: list[tuple[str, Future[LogReceipt]]] = []

    def log(self, envelope_sha256: str) -> Future[LogReceipt]:
        future: Future[LogReceipt] = Future()
        with self._lock:
            self._queued.append((envelope_sha256, future))
            first = len(self._queued) == 1
        if first:  # otherwise a job that has not started yet takes it
            taken: list[tuple[str, Future[LogReceipt]]] = []

            def write(conn: Connection) -> list[LogReceipt]:
                self._take(taken)
                return log_refused(conn, [digest for digest, _ in taken])

            self._run_job(write).add_done_callback(lambda done: self._settle(done, taken))
        return future

    def _take(self, into: list[tuple[str, Future[LogReceipt]]]) -> None:
        with self._lock:
            into.extend(self._queued)
            self._queued = []

    def _settle(self, done: Future[list[LogReceipt]],
                taken: list[tuple[str, Future[LogReceipt]]]) -> None:
        error = done.exception()
        if error is not None and not taken:  # the job never ran (a closed store)
            self._take(taken)
        for i, (_, future) in enumerate(taken):
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(done.result()[i])
