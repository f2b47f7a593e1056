"""Rate limits shared by every replica: the token buckets of ``ratelimit`` kept in Redis.

Why Redis and not PostgreSQL (docs/deploying.md, "Rate limits across replicas"): a
bucket is touched by every POST, twice (key id and client address), and is worthless a
minute later. In PostgreSQL each touch would be a row-locking UPDATE plus a WAL flush on
the same database that holds the submissions, serialising hot keys on row locks and
taking write capacity from the group commit; in Redis it is one round trip to a script
that runs atomically in memory, and losing the counters on a restart costs nothing.

One Lua script refills and takes a token atomically, on Redis's own clock (``TIME``), so
replicas with skewed clocks share one bucket exactly. The bucket expires once it would be
full again. If Redis does not answer (``socket_timeout``), the limiter falls back to
in-process buckets (each replica then enforces the limits on its own) and tries Redis
again after ``retry_s``; a request is never refused or delayed because Redis is down.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from specserver.ratelimit.memory import Limit, MemoryRateLimiter, RateLimiter
from specserver.ratelimit.memory import first_refusal as _first_refusal

log = logging.getLogger("specserver.ratelimit.memory")

def redis_client(url: str, *, socket_timeout: float = 0.25) -> redis.Redis:
    """A client that fails fast: bounded connect and read times, no retries (the caller
    falls back to local limits instead of holding a request)."""
    return redis.Redis.from_url(
        url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        retry=Retry(NoBackoff(), 0),
    )


# What both scripts share: Redis's clock, a bucket's level now (full when it has none) and
# storing a level (expiring once the bucket would be full again).
_BUCKET_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function level(key, rate, burst)
  local state = redis.call('HMGET', key, 'tokens', 'updated')
  local tokens = tonumber(state[1])
  local updated = tonumber(state[2])
  if tokens == nil or updated == nil then
    return burst
  end
  return math.min(burst, tokens + math.max(0, now - updated) * rate)
end
local function store(key, rate, burst, tokens)
  redis.call('HSET', key, 'tokens', tostring(tokens), 'updated', tostring(now))
  redis.call('PEXPIRE', key, math.ceil((burst - tokens) / rate * 1000) + 1000)
end
"""
# KEYS = buckets; ARGV = rate, burst per bucket. All or nothing: tokens are taken from
# every bucket only if each has one; else none is taken and the answer names the first
# bucket that refused. Returns {index of the refusing bucket (0 = none), wait as text}.
TOKEN_BUCKETS_LUA = _BUCKET_LUA + """
local levels = {}
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[2 * i - 1])
  local tokens = level(key, rate, tonumber(ARGV[2 * i]))
  if tokens < 1 then
    return {i, tostring((1 - tokens) / rate)}
  end
  levels[i] = tokens
end
for i, key in ipairs(KEYS) do
  store(key, tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i]), levels[i] - 1)
end
return {0, '0'}
"""


# KEYS = the bucket; ARGV = rate, burst, tokens: refill, then take ``tokens`` whatever the
# level (``MemoryRateLimiter.charge``).
CHARGE_LUA = _BUCKET_LUA + """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
store(KEYS[1], rate, burst, level(KEYS[1], rate, burst) - tonumber(ARGV[3]))
return 0
"""


class RedisRateLimiter:
    """``RateLimiter`` on Redis; see the module docstring for the failure behaviour."""

    def __init__(
        self,
        client: redis.Redis,
        limits: dict[str, Limit],
        *,
        prefix: str = "specserver:ratelimit:",
        fallback: RateLimiter | None = None,
        retry_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.limits = limits
        self.prefix = prefix
        self.fallback: RateLimiter = fallback or MemoryRateLimiter(limits)
        self.retry_s = retry_s
        self.clock = clock
        self._scripts: Any = client.register_script(TOKEN_BUCKETS_LUA)
        self._charge: Any = client.register_script(CHARGE_LUA)
        self._down_until = float("-inf")

    @classmethod
    def from_url(
        cls, url: str, limits: dict[str, Limit], *, socket_timeout: float = 0.25
    ) -> RedisRateLimiter:
        """Does not connect: the first ``hit`` does."""
        return cls(redis_client(url, socket_timeout=socket_timeout), limits)

    @property
    def degraded(self) -> bool:
        """True while Redis is considered down and the in-process buckets are used."""
        return self.clock() < self._down_until

    def hit(self, scope: str, key: str) -> float | None:
        refused = self.hit_many([(scope, key)])
        return None if refused is None else refused[1]

    def hit_many(self, checks: Sequence[tuple[str, str]]) -> tuple[str, float] | None:
        """Every (scope, key) in ONE round trip, all or nothing: None when each bucket had a
        token (all taken), else the first refusing scope and its wait (none taken)."""
        enabled = [(scope, key, self.limits[scope]) for scope, key in checks
                   if scope in self.limits and self.limits[scope].enabled]
        if not enabled:
            return None
        if self.degraded:
            return _first_refusal(self.fallback, checks)
        args: list[str] = []
        for _, _, limit in enabled:
            args += [repr(limit.per_minute / 60.0), str(limit.burst)]
        try:
            index, wait = self._scripts(
                keys=[f"{self.prefix}{scope}:{key}" for scope, key, _ in enabled], args=args)
        except redis.RedisError as exc:
            log.warning("Redis rate limiter unavailable (%s); using in-process limits for "
                        "%g s", type(exc).__name__, self.retry_s)
            self._down_until = self.clock() + self.retry_s
            return _first_refusal(self.fallback, checks)
        if int(index) == 0:
            return None
        seconds = float(wait)
        return enabled[int(index) - 1][0], (
            seconds if math.isfinite(seconds) and seconds > 0 else 1.0)

    def charge(self, scope: str, key: str, tokens: float) -> None:
        """``MemoryRateLimiter.charge`` on the shared bucket (the local one while Redis is
        down)."""
        limit = self.limits.get(scope)
        if limit is None or not limit.enabled or tokens <= 0:
            return
        if not self.degraded:
            try:
                self._charge(keys=[f"{self.prefix}{scope}:{key}"],
                             args=[repr(limit.per_minute / 60.0), str(limit.burst),
                                   repr(tokens)])
                return
            except redis.RedisError as exc:
                log.warning("Redis rate limiter unavailable (%s); using in-process limits "
                            "for %g s", type(exc).__name__, self.retry_s)
                self._down_until = self.clock() + self.retry_s
        taking = getattr(self.fallback, "charge", None)
        if taking is not None:
            taking(scope, key, tokens)

    def close(self) -> None:
        self.client.close()
