"""Check workers: processes that run ``prepare_submission`` beside the server process.

Why: a Python process computes on one core at a time (the GIL), and verifying, parsing,
checking and turning a submission into rows is most of the CPU a submission costs. The
store cannot follow them out: an embedded DuckDB file is opened by one process only. So
the server process keeps HTTP, the ban and rate gates and the single writer, and hands
each body to the least busy of N worker processes (BENCHMARKS.md, "Ingest").

A worker is ``python -m specserver.ingest.workers --fd N ...``, a plain subprocess holding one
end of a socket pair (not ``multiprocessing``, whose spawn re-imports the parent's main
module: a script without a ``__main__`` guard would start workers recursively). Frames
are length-prefixed (4-byte big-endian size):
    server -> worker   8-byte received_at (microseconds since the epoch, UTC) + body
    worker -> server   pickle of ("ok", Prepared without the envelope's bytes) or
                       ("error", (kind, code, message, details, retry_after, signed_by))
A worker answers its frames in order, so each worker's waiting requests are a FIFO; the
server keeps each request's body beside its future and puts it back into the envelope row
(``with_envelope``): sending the body back (12 KB of the 18 KB answer) cost both processes
a copy and pickling.

A worker that dies fails the requests it held with 503 (Retry-After) and is replaced. A
worker whose server dies sees end-of-file and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import pickle
import signal
import socket
import struct
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from specserver.errors import KINDS, SpecServerError, Unavailable, as_domain_error
from specserver.ingest.prepare import CheckLimits, Prepared, prepare_submission
from specserver.settings import GC_THRESHOLDS
from specserver.store import RowSet

log = logging.getLogger("specserver.ingest.workers")

READY = b"ready"
RETRY_AFTER_S = 1.0
RESPAWN_DELAY_S = 0.5  # a worker that cannot start must not be respawned in a tight loop
START_TIMEOUT_S = 60.0
_HEADER = struct.Struct("!I")
_MICROS = struct.Struct("!q")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- the frames ---------------------------------------------------------------------------


def encode_request(body: bytes, received_at: datetime) -> bytes:
    micros = (received_at - _EPOCH) // timedelta(microseconds=1)
    return _MICROS.pack(micros) + body


def decode_request(frame: bytes) -> tuple[bytes, datetime]:
    (micros,) = _MICROS.unpack_from(frame)
    return frame[_MICROS.size:], _EPOCH + timedelta(microseconds=micros)


ErrorParts = tuple[str, str, str, Any, float | None, str | None]


def error_parts(exc: Exception) -> ErrorParts:
    """A refusal as plain data: the error kind's name, code, message, details, Retry-After,
    and the key whose signature verified before it (a refusal the server logs)."""
    error = as_domain_error(exc)
    # The nearest kind the other side knows (a ConsistencyError travels as Invalid).
    kind = next(c.__name__ for c in type(error).__mro__ if c.__name__ in KINDS)
    return (kind, error.code, error.message, error.details, error.retry_after,
            error.signed_by)


def error_from_parts(parts: ErrorParts) -> SpecServerError:
    kind, code, message, details, retry_after, signed_by = parts
    error = KINDS.get(kind, SpecServerError)(message, details, code=code,
                                             retry_after=retry_after)
    error.signed_by = signed_by
    return error


def without_envelope(prepared: Prepared) -> Prepared:
    """The answer's rows: the envelope row without the body (the server has it)."""
    ((submission_id, _body),) = prepared.rows.rows["envelopes"]
    return replace(prepared, rows=RowSet({**prepared.rows.rows,
                                          "envelopes": [(submission_id, None)]}))


def with_envelope(prepared: Prepared, body: bytes) -> Prepared:
    """``without_envelope`` undone, with the body of the request this answers."""
    ((submission_id, missing),) = prepared.rows.rows["envelopes"]
    assert missing is None, "a worker's answer carries no envelope bytes"
    prepared.rows.rows["envelopes"] = [(submission_id, body)]
    return prepared


def answer_for(frame: bytes, limits: CheckLimits) -> bytes:
    """A worker's answer to one request frame (pure apart from logging a bug)."""
    body, received_at = decode_request(frame)
    try:
        result: tuple[str, Any] = (
            "ok", without_envelope(prepare_submission(body, received_at, limits)))
    except Exception as exc:  # noqa: BLE001 - every refusal crosses back as its parts
        result = ("error", error_parts(exc))
    return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)


def split_frames(buffer: bytearray) -> list[bytes]:
    """Take every complete frame off the front of ``buffer``."""
    frames: list[bytes] = []
    start = 0
    while len(buffer) - start >= _HEADER.size:
        (size,) = _HEADER.unpack_from(buffer, start)
        end = start + _HEADER.size + size
        if end > len(buffer):
            break
        frames.append(bytes(buffer[start + _HEADER.size:end]))
        start = end
    del buffer[:start]
    return frames


def serve_frames(sock: socket.socket, limits: CheckLimits) -> None:
    """A worker's loop: answer frames until the server closes its end. Frames that arrive
    together are answered together, in one send (fewer system calls and wake-ups on both
    sides under load; the server coalesces its frames the same way)."""
    sock.sendall(_HEADER.pack(len(READY)) + READY)
    buffer = bytearray()
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return
        buffer += data
        answers = [answer_for(frame, limits) for frame in split_frames(buffer)]
        if answers:
            sock.sendall(b"".join(_HEADER.pack(len(a)) + a for a in answers))


def worker_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specserver.ingest.workers")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--max-age-s", type=float, required=True)
    parser.add_argument("--max-future-skew-s", type=float, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
    gc.set_threshold(*GC_THRESHOLDS)
    limits = CheckLimits(max_age=timedelta(seconds=args.max_age_s),
                         max_future_skew=timedelta(seconds=args.max_future_skew_s))
    with contextlib.suppress(ConnectionError), socket.socket(fileno=args.fd) as sock:
        serve_frames(sock, limits)


# --- the server side ----------------------------------------------------------------------


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    # the requests sent and not answered yet, in order: each one's future and body
    pending: deque[tuple[asyncio.Future[Prepared], bytes]] = field(default_factory=deque)
    outbox: list[bytes] = field(default_factory=list)  # frames not yet written
    task: asyncio.Task[None] | None = None


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return await reader.readexactly(size)


class CheckPool:
    """N worker processes running ``prepare_submission``; ``await prepare(...)``."""

    def __init__(self, workers: int, limits: CheckLimits) -> None:
        if workers < 1:
            raise ValueError("a check pool needs at least one worker")
        self.size = workers
        self.limits = limits
        self._workers: list[_Worker] = []
        self._stopping = False

    async def start(self) -> None:
        """Start every worker and wait until each has imported everything and said so."""
        started = await asyncio.gather(*(self._spawn() for _ in range(self.size)),
                                       return_exceptions=True)
        failures = [s for s in started if isinstance(s, BaseException)]
        for worker in (s for s in started if isinstance(s, _Worker)):
            self._adopt(worker)
        if failures:
            await self.stop()
            raise RuntimeError(f"a check worker did not start: {failures[0]}")

    async def _spawn(self) -> _Worker:
        ours, theirs = socket.socketpair()
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-m", "specserver.ingest.workers", "--fd", str(theirs.fileno()),
                 "--max-age-s", str(self.limits.max_age.total_seconds()),
                 "--max-future-skew-s", str(self.limits.max_future_skew.total_seconds())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
            )
        reader, writer = await asyncio.open_connection(sock=ours)
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                ready = await _read_frame(reader)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            writer.close()
            process.kill()
            raise RuntimeError(f"no ready signal ({type(exc).__name__})") from None
        if ready != READY:
            writer.close()
            process.kill()
            raise RuntimeError(f"unexpected first frame {ready[:20]!r}")
        return _Worker(process, reader, writer)

    def _adopt(self, worker: _Worker) -> None:
        self._workers.append(worker)
        worker.task = asyncio.create_task(self._answers(worker), name="check-pool-reader")

    async def prepare(self, body: bytes, received_at: datetime) -> Prepared:
        """``prepare_submission`` in the least busy worker; its refusals are raised here."""
        if not self._workers:
            raise Unavailable("the server is not ready for submissions",
                              retry_after=RETRY_AFTER_S)
        worker = min(self._workers, key=lambda w: len(w.pending))
        future: asyncio.Future[Prepared] = asyncio.get_running_loop().create_future()
        worker.pending.append((future, body))
        frame = encode_request(body, received_at)
        if not worker.outbox:  # the first frame this loop iteration: send them all after it
            asyncio.get_running_loop().call_soon(self._flush, worker)
        worker.outbox.append(_HEADER.pack(len(frame)) + frame)
        return await future

    @staticmethod
    def _flush(worker: _Worker) -> None:
        frames, worker.outbox = worker.outbox, []
        if not worker.writer.is_closing():
            worker.writer.write(b"".join(frames))

    async def _answers(self, worker: _Worker) -> None:
        """Resolve the worker's waiting requests in order; replace it when it dies."""
        try:
            while True:
                answer = pickle.loads(await _read_frame(worker.reader))
                future, body = worker.pending.popleft()
                if future.done():  # the request was cancelled (client gone)
                    continue
                if answer[0] == "ok":
                    future.set_result(with_envelope(answer[1], body))
                else:
                    future.set_exception(error_from_parts(answer[1]))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            await self._retire(worker)

    async def _retire(self, worker: _Worker) -> None:
        if worker in self._workers:
            self._workers.remove(worker)
        while worker.pending:
            future, _body = worker.pending.popleft()
            if not future.done():
                future.set_exception(Unavailable(
                    "a check worker stopped while holding this submission; retry",
                    retry_after=RETRY_AFTER_S))
        worker.writer.close()
        with contextlib.suppress(Exception):
            await worker.writer.wait_closed()
        try:
            await asyncio.to_thread(worker.process.wait, 5)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            await asyncio.to_thread(worker.process.wait)
        if not self._stopping:
            log.warning("check worker %s exited (%s); starting another",
                        worker.process.pid, worker.process.returncode)
            await asyncio.sleep(RESPAWN_DELAY_S)
            try:
                self._adopt(await self._spawn())
            except RuntimeError:
                log.exception("could not replace a check worker")

    async def stop(self) -> None:
        """Close every worker's pipe (they exit on end-of-file) and wait for them."""
        self._stopping = True
        workers, self._workers = list(self._workers), []
        for worker in workers:
            worker.writer.close()
        tasks = [w.task for w in workers if w.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]


if __name__ == "__main__":
    worker_main()
