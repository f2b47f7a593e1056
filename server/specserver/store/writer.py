"""The single writer: group commit of submissions, acknowledged only after the commit.

Request handlers hand a ``WriteRequest`` to ``GroupCommitWriter.submit`` and wait on its
future. One thread takes the first request, gathers whatever else arrives within
``window_s`` (up to ``max_batch``), appends all their rows table by table in ONE
transaction, commits, and only then resolves every future. A per-submission transaction
costs ~1.5 ms on a DuckDB file; one commit per batch amortises it (see
docs/server.md, "Write path").

Pacing: a commit of the six ingest tables costs ~10 ms of CPU whatever the batch holds, so
at a low steady rate, where the request side's hint (``nothing_more_coming``) ends every
gather at once, committing each submission alone spent half a core on commits at 50
submissions/s. The next commit therefore starts no sooner than ``PACE_PER_COMMIT`` times
the last commit's CPU after that commit ended (at most ``max_window_s``): the writer
spends at most 1 / (1 + ``PACE_PER_COMMIT``) of a core committing, and a submission waits
at most ``max_window_s`` for its commit to start. After an idle spell longer than that the
next submission finds the interval over and is committed at once; under pacing the hint
means "commit as soon as the interval allows". ``stop()`` and a full batch do not wait.

Staged appends (DuckDB): while a batch gathers, whenever the queue is empty the writer
opens the batch's transaction and appends the rows that have arrived so far (the
appender's conversion of Python values, a third of a commit's CPU), so that after the last
arrival only the flush and the commit are left. Nothing is acknowledged before the commit;
if staging fails for any reason, the transaction is rolled back and the batch is written
the plain way, with the same outcomes.

Idempotency lives in the database: the submission id is the primary key. A batch is
appended optimistically; refused for an id already stored (a repeated POST), it is rolled
back, its stored ids are answered from one query (``store/refusals.py``: same bytes ->
``duplicate``, other bytes -> ``conflict``) and the rest written together again. If that
fails too, or on any other refusal (a full disk, a concurrent replica on PostgreSQL), each
request is retried alone, with the same outcomes, still failing -> ``Unavailable``.

Bulk appends per dialect (``store/appenders.py``): DuckDB's native appender; PostgreSQL's
binary COPY (``store/postgres.py``, a writer of its own); anything else SQLAlchemy Core
``insert()``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine

from specserver.errors import Unavailable
from specserver.store import changes, refusals, tables
from specserver.store.appenders import BulkInsert, DuckDBAppenders, bulk_insert_for, is_conflict
from specserver.store.appenders import duckdb_append as duckdb_append  # migrations use it
from specserver.store.backend import backend_of
from specserver.store.logentries import LogReceipt, Sequencer
from specserver.store.tables import INGEST_TABLES, RowSet
from specserver.store.writes import Pacing, Staging, WriteJob, WriteOutcome, WriteRequest

log = logging.getLogger("specserver.store.writer")

RETRY_AFTER_S = 5.0
MAX_WINDOW_S = 0.1  # the longest a submission waits for its batch to gather
# Gather for this many times the last commit's duration (BENCHMARKS.md, "Ingest": 3 gave
# ~15 % more accepted/s than 1 at 256 connections; at 64 connections latency caps it).
GATHER_PER_COMMIT = 3.0
# Start a commit no sooner than this many times the last commit's CPU after it ended (the
# module doc, "Pacing"): commits take at most a fifth of a core. 9 (a tenth) kept 4
# connections that wait for each answer from reaching 50/s: BENCHMARKS.md, "Pacing the writer".
PACE_PER_COMMIT = 4.0


_STOP = object()
_NOTHING_MORE = object()


def _now() -> datetime:
    """A log entry's time: naive UTC, as the store keeps times."""
    return datetime.now(UTC).replace(tzinfo=None)


# --- the writer thread --------------------------------------------------------------------


class GroupCommitWriter:
    def __init__(
        self,
        engine: Engine,
        *,
        window_s: float = 0.004,
        max_batch: int = 512,
        bulk_insert: BulkInsert | None = None,
        pace_per_commit: float = PACE_PER_COMMIT,
    ) -> None:
        self.engine = engine
        self.window_s = window_s
        self.max_window_s = max(window_s, MAX_WINDOW_S)
        self.last_commit_s = 0.0
        self.pacing = Pacing(pace_per_commit, self.max_window_s)
        self.max_batch = max_batch
        self.backend = backend_of(engine)
        self.bulk_insert = bulk_insert or bulk_insert_for(self.backend)
        # Staged appends need appenders that can hold rows unflushed (the module doc).
        self._stager = self.bulk_insert if isinstance(self.bulk_insert, DuckDBAppenders) else None
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._conn: Connection | None = None
        self.batches = 0
        self.committed = 0
        self.staged_commits = 0  # batches committed from staged appends
        self.paced = 0  # batches begun within the pacing interval: their commit waited (tests)
        self.resets = 0  # connections dropped after a failure (tests count them)
        self.refused_batches_split = 0  # refused for a stored id, the rest written together
        self._staging: Staging | None = None
        self.sequencer = Sequencer(keeps_count=self.backend.one_writer)

    # public -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="specserver-writer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish what is queued, then stop."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join(timeout)
        self._thread = None

    def submit(self, request: WriteRequest) -> None:
        if self._thread is None:
            request.future.set_exception(Unavailable("the store is closed",
                                                     retry_after=RETRY_AFTER_S))
            return
        self._queue.put(request)

    def nothing_more_coming(self) -> None:
        """A hint from the request side: every submission it is handling has been
        submitted, so gathering longer only adds latency; commit what is queued as soon as
        the pacing interval allows (at once after an idle spell)."""
        if self._thread is not None:
            self._queue.put(_NOTHING_MORE)

    def run_job(self, fn: Callable[[Connection], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        if self._thread is None:
            future.set_exception(Unavailable("the store is closed", retry_after=RETRY_AFTER_S))
        else:
            self._queue.put(WriteJob(fn, future))
        return future

    # the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                break
            if first is _NOTHING_MORE:  # a hint for a batch that has been committed already
                continue
            batch: list[object] = [first]
            # Gather for the window, and in any case until the pacing interval is over.
            now = time.monotonic()
            paced_until = self.pacing.next_at
            if paced_until > now:
                self.paced += 1
            deadline = max(now + self.gather_window(), paced_until)
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    self._stage(batch)  # nothing to take: append what has arrived
                    remaining = deadline - time.monotonic()
                    try:
                        if remaining <= 0:
                            break
                        item = self._queue.get(timeout=remaining)
                    except queue.Empty:
                        break
                if item is _STOP:
                    stopping = True
                    break
                if item is _NOTHING_MORE:  # gather no longer than the pacing asks
                    if time.monotonic() >= paced_until:
                        break
                    deadline = min(deadline, paced_until)
                    continue
                batch.append(item)
            self._commit(batch)
        # Drain whatever raced with the stop signal.
        leftovers: list[WriteRequest] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, WriteRequest):
                leftovers.append(item)
            elif isinstance(item, WriteJob):
                self._run_job(item)
        if leftovers:
            self._process(leftovers)
        self._close_conn()

    def _commit(self, batch: list[object]) -> None:
        """Write the batch's requests in one transaction and its jobs each in its own,
        then start the pacing interval from the CPU that took."""
        cpu = time.thread_time()
        requests = [b for b in batch if isinstance(b, WriteRequest)]
        if requests:
            self._process(requests)
        for job in (b for b in batch if isinstance(b, WriteJob)):
            self._run_job(job)
        self.pacing.committed(time.monotonic(), time.thread_time() - cpu)

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            self._conn = self.engine.connect()
        return self._conn

    def _forget_bulk_state(self) -> None:
        reset = getattr(self.bulk_insert, "reset", None)
        if reset is not None:
            reset()

    def _close_conn(self) -> None:
        self._forget_bulk_state()
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                log.warning("closing the writer connection failed", exc_info=True)
            self._conn = None

    def _reset(self) -> None:
        """After a failed write: drop the connection (and DuckDB's instance) and reopen."""
        self.resets += 1
        self.sequencer.forget()
        self._close_conn()
        if self.backend.embedded:
            self.engine.dispose()

    def gather_window(self) -> float:
        """How long to gather a batch: ``window_s``, or ``GATHER_PER_COMMIT`` times as long
        as the last commit took (up to ``MAX_WINDOW_S``). A DuckDB commit of the six
        ingest tables has a fixed cost of ~10-20 ms of CPU here whatever the batch size
        (one appender flush per table, the commit and WAL sync); under load, gathering
        for a few commit times makes batches grow with the load, so that the fixed cost
        is spread over more submissions (the writer spends at most about a quarter of
        its time committing), while a lone submission still waits only ``window_s``."""
        return min(max(self.window_s, GATHER_PER_COMMIT * self.last_commit_s),
                   self.max_window_s)

    def _process(self, batch: list[WriteRequest]) -> None:
        started = time.monotonic()
        try:
            outcomes = self._write_batch(batch)
            self.last_commit_s = time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 - any refusal: retry one by one
            log.info("batch of %d refused (%s); retrying one by one", len(batch), exc)
            self._forget_bulk_state()
            self.sequencer.forget()
            if not is_conflict(exc):
                self._reset()
                outcomes = None
            else:
                outcomes = self._write_past_stored(batch)
        if outcomes is not None:
            self.batches += 1
            self.committed += sum(1 for o in outcomes if o.status == "created")
            for request, outcome in zip(batch, outcomes, strict=True):
                request.future.set_result(outcome)
            return
        for request in batch:
            try:
                outcome = self._write_one(request)
            except Exception as exc:  # noqa: BLE001 - the store cannot take it now
                log.warning("store write failed for %s: %s", request.submission_id, exc)
                self._reset()
                request.future.set_exception(
                    Unavailable("the store cannot take submissions right now",
                                retry_after=RETRY_AFTER_S)
                )
            else:
                if outcome.status == "created":
                    self.committed += 1
                request.future.set_result(outcome)

    def _write_past_stored(self, batch: list[WriteRequest]) -> list[WriteOutcome] | None:
        """After the batch was refused for an id already stored: its stored ids are
        answered from one query, the rest written as one batch again (else a batch with
        one repeat costs a ~10 ms commit per submission, and with repeats arriving every
        batch has one). None when nothing is stored or the second write fails too."""
        try:
            conn = self._connection()
            with conn.begin():
                found = refusals.stored(conn, {r.submission_id for r in batch})
        except Exception as exc:  # noqa: BLE001 - each is retried alone
            log.info("reading a refused batch's stored ids failed (%s)", exc)
            self._reset()
            return None
        if not found:
            return None
        fresh = [r for r in batch if r.submission_id not in found]
        try:
            written = iter(self._write_batch(fresh) if fresh else [])
        except Exception as exc:  # noqa: BLE001 - each is retried alone
            log.info("batch of %d new refused too (%s)", len(fresh), exc)
            self._forget_bulk_state()
            self.sequencer.forget()
            if not is_conflict(exc):
                self._reset()
            return None
        self.refused_batches_split += 1
        return [next(written) if r.submission_id not in found
                else refusals.answer(found[r.submission_id], r) for r in batch]

    def _stage(self, batch: Sequence[object]) -> None:
        """Append the rows of the batch's requests not appended yet (the first of each id)
        into the batch's open transaction, when the bulk insert can stage (DuckDB)."""
        stager = self._stager
        if stager is None or (self._staging is not None and self._staging.failed):
            return
        ids = self._staging.ids if self._staging is not None else set()
        rows = RowSet()
        for item in batch:
            if isinstance(item, WriteRequest) and item.submission_id not in ids:
                ids.add(item.submission_id)
                rows.extend(item.rows)
        if not any(rows.rows.values()):
            return
        try:
            conn = self._connection()
            if self._staging is None:
                self._staging = Staging(conn.begin(), ids)
            for table in INGEST_TABLES:
                table_rows = rows.rows[table.name]
                if table_rows:
                    stager.stage(conn, table, table_rows)
        except Exception as exc:  # noqa: BLE001 - the batch is written the plain way
            log.info("staging a batch failed (%s); it will be written at once", exc)
            if self._staging is None:  # the transaction could not even begin
                self._staging = Staging(None, ids)
            self._staging.failed = True

    def _commit_staged(self, batch: list[WriteRequest],
                       finish: Callable[[Connection], None]) -> bool:
        """Commit the staged transaction after appending the last arrivals and running
        ``finish`` (the log entries and the change log); False when staging failed
        (rolled back, for the plain write). Raises what the commit raises."""
        if self._staging is None:
            return False
        self._stage(batch)  # the last arrivals
        staging, self._staging = self._staging, None
        transaction = staging.transaction
        if staging.failed:
            if transaction is not None and transaction.is_active:
                try:
                    transaction.rollback()
                except Exception:  # noqa: BLE001 - a broken connection is reset below
                    log.info("rolling back a failed staging failed", exc_info=True)
                    self._reset()
            if self._stager is not None:
                self._stager.discard()
            return False
        assert transaction is not None
        try:
            assert self._stager is not None
            self._stager.flush_all()
            finish(self._connection())
            transaction.commit()
        except BaseException:
            if transaction.is_active:
                transaction.rollback()
            raise
        self.staged_commits += 1
        return True

    def _write_batch(self, batch: list[WriteRequest]) -> list[WriteOutcome]:
        """Optimistic: everything new, duplicates inside the batch resolved here."""
        first: dict[str, WriteRequest] = {}
        outcomes: list[WriteOutcome] = []
        rows = RowSet()
        for request in batch:
            earlier = first.get(request.submission_id)
            if earlier is None:
                first[request.submission_id] = request
                outcomes.append(WriteOutcome("created", request.received_at))
            elif earlier.body_sha256 == request.body_sha256:
                outcomes.append(WriteOutcome("duplicate", earlier.received_at))
            else:
                outcomes.append(WriteOutcome("conflict", earlier.received_at))
        stored = changes.stored_contributors(
            request.rows.rows[tables.submissions.name][0] for request in first.values())
        named = [(r.submission_id, r.body_sha256) for r in first.values()]
        receipts: list[LogReceipt] = []

        def finish(conn: Connection) -> None:  # the transaction's last steps
            receipts[:] = self.sequencer.append(conn, named, _now(), self.bulk_insert)
            changes.mark(conn, stored)

        if not self._commit_staged(batch, finish):
            for request in first.values():
                rows.extend(request.rows)
            conn = self._connection()
            with conn.begin():
                for table in INGEST_TABLES:
                    table_rows = rows.rows[table.name]
                    if table_rows:
                        self.bulk_insert(conn, table, table_rows)
                finish(conn)
        self.sequencer.committed()
        logged = dict(zip(first, receipts, strict=True))
        return [replace(o, log=logged[r.submission_id]) if o.status != "conflict" else o
                for r, o in zip(batch, outcomes, strict=True)]

    def _write_one(self, request: WriteRequest) -> WriteOutcome:
        conn = self._connection()
        with conn.begin():
            found = refusals.stored(conn, [request.submission_id]).get(request.submission_id)
            if found is not None:
                return refusals.answer(found, request)
            for table in INGEST_TABLES:
                table_rows = request.rows.rows[table.name]
                if table_rows:
                    self.bulk_insert(conn, table, table_rows)
            receipt = self.sequencer.append(conn, [(request.submission_id,
                                                    request.body_sha256)],
                                            _now(), self.bulk_insert)[0]
            changes.mark(conn, changes.stored_contributors(
                request.rows.rows[tables.submissions.name]))
        self.sequencer.committed()
        return WriteOutcome("created", request.received_at, receipt)

    def _run_job(self, job: WriteJob) -> None:
        self.sequencer.forget()  # a job may log entries of its own
        try:
            conn = self._connection()
            with conn.begin():
                result = job.fn(conn)
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            if refusals.connection_broken(self._conn, exc):
                self._reset()
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)
