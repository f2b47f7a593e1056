"""Token buckets (pure step and in-memory limiter) and the client address behind proxies."""

from ipaddress import ip_network

import pytest

from specserver.ratelimit.memory import Limit, MemoryRateLimiter, client_address, take_token


def test_token_bucket_step_by_hand() -> None:
    limit = Limit(per_minute=60, burst=2)  # one token per second
    tokens, wait = take_token(2.0, 0.0, 0.0, limit)
    assert (tokens, wait) == (1.0, None)
    tokens, wait = take_token(0.25, 0.0, 0.0, limit)
    assert tokens == 0.25 and wait == pytest.approx(0.75)
    tokens, wait = take_token(0.0, 0.0, 10.0, limit)  # refilled, capped at the burst
    assert tokens == 1.0 and wait is None


def test_memory_limiter_per_scope_and_key() -> None:
    now = [0.0]
    limiter = MemoryRateLimiter({"key": Limit(60, 2), "address": Limit(0, 1)},
                                clock=lambda: now[0])
    assert [limiter.hit("key", "a") for _ in range(2)] == [None, None]
    wait = limiter.hit("key", "a")
    assert wait == pytest.approx(1.0)
    assert limiter.hit("key", "b") is None  # another key has its own bucket
    assert all(limiter.hit("address", "x") is None for _ in range(100))  # 0 = off
    now[0] = 1.0
    assert limiter.hit("key", "a") is None


def test_memory_limiter_forgets_only_full_buckets() -> None:
    now = [0.0]
    limiter = MemoryRateLimiter({"key": Limit(60, 1)}, clock=lambda: now[0], max_keys=2)
    assert limiter.hit("key", "a") is None
    assert limiter.hit("key", "b") is None
    # Both are still refilling: a new key waits instead of resetting "a".
    assert limiter.hit("key", "c") == pytest.approx(1.0)
    assert limiter.hit("key", "a") == pytest.approx(1.0)
    now[0] = 1.0  # both full again: forgetting one is the same as keeping it
    assert limiter.hit("key", "c") is None
    assert limiter.size("key") == 2


PROXIES = [ip_network("10.0.0.0/8"), ip_network("fd00::/8")]


@pytest.mark.parametrize(("peer", "header", "expected"), [
    ("198.51.100.1", None, "198.51.100.1"),
    ("198.51.100.1", "1.2.3.4", "198.51.100.1"),  # untrusted peer: header ignored
    ("10.0.0.5", "1.2.3.4", "1.2.3.4"),
    ("10.0.0.5", "6.6.6.6, 1.2.3.4", "1.2.3.4"),  # right-most untrusted hop
    ("10.0.0.5", "1.2.3.4, 10.0.0.9", "1.2.3.4"),  # skipping our own proxies
    ("10.0.0.5", "garbage", "10.0.0.5"),
    ("10.0.0.5", "10.1.1.1", "10.0.0.5"),  # only proxies: the peer
    ("fd00::1", "2001:db8::7", "2001:db8::/64"),  # an IPv6 client by its /64
    ("2001:db8:1:2:3:4:5:6", None, "2001:db8:1:2::/64"),
    ("::ffff:198.51.100.1", None, "198.51.100.1"),  # IPv4-mapped: the IPv4 address
    ("testclient", None, "testclient"),
    (None, "1.2.3.4", "unknown"),
])
def test_client_address(peer: str | None, header: str | None, expected: str) -> None:
    assert client_address(peer, header, PROXIES) == expected


def test_a_charge_after_the_fact_puts_the_bucket_in_debt() -> None:
    now = [0.0]
    limiter = MemoryRateLimiter({"address": Limit(60, 4)}, clock=lambda: now[0])
    assert limiter.hit("address", "a") is None  # 3 left
    limiter.charge("address", "a", 5.0)  # -2: refused until 3 tokens are back (3 s)
    wait = limiter.hit("address", "a")
    assert wait == pytest.approx(3.0)
    now[0] = 3.0
    assert limiter.hit("address", "a") is None
    limiter.charge("address", "a", 100.0)  # as deep as it cost: 101 tokens to wait for
    assert limiter.hit("address", "a") == pytest.approx(101.0)
    limiter.charge("address", "b", 2.0)  # a bucket not seen yet starts full
    assert [limiter.hit("address", "b") is None for _ in range(3)] == [True, True, False]
    limiter.charge("key", "a", 3.0)  # a scope without a limit: nothing to take
    assert limiter.size("address") == 2
