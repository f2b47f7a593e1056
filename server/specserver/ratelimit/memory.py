"""Rate limits: token buckets per key id and per client address, behind one interface.

``RateLimiter.hit(scope, key)`` takes one token and returns None, or the seconds until a
token is back (429 with Retry-After). ``MemoryRateLimiter`` keeps buckets in this process
(one embedded-DuckDB server); a shared backend (PostgreSQL or Redis, for replicas)
implements the same protocol and is passed to ``create_app``.

The client address is the peer's, or, when the peer is a configured trusted proxy, the
right-most address in X-Forwarded-For that is not itself a trusted proxy; its bucket is
its range (``address_key``): an IPv4 address alone, an IPv6 address by its /64, which one
subscriber or one cloud instance typically holds whole (before, each of the 2**64
addresses of one /64 had a bucket of its own).

Forgetting buckets never changes an answer (before, minting 100,000 keys flushed the
LRU, which gave every other key a full bucket again). A key without a bucket is treated as
a full bucket, so only a bucket that has refilled to full may be forgotten: that is
exactly equivalent. When ``max_keys`` buckets are all still refilling, a *new* key of that
scope is refused (Retry-After: until the oldest one is full) rather than an existing one
reset; that takes ``max_keys`` keys that each had a token taken within the last
burst/rate seconds (120 s by default). A request refused by its address's bucket creates
no key bucket (``http/submissions.py`` charges the address first; ``hit_many`` takes
several buckets all or nothing), so minting keys is bounded by the address limit.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
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


def charge(limiter: RateLimiter, scope: str, key: str, tokens: float) -> None:
    """Take ``tokens`` more from a bucket after the fact, where the limiter can (both of
    ours: ``charge``); a limiter that cannot charges one token a request, as before."""
    taking = getattr(limiter, "charge", None)
    if taking is not None and tokens > 0:
        taking(scope, key, tokens)


def first_refusal(
    limiter: RateLimiter, checks: Sequence[tuple[str, str]]
) -> tuple[str, float] | None:
    """Run the (scope, key) checks in order: None if all passed, else the first refusing
    scope and its wait. A limiter with ``hit_many`` (both of ours) answers them all at once,
    all or nothing: no token is taken unless every bucket has one."""
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


def _level(state: tuple[float, float], now: float, limit: Limit) -> float:
    """The tokens a bucket holds at ``now``."""
    tokens, updated = state
    return min(float(limit.burst), tokens + max(0.0, now - updated) * limit.per_minute / 60.0)


class MemoryRateLimiter:
    """In-process buckets, at most ``max_keys`` per scope; only full buckets are forgotten
    (the module docstring)."""

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
        # Per scope, in the order of their last token taken (the oldest first).
        self._buckets: dict[str, OrderedDict[str, tuple[float, float]]] = {
            scope: OrderedDict() for scope in limits
        }
        self._lock = threading.Lock()

    def hit(self, scope: str, key: str) -> float | None:
        refused = self.hit_many([(scope, key)])
        return None if refused is None else refused[1]

    def hit_many(self, checks: Sequence[tuple[str, str]]) -> tuple[str, float] | None:
        """Take a token from every enabled (scope, key) bucket, or from none: None when all
        had one, else the first refusing scope and its wait."""
        now = self.clock()
        with self._lock:
            taken: list[tuple[str, str, float]] = []
            for scope, key in checks:
                limit = self.limits.get(scope)
                if limit is None or not limit.enabled:
                    continue
                buckets = self._buckets[scope]
                state = buckets.get(key)
                if state is None:
                    wait = self._room_for_one(buckets, now, limit)
                    if wait is not None:
                        return scope, wait
                    state = (float(limit.burst), now)
                tokens, wait = take_token(state[0], state[1], now, limit)
                if wait is not None:
                    return scope, wait
                taken.append((scope, key, tokens))
            for scope, key, tokens in taken:
                buckets = self._buckets[scope]
                buckets.pop(key, None)
                buckets[key] = (tokens, now)
        return None

    def charge(self, scope: str, key: str, tokens: float) -> None:
        """Take ``tokens`` more from a bucket after the fact (what a request turned out to
        cost, ``http/submissions.py`` ``gated``), even below zero: the bucket then refuses
        until it has refilled past its debt. No floor: one request's charge is bounded by
        what its checks can cost, and the requests that passed a bucket before their
        charges came in each took a token of it first."""
        limit = self.limits.get(scope)
        if limit is None or not limit.enabled or tokens <= 0:
            return
        now = self.clock()
        with self._lock:
            buckets = self._buckets[scope]
            state = buckets.pop(key, None)
            level = float(limit.burst) if state is None else _level(state, now, limit)
            buckets[key] = (level - tokens, now)

    def _room_for_one(self, buckets: OrderedDict[str, tuple[float, float]], now: float,
                      limit: Limit) -> float | None:
        """Forget full buckets, oldest first, until one more fits: None, or the seconds
        until the oldest is full when none can go."""
        while len(buckets) >= self.max_keys:
            oldest, state = next(iter(buckets.items()))
            level = _level(state, now, limit)
            if level < limit.burst:
                return max((limit.burst - level) / (limit.per_minute / 60.0), 0.001)
            del buckets[oldest]
        return None

    def size(self, scope: str) -> int:
        """Buckets kept for ``scope``."""
        with self._lock:
            return len(self._buckets[scope])


Network = IPv4Network | IPv6Network


def _parse(value: str) -> IPv4Address | IPv6Address | None:
    try:
        return ip_address(value.strip())
    except ValueError:
        return None


def _trusted(address: IPv4Address | IPv6Address, proxies: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in proxies)


IPV6_PREFIX = 64  # a subscriber's or a cloud instance's usual allocation (RFC 6177)


def address_key(address: IPv4Address | IPv6Address) -> str:
    """The bucket of a client address: an IPv4 address alone (a /24 would put a whole
    NATed campus or carrier-grade NAT pool behind one bucket without stopping anyone who
    has a /24), an IPv6 address by its /64 (one host can take any of 2**64), an
    IPv4-mapped IPv6 address as its IPv4 address."""
    if isinstance(address, IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ip_network(f"{address}/{IPV6_PREFIX}", strict=False))
    return str(address)


def client_address(
    peer: str | None, forwarded_for: str | None, proxies: Sequence[Network]
) -> str:
    """The address bucket to rate-limit (``address_key``): the peer's unless the peer is a
    trusted proxy. A peer that is no IP address (a test client) is used as it is."""
    peer = peer or "unknown"
    peer_ip = _parse(peer)
    if peer_ip is None:
        return peer
    if not forwarded_for or not _trusted(peer_ip, proxies):
        return address_key(peer_ip)
    for hop in reversed(forwarded_for.split(",")):
        hop_ip = _parse(hop)
        if hop_ip is None:
            return address_key(peer_ip)  # garbage in the header: do not believe any of it
        if not _trusted(hop_ip, proxies):
            return address_key(hop_ip)
    return address_key(peer_ip)
