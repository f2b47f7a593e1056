"""Free rejections: tokens were taken only after the checks passed, so a flood of
256 KB bodies that fail the schema (each ~37x the CPU of a valid one) cost the sender
nothing. Now the address bucket is charged before the checks, and every refusal also takes
a token from a much smaller per-address ``rejected`` bucket; once that is empty the address
is refused (429) before its body is even read.

The checks are counted by wrapping the one step that runs them (``submissions.prepare``),
so "refused before the checks" is observed, not inferred from timings.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from specserver.http import submissions
from specserver.http.app import create_app
from specserver.settings import ServerSettings
from tests.reliability.apps import make_settings
from tests.reliability.hostile import (
    BODY_LIMIT,
    dict_bytes,
    payload_dict,
    signed,
    signing_key,
    valid_envelope,
)
from tests.reliability.test_hostile_inputs import assert_error_shape
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
FLOODER = ("198.51.100.66", 40000)
HONEST = ("192.0.2.77", 41000)


def heavy_schema_failure(seed: int) -> bytes:
    """A signed body just under the size limit whose payload fails the schema (a note of
    180,000 characters, the limit is 500): the costliest refusal there is."""
    data = payload_dict(seed)
    data["note"] = "x" * 180_000
    body = signed(dict_bytes(data), signing_key(seed))
    assert BODY_LIMIT * 0.9 < len(body) < BODY_LIMIT
    return body


@pytest.fixture
def checks_run(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every run of checks 2-5 (``submissions.prepare``) appends to this list."""
    runs: list[int] = []
    real: Callable[..., Awaitable[Any]] = submissions.prepare

    async def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(submissions, "prepare", counted)
    return runs


def _defaults(tmp: Path, **overrides: Any) -> ServerSettings:
    """The shipped rate limits (the harness turns them off), on a tmp store."""
    defaults = ServerSettings()
    values: dict[str, Any] = {
        "rate_key_per_minute": defaults.rate_key_per_minute,
        "rate_addr_per_minute": defaults.rate_addr_per_minute,
        "rate_reject_per_minute": defaults.rate_reject_per_minute, **overrides}
    return make_settings(tmp, **values)


def test_a_flood_of_heavy_refusals_is_cut_off_before_the_checks(
        tmp_path: Path, checks_run: list[int]) -> None:
    settings = _defaults(tmp_path)
    burst = settings.rate_reject_burst
    statuses: list[int] = []
    started = time.monotonic()
    with InProcessClient(create_app(settings)) as client:
        for i in range(100):
            response = client.post(URL, content=heavy_schema_failure(100 + i), peer=FLOODER)
            statuses.append(response.status_code)
            if response.status_code == 429:
                error = assert_error_shape(response)
                assert error["details"] == {"scope": "rejected"}
                assert int(response.headers["retry-after"]) >= 1
        checked = len(checks_run)
        # The bucket refills meanwhile (12/min by default): allow the tokens that came back.
        refilled = math.ceil((time.monotonic() - started) * settings.rate_reject_per_minute / 60)
        # The flooder is now refused even a valid body: refusals cost it its address.
        after = client.post(URL, content=valid_envelope(300), peer=FLOODER)
        honest = client.post(URL, content=valid_envelope(301), peer=HONEST)
    print(f"\n100 heavy schema failures from one address (defaults): "
          f"{statuses.count(422)} x 422 (checked), {statuses.count(429)} x 429 unread; "
          f"checks ran {checked} times (before: 100, and all 100 were free)")
    # Before: 100 x 422, the checks ran 100 times, no token taken. After: the burst, plus
    # the refusal that found the bucket empty, plus what refilled; the rest unread.
    assert burst + 1 <= checked <= burst + 1 + refilled
    assert statuses == [422] * checked + [429] * (100 - checked)
    assert after.status_code == 429 and honest.status_code == 201, honest.text


def test_the_address_bucket_is_charged_before_the_checks(
        tmp_path: Path, checks_run: list[int]) -> None:
    settings = make_settings(tmp_path, rate_addr_per_minute=6, rate_addr_burst=5)
    with InProcessClient(create_app(settings)) as client:
        statuses = [client.post(URL, content=heavy_schema_failure(400 + i),
                                peer=FLOODER).status_code for i in range(10)]
        limited = client.post(URL, content=heavy_schema_failure(420), peer=FLOODER)
    # Before: 10 x 422 (the bucket was only charged after passing checks).
    assert statuses == [422] * 5 + [429] * 5
    assert assert_error_shape(limited)["details"] == {"scope": "address"}
    assert len(checks_run) == 5


def test_refusals_cost_more_than_acceptances(tmp_path: Path) -> None:
    """With the shipped limits one address may send its whole address burst of valid
    submissions, but only the (much smaller) rejections burst of refused ones. Each POST
    takes one token here: what a costly check takes beside it is
    tests/server/http/test_ingest_gate.py's (a valid body's 1-2 ms of checks would take
    0.5-1.1 tokens at the shipped 2 ms, depending on the machine's load)."""
    settings = _defaults(tmp_path, rate_key_burst=1000, rate_addr_burst=60,
                         rate_reject_burst=10, rate_reject_per_minute=0.01,
                         rate_check_ms_per_token=0)
    with InProcessClient(create_app(settings)) as client:
        valid = [client.post(URL, content=valid_envelope(500 + i), peer=FLOODER).status_code
                 for i in range(60)]
        bad = [client.post(URL, content=heavy_schema_failure(600 + i),
                           peer=("198.51.100.67", 1)).status_code for i in range(60)]
    assert valid == [201] * 60
    assert bad == [422] * 11 + [429] * 49  # the burst, and the refusal that found it empty
