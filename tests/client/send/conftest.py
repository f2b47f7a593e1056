"""The sending tests' servers and retry policy: a scripted server on loopback that verifies
every envelope, and a policy whose sleeps are recorded instead of slept."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specsubmit.send.delivery import RetryPolicy
from tests.client.submit_server import ScriptedServer


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer().start()
    yield scripted
    scripted.stop()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def policy(sleeps: list[float]) -> RetryPolicy:
    return RetryPolicy(attempts=4, base_s=1.0, cap_s=8.0, sleep=sleeps.append, rand=lambda: 0.5)
