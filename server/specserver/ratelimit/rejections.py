"""Rejections cost more than acceptances: a bucket of rejections per client address.

Every POST takes a token from the address bucket before its checks run (once, a 256 KB
body that fails the schema cost ~37x the CPU of a valid one, and cost the sender nothing,
since tokens were taken only after the checks passed). A POST that is then refused (bad
envelope or signature, schema, consistency, a banned key, a body too large or too slow)
also takes a token from the address's ``rejected`` bucket, which is much smaller
(``rate_reject_per_minute`` / ``rate_reject_burst``). The refusal that finds that bucket
empty blocks the address: it is refused with 429 *before* its body is read until a token
is back (so a burst of ``rate_reject_burst + 1`` refusals is checked, then one per refill).

The bucket lives in the limiter (in Redis when replicas share one, ``ratelimit.redis``), so
every replica charges the same rejections; which addresses are currently refused is kept
here, in this process (at most ``max_keys`` of them, oldest dropped): a replica learns of
an empty bucket at the next rejection it sees from that address, so an address gets at
most one more rejection per replica.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from specserver.ratelimit.memory import RateLimiter

SCOPE = "rejected"


class RejectionGate:
    def __init__(self, limiter: RateLimiter, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 100_000) -> None:
        self.limiter = limiter
        self.clock = clock
        self.max_keys = max_keys
        self._until: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def blocked(self, address: str) -> float | None:
        """Seconds until ``address`` may send again, or None when it may now."""
        with self._lock:
            until = self._until.get(address)
            if until is None:
                return None
            left = until - self.clock()
            if left <= 0:
                del self._until[address]
                return None
            return left

    def rejected(self, address: str) -> None:
        """Charge one rejection to ``address``; an empty bucket blocks it until a refill."""
        wait = self.limiter.hit(SCOPE, address)
        if wait is None:
            return
        with self._lock:
            self._until.pop(address, None)
            self._until[address] = self.clock() + wait
            if len(self._until) > self.max_keys:
                self._until.popitem(last=False)
