"""Rate-limit buckets that a client cannot reset or multiply.

Before: ``MemoryRateLimiter`` forgot its least recently used bucket once a scope held
``max_keys`` (100,000), full or not; keys are free, so minting that many keys reset every
other key's bucket, the limited one's included. Each IPv6 address had its own address
bucket, so one host with a /64 had 2**64 of them. Now only full buckets are forgotten
(which changes no answer), a new key waits while every kept bucket is still refilling,
both scopes are taken all or nothing (a request its address refuses creates no key
bucket), and an IPv6 client is limited by its /64, in memory and in Redis alike.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from specserver.http.app import create_app
from specserver.ratelimit.memory import Limit, MemoryRateLimiter
from specserver.ratelimit.redis import RedisRateLimiter
from tests.reliability.apps import make_settings
from tests.reliability.hostile import valid_envelope
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
REDIS_URL = os.environ.get("SPECBENCH_TEST_REDIS", "redis://127.0.0.1:6379/0")


def test_minting_keys_does_not_reset_a_limited_key() -> None:
    now = [0.0]
    limit = Limit(per_minute=30, burst=60)  # the server's default per key
    limiter = MemoryRateLimiter({"key": limit}, clock=lambda: now[0], max_keys=1000)
    assert all(limiter.hit("key", "victim") is None for _ in range(60))
    assert limiter.hit("key", "victim") is not None  # limited
    # The attack: more fresh keys than the table holds, one request each.
    admitted = sum(limiter.hit("key", f"minted-{i}") is None for i in range(5000))
    assert admitted == 999  # the table is full of buckets that are still refilling ...
    assert limiter.size("key") == 1000
    wait = limiter.hit("key", "victim")
    assert wait is not None and 1.9 < wait <= 2.0  # ... and the victim was not reset
    # Once buckets are full again they may be forgotten: the same answers as before.
    now[0] = 120.0
    assert limiter.hit("key", "minted-new") is None
    assert limiter.size("key") <= 1000


def test_a_refused_address_creates_no_key_buckets(tmp_path: Path) -> None:
    """Minting keys from one address is bounded by the address's own bucket."""
    limiter = MemoryRateLimiter({"key": Limit(30, 60), "address": Limit(1, 3)})
    app = create_app(make_settings(tmp_path), rate_limiter=limiter)
    with InProcessClient(app) as client:
        statuses = [client.post(URL, content=valid_envelope(seed),
                                peer=("198.51.100.7", 4000)).status_code
                    for seed in range(1, 9)]
    assert statuses == [201] * 3 + [429] * 5
    assert limiter.size("key") == 3


ONE_64 = [f"2001:db8:aa:bb:{i:x}::{i + 1:x}" for i in range(1, 7)]


def test_many_ipv6_addresses_of_one_64_share_one_bucket(tmp_path: Path) -> None:
    limiter = MemoryRateLimiter({"key": Limit(30, 60), "address": Limit(1, 2)})
    app = create_app(make_settings(tmp_path), rate_limiter=limiter)
    with InProcessClient(app) as client:
        statuses = [client.post(URL, content=valid_envelope(i + 1), peer=(address, 4000))
                    .status_code for i, address in enumerate(ONE_64)]
        assert statuses == [201, 201] + [429] * 4
        refused = client.post(URL, content=valid_envelope(50), peer=("2001:db8:aa:bb::9", 1))
        assert refused.json()["error"]["details"] == {"scope": "address"}
        # Another /64, and IPv4 addresses one by one, keep their own buckets.
        assert client.post(URL, content=valid_envelope(60),
                           peer=("2001:db8:aa:bc::1", 1)).status_code == 201
        assert [client.post(URL, content=valid_envelope(70 + i),
                            peer=(f"198.51.100.{i}", 1)).status_code
                for i in range(1, 4)] == [201] * 3


@pytest.fixture
def redis_prefix() -> Iterator[tuple[redis.Redis, str]]:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis is not reachable at {REDIS_URL}: {exc}")
        pytest.skip(f"Redis is not reachable at {REDIS_URL}: {exc}")
    prefix = f"test:{uuid.uuid4().hex}:"
    yield client, prefix
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


def test_redis_keys_an_ipv6_client_by_its_64_too(
        tmp_path: Path, redis_prefix: tuple[redis.Redis, str]) -> None:
    client_, prefix = redis_prefix
    limiter = RedisRateLimiter(client_, {"key": Limit(30, 60), "address": Limit(1, 2)},
                               prefix=prefix)
    app = create_app(make_settings(tmp_path), rate_limiter=limiter)
    with InProcessClient(app) as client:
        statuses = [client.post(URL, content=valid_envelope(i + 1), peer=(address, 4000))
                    .status_code for i, address in enumerate(ONE_64)]
    assert statuses == [201, 201] + [429] * 4
    assert not limiter.degraded  # answered by Redis, not by the local fallback
    assert {k.decode() for k in client_.scan_iter(match=f"{prefix}address:*")} == {
        f"{prefix}address:2001:db8:aa:bb::/64"}
