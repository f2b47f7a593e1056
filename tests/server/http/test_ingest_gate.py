"""Every signed POST passes one gate (``http/submissions.py`` ``gated``): submissions and
cost probes alike are refused by their address's bucket, by the rejections an address has
run up (before its body is read) and by the ban list, with the same answers; checks that
cost more CPU take more of the address's tokens."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specschema.envelope import key_id_of
from specserver.http.submissions import check_tokens
from tests.reliability.apps import app_on
from tests.support.crowd import M2, cost_probe, map_result, signed_probe, signed_result, target_of
from tests.support.inprocess import InProcessClient
from tests.support.signed import signer

TOKEN = "g" * 40
TARGET = target_of(map_result(0, M2))
# path, a valid signed body of key seed k (each call a new id)
KINDS: dict[str, tuple[str, Callable[[int, int], bytes]]] = {
    "submission": ("/v1/submissions", lambda seed, key: signed_result(seed, M2, key)),
    "probe": ("/v1/probes", lambda seed, key: signed_probe(cost_probe(TARGET, M2), key)),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[InProcessClient]:
    with app_on("duckdb", tmp_path, admin_token=TOKEN, rate_addr_per_minute=1,
                rate_addr_burst=3, rate_reject_per_minute=1, rate_reject_burst=2,
                rate_check_ms_per_token=0,  # one token a POST: the charge is tested apart
                new_key_probation_days=0) as app, InProcessClient(app) as client:
        yield client


def _post(client: InProcessClient, kind: str, body: bytes, peer: str) -> Any:
    return client.post(KINDS[kind][0], content=body, peer=(peer, 40000))


def _scope(response: Any) -> str:
    return str(response.json()["error"]["details"]["scope"])


def test_the_address_bucket_refuses_either_kind(limited: InProcessClient, kind: str) -> None:
    make = KINDS[kind][1]
    assert [_post(limited, kind, make(i, 10 + i), "10.0.0.1").status_code
            for i in range(3)] == [201] * 3
    refused = _post(limited, kind, make(5, 15), "10.0.0.1")
    assert refused.status_code == 429 and _scope(refused) == "address"
    assert _post(limited, kind, make(6, 16), "10.0.0.2").status_code == 201  # another address


def test_refusals_block_the_address_before_its_body_is_read(limited: InProcessClient,
                                                            kind: str) -> None:
    # a burst of rate_reject_burst + 1 refusals is checked, then the address is blocked
    assert [_post(limited, kind, b"{", "10.0.1.1").status_code for _ in range(3)] == [400] * 3
    blocked = _post(limited, kind, KINDS[kind][1](1, 1), "10.0.1.1")
    assert blocked.status_code == 429 and _scope(blocked) == "rejected"


def test_a_banned_key_is_refused_and_charged_on_either_path(limited: InProcessClient,
                                                            kind: str) -> None:
    key = key_id_of(bytes(signer(30).verify_key))
    banned = limited.post("/admin/v1/ban", headers={"Authorization": f"Bearer {TOKEN}",
                                                      "Content-Type": "application/json"},
                          content=json.dumps({"key_id": key, "reason": "test"}).encode())
    assert banned.status_code == 200, banned.text
    refused = _post(limited, kind, KINDS[kind][1](1, 30), "10.0.2.1")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "key_banned"
    # the ban cost a token of the rejections bucket: two more refusals block the address
    assert [_post(limited, kind, b"{", "10.0.2.1").status_code for _ in range(2)] == [400] * 2
    assert _scope(_post(limited, kind, KINDS[kind][1](2, 31), "10.0.2.1")) == "rejected"


@pytest.mark.parametrize(("ms_per_token", "accepted"), [(0.0, 4), (1e-6, 1)])
def test_checks_that_cost_more_take_more_of_the_address_bucket(
        tmp_path: Path, kind: str, ms_per_token: float, accepted: int) -> None:
    """A POST's checks take a measurable time; charged at a millionth of a millisecond a
    token, one POST empties its address's bucket (and more), so the next is refused; with
    the charge off, each POST takes one token of the four."""
    with app_on("duckdb", tmp_path, rate_addr_per_minute=1, rate_addr_burst=4,
                rate_check_ms_per_token=ms_per_token) as app, InProcessClient(app) as client:
        answers = [_post(client, kind, KINDS[kind][1](i, 40 + i), "10.0.3.1").status_code
                   for i in range(5)]
        other = _post(client, kind, KINDS[kind][1](9, 49), "10.0.3.2").status_code
    assert answers == [201] * accepted + [429] * (5 - accepted)
    assert other == 201  # the charge is the sender's address's alone


@pytest.mark.parametrize(("cpu_s", "ms_per_token", "tokens"), [
    (0.001, 10.0, 1.0), (0.010, 10.0, 1.0), (0.056, 10.0, 5.6), (0.2, 0.0, 1.0)])
def test_check_tokens(cpu_s: float, ms_per_token: float, tokens: float) -> None:
    assert check_tokens(cpu_s, ms_per_token) == pytest.approx(tokens)
