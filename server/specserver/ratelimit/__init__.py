"""ratelimit."""

from typing import TYPE_CHECKING

from specserver.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specserver.ratelimit.checkqueue import CheckQueue, Schedule
    from specserver.ratelimit.memory import (
        Limit,
        MemoryRateLimiter,
        RateLimiter,
        charge,
        client_address,
        first_refusal,
    )
    from specserver.ratelimit.redis import RedisRateLimiter
    from specserver.ratelimit.rejections import RejectionGate

_LAZY: dict[str, str] = {
    "CheckQueue": "specserver.ratelimit.checkqueue",
    "Limit": "specserver.ratelimit.memory",
    "MemoryRateLimiter": "specserver.ratelimit.memory",
    "RateLimiter": "specserver.ratelimit.memory",
    "RedisRateLimiter": "specserver.ratelimit.redis",
    "RejectionGate": "specserver.ratelimit.rejections",
    "Schedule": "specserver.ratelimit.checkqueue",
    "charge": "specserver.ratelimit.memory",
    "client_address": "specserver.ratelimit.memory",
    "first_refusal": "specserver.ratelimit.memory",
}

__all__ = [
    "CheckQueue",
    "Limit",
    "MemoryRateLimiter",
    "RateLimiter",
    "RedisRateLimiter",
    "RejectionGate",
    "Schedule",
    "charge",
    "client_address",
    "first_refusal",
    "rejections",
]

__getattr__ = lazy_names(__name__, _LAZY)
