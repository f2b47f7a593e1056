"""Concurrent submitters for the fault tests: who got an acknowledgement, who did not.

``drive`` posts every (submission id, body) once from ``concurrency`` threads and records
each outcome: acknowledged (201 new, 200 duplicate), refused with a status, or no answer
(connection refused/reset, timeout). Nothing is retried here; the tests retry by calling
``drive`` again with what was not acknowledged, as the client's pending queue would.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from specschema import envelope_bytes, sign_envelope, submission_bytes
from specschema.examples import example_submission
from tests.reliability.hostile import signing_key

Item = tuple[str, bytes]


def make_items(seeds: range, keys: int = 50) -> list[Item]:
    """Distinct valid signed submissions, from ``keys`` different contributors."""
    items = []
    for seed in seeds:
        sub = example_submission(seed=seed)
        body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(seed % keys)))
        items.append((str(sub.submission_id), body))
    return items


@dataclass
class LoadResult:
    acked: dict[str, bytes] = field(default_factory=dict)
    unacked: dict[str, bytes] = field(default_factory=dict)
    statuses: Counter[str] = field(default_factory=Counter)
    retry_after: Counter[str] = field(default_factory=Counter)
    timeline: list[tuple[float, str]] = field(default_factory=list)

    def record(self, sid: str, body: bytes, status: str, retry: str | None,
               elapsed: float) -> int:
        """Record one attempt (callers hold the lock); the number acknowledged so far, or
        -1 when this attempt was not acknowledged."""
        self.statuses[status] += 1
        self.timeline.append((elapsed, status))
        if retry is not None:
            self.retry_after[retry] += 1
        if status in ("200", "201"):
            self.acked[sid] = body
            self.unacked.pop(sid, None)
            return len(self.acked)
        self.unacked[sid] = body
        return -1


def _post(client: httpx.Client, body: bytes) -> tuple[str, str | None]:
    """One POST: its status (or the transport error's name) and its Retry-After."""
    try:
        response = client.post("/v1/submissions", content=body,
                               headers={"content-type": "application/json"})
    except httpx.HTTPError as exc:
        return type(exc).__name__, None
    return str(response.status_code), response.headers.get("retry-after")


def _run_threads(worker: Callable[[], None], count: int) -> None:
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def drive(
    base_url: str,
    items: Sequence[Item],
    *,
    concurrency: int = 16,
    timeout: float = 10.0,
    on_ack: Callable[[int], None] | None = None,
    pause_s: float = 0.0,
) -> LoadResult:
    result = LoadResult()
    todo: queue.SimpleQueue[Item] = queue.SimpleQueue()
    for item in items:
        todo.put(item)
    lock = threading.Lock()
    start = time.monotonic()

    def worker() -> None:
        with httpx.Client(base_url=base_url, timeout=timeout) as client:
            while True:
                try:
                    sid, body = todo.get_nowait()
                except queue.Empty:
                    return
                status, retry = _post(client, body)
                with lock:
                    acked = result.record(sid, body, status, retry, time.monotonic() - start)
                if acked >= 0 and on_ack is not None:
                    on_ack(acked)
                if pause_s:
                    time.sleep(pause_s)

    _run_threads(worker, concurrency)
    return result


def drive_until_acked(
    base_url: str,
    items: Sequence[Item],
    *,
    concurrency: int = 8,
    deadline_s: float = 120.0,
    max_wait_s: float = 2.0,
    on_ack: Callable[[int], None] | None = None,
) -> LoadResult:
    """Like the client: retry each item on 5xx, 429 and connection errors (waiting
    Retry-After, capped at ``max_wait_s``) until it is acknowledged or the deadline passes.
    Every attempt's outcome is in ``statuses`` and ``timeline``."""
    result = LoadResult()
    todo: queue.SimpleQueue[Item] = queue.SimpleQueue()
    for item in items:
        todo.put(item)
    lock = threading.Lock()
    start = time.monotonic()

    def worker() -> None:
        with httpx.Client(base_url=base_url, timeout=10.0) as client:
            while True:
                try:
                    sid, body = todo.get_nowait()
                except queue.Empty:
                    return
                while time.monotonic() - start < deadline_s:
                    status, retry = _post(client, body)
                    wait = min(float(retry), max_wait_s) if retry and retry.isdigit() else 0.2
                    with lock:
                        acked = result.record(sid, body, status, retry, time.monotonic() - start)
                    if acked >= 0:
                        if on_ack is not None:
                            on_ack(acked)
                        break
                    if status.startswith("4") and status != "429":
                        break  # final, as in the client
                    time.sleep(wait)

    _run_threads(worker, concurrency)
    return result
