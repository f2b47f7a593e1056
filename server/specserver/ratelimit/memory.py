"""Rate limits: token buckets per key id and per client address, behind one interface.

``RateLimiter.hit(scope, key)`` takes one token and returns None, or the seconds until a
token is back (429 with Retry-After). ``MemoryRateLimiter`` keeps buckets in this process
(one embedded-DuckDB server); a shared backend (PostgreSQL or Redis, for replicas)
implements the same protocol and is passed to ``create_app``.

The client address is the peer's, or, when the peer is a configured trusted proxy, the
right-most address in X-Forwarded-For that is not itself a trusted proxy.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Protocol


@dataclass(frozen=True)
class Limit:
    per_minute: float  # refill rate; 0 = unlimited
    burst: int  # bucket size

    @property
    def enabled(self) -> bool:
        return self.per_minute > 0


class RateLimiter(Protocol):
    def hit(self, scope: str, key: str) -> float | None:
        """Take a token for ``key`` in ``scope``; None if allowed, else seconds to wait."""
        ...


def first_refusal(
    limiter: RateLimiter, checks: Sequence[tuple[str, str]]
) -> tuple[str, float] | None:
    """Run the (scope, key) checks in order: None if all passed, else the first refusing
    scope and its wait. A limiter with ``hit_many`` (the shared Redis one) answers them all
    in one round trip instead."""
    many = getattr(limiter, "hit_many", None)
    if many is not None:
        answer: tuple[str, float] | None = many(checks)
        return answer
    for scope, key in checks:
        wait = limiter.hit(scope, key)
        if wait is not None:
            return scope, wait
    return None


def take_token(
    tokens: float, updated: float, now: float, limit: Limit
) -> tuple[float, float | None]:
    """Pure token-bucket step: (tokens after, None or seconds until one token is back)."""
    rate = limit.per_minute / 60.0
    tokens = min(float(limit.burst), tokens + (now - updated) * rate)
    if tokens >= 1.0:
        return tokens - 1.0, None
    return tokens, (1.0 - tokens) / rate


class MemoryRateLimiter:
    """In-process buckets; at most ``max_keys`` per scope are kept (least recently used)."""

    def __init__(
        self,
        limits: dict[str, Limit],
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        self.limits = limits
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: dict[str, OrderedDict[str, tuple[float, float]]] = {
            scope: OrderedDict() for scope in limits
        }
        self._lock = threading.Lock()

    def hit(self, scope: str, key: str) -> float | None:
        limit = self.limits.get(scope)
        if limit is None or not limit.enabled:
            return None
        now = self.clock()
        with self._lock:
            buckets = self._buckets[scope]
            tokens, updated = buckets.pop(key, (float(limit.burst), now))
            tokens, wait = take_token(tokens, updated, now, limit)
            buckets[key] = (tokens, now)
            if len(buckets) > self.max_keys:
                buckets.popitem(last=False)
        return wait


Network = IPv4Network | IPv6Network


def _parse(value: str) -> IPv4Address | IPv6Address | None:
    try:
        return ip_address(value.strip())
    except ValueError:
        return None


def _trusted(address: IPv4Address | IPv6Address, proxies: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in proxies)


def client_address(
    peer: str | None, forwarded_for: str | None, proxies: Sequence[Network]
) -> str:
    """The address to rate-limit: the peer unless it is a trusted proxy."""
    peer = peer or "unknown"
    peer_ip = _parse(peer)
    if not forwarded_for or peer_ip is None or not _trusted(peer_ip, proxies):
        return peer
    for hop in reversed(forwarded_for.split(",")):
        hop_ip = _parse(hop)
        if hop_ip is None:
            return peer  # garbage in the header: do not believe any of it
        if not _trusted(hop_ip, proxies):
            return str(hop_ip)
    return peer
