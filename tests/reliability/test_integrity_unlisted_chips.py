"""A chip nobody else has: one contributor who names a chip the known-chip table does not
list opened a group of their own on the speedup board that no honest result could ever
contest (plausibility judges such a chip at the fastest memory there is). Now such a chip's
groups are listed apart, flagged ``uncorroborated``, until results on it come from the
board's minimum number of address ranges (board/chips.py); on DuckDB and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from specschema import envelope_bytes, sign_envelope, submission_bytes
from specschema.examples import EXAMPLE_MACHINES, example_submission
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import signing_key
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
M2 = next(m for m in EXAMPLE_MACHINES if m["chip"] == "Apple M2")
INVENTED = "Apple M9 Ultra"  # in no table
MIN_CONTRIBUTORS = 3  # the board's default


@pytest.fixture(params=STORES)
def client(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[InProcessClient]:
    with app_on(request.param, tmp_path) as app, InProcessClient(app) as c:
        yield c


def _post(client: InProcessClient, seed: int, chip: str, peer: str,
          speedup: float = 1.2) -> None:
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1",
                             machine={**M2, "chip": chip}, counters_seen=True,
                             draft_speedups={"spec_4": speedup, "spec_8": speedup},
                             created_at=datetime.now(UTC) - timedelta(minutes=5))
    body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(seed)))
    response = client.post(URL, content=body, peer=(peer, 40000))
    assert response.status_code == 201, response.text


def _board(client: InProcessClient, **params: str) -> dict[str, Any]:
    response = client.get("/v1/leaderboard", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _chips(groups: list[dict[str, Any]]) -> set[str]:
    return {g["key"]["chip"]["chip"] for g in groups}


def test_an_unlisted_chip_stays_apart_until_results_come_from_enough_ranges(
        client: InProcessClient) -> None:
    for i in range(MIN_CONTRIBUTORS):
        _post(client, 10 + i, "Apple M2", f"10.{i}.0.7")
    # One sender: three keys from one /24, each posting the invented chip.
    for i in range(3):
        _post(client, 20 + i, INVENTED, "172.16.0.9", speedup=3.0)
    board = _board(client)
    assert _chips(board["groups"]) == {"Apple M2"}
    apart = board["uncorroborated_groups"]
    assert _chips(apart) == {INVENTED} and len(apart) == 2  # spec_4 and spec_8
    assert all(g["uncorroborated"] for g in apart)
    assert not any(g["uncorroborated"] for g in board["groups"])
    # A filter on the chip finds it apart, never on the board.
    only = _board(client, chip=INVENTED)
    assert only["groups"] == [] and _chips(only["uncorroborated_groups"]) == {INVENTED}
    # Grouped without the chip, its rows are not in the board's groups either.
    by_os = _board(client, group_by="os")
    assert [g["submissions"] for g in by_os["groups"]] == [MIN_CONTRIBUTORS] * 2
    assert _chips(by_os["uncorroborated_groups"]) == {INVENTED}
    # The page lists it apart, under words that say why, and not on the leaderboard.
    page = client.get("/").text
    sections = [part.split("</section>", 1)[0]
                for part in page.split('<section class="protocol"')[1:]]
    assert sections and not any(INVENTED in section for section in sections)
    apart_part = page.split('<section class="uncorroborated"', 1)[1].split("</section>", 1)[0]
    assert INVENTED in apart_part and "Not yet corroborated" in apart_part
    assert f"fewer than {MIN_CONTRIBUTORS} address ranges" in apart_part
    # A second range is not yet enough; the board's minimum of ranges is.
    _post(client, 30, INVENTED, "172.17.0.9")
    assert _chips(_board(client)["uncorroborated_groups"]) == {INVENTED}
    _post(client, 31, INVENTED, "172.18.0.9")
    board = _board(client)
    assert _chips(board["groups"]) == {"Apple M2", INVENTED}
    assert board["uncorroborated_groups"] == []
    assert 'class="uncorroborated"' not in client.get("/").text
    assert [g["submissions"] for g in _board(client, group_by="os")["groups"]] == [8, 8]


def test_a_listed_chip_is_on_the_board_from_one_contributor(client: InProcessClient) -> None:
    _post(client, 40, "NVIDIA GeForce RTX 4090", "10.9.0.7")
    board = _board(client)
    assert _chips(board["groups"]) == {"NVIDIA GeForce RTX 4090"}
    assert board["uncorroborated_groups"] == []
