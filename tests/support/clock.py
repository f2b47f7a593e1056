"""A receipt clock that a test moves: ``create_app(clock=...)``.

The board's rules measure time on the store's clock (its newest receipt). Tests that
shorten the probation to seconds used to sleep past it, and the rounds of submissions in
between took real time too: on a loaded machine 30 posts took longer than the probation,
so the first keys of a round graduated before its last arrived. This clock ticks a
millisecond per receipt (receipts stay distinct and ordered) and jumps only when told.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class SteppingClock:
    def __init__(self, start: datetime | None = None,
                 tick: timedelta = timedelta(milliseconds=1)) -> None:
        self._now = start or datetime.now(UTC)
        self._tick = tick
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            self._now += self._tick
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)
