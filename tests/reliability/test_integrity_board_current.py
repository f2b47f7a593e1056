"""``Board-Current: true`` only when it is. The review left a board unread for 45 s, posted a
submission, and read the board without it under ``Board-Current: true`` (``Board-Age:
48.7``): the header repeated the last look at the store's data version, however old that
look was, and nobody had looked since the write. A board read is now current only when a
look that began at most ``check_s`` (0.1 s) before the read found the board's version: every
write committed that long before the read is in the board.

Replayed through the API (JSON board and page) on DuckDB with the shipped read settings; a
quiet spell of 0.5 s stands for the review's 45 s (the rule depends on the look being older
than 0.1 s, not on how much older). The refresher's first look at the store after the
quiet spell is slowed by 0.5 s, as on a big or busy store: on this small one it otherwise
often ends before the read's headers are made, and the read would be told the truth by luck.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specserver.board import Freshness, Snapshot
from specserver.store import queries
from tests.reliability.apps import app_on
from tests.reliability.hostile import dict_bytes, payload_dict, signed, signing_key
from tests.support.inprocess import InProcessClient

BOARD = ("/v1/leaderboard", {"group_by": "chip", "view": "noise_floor"})
CHECK_S = 0.1  # ReadService's default, which create_app keeps


SLOW_LOOK = threading.Event()  # set: the refresher's next look takes 0.5 s longer


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessClient]:
    looked = queries.data_version

    def slow_once_in_the_refresher(conn: object) -> str:
        if threading.current_thread().name == "board-refresher" and SLOW_LOOK.is_set():
            SLOW_LOOK.clear()
            time.sleep(0.5)
        return looked(conn)  # type: ignore[arg-type]

    SLOW_LOOK.clear()
    monkeypatch.setattr(queries, "data_version", slow_once_in_the_refresher)
    # the shipped read settings (the suite's default makes reads wait for recomputations)
    with app_on("duckdb", tmp_path, read_wait_s=0, board_refresh_s=1.0) as app, \
            InProcessClient(app) as c:
        yield c


def _post(client: InProcessClient, seed: int) -> None:
    response = client.post("/v1/submissions",
                           content=signed(dict_bytes(payload_dict(seed)), signing_key(seed)))
    assert response.status_code == 201, response.text


def _board(client: InProcessClient) -> tuple[int, bool, float]:
    """(results on the board, Board-Current, Board-Age) of one read."""
    response = client.get(BOARD[0], params=BOARD[1])
    assert response.status_code == 200
    return (response.json()["results"], response.headers["board-current"] == "true",
            float(response.headers["board-age"]))


def _page_current(client: InProcessClient) -> bool:
    response = client.get("/")
    assert response.status_code == 200
    return response.headers["board-current"] == "true"


def test_a_board_unread_for_a_while_is_not_called_current_after_a_write(
        client: InProcessClient) -> None:
    _post(client, 1)
    results, current, _ = _board(client)  # the first read computes: current
    assert current and results > 0
    assert _page_current(client)
    # read again (the review's board had been read before it was left alone): these reads
    # look at the store, or ask the refresher to (whether they are called current depends
    # on how long the first computations took; not what is tested here)
    assert _board(client)[0] == results
    _page_current(client)
    time.sleep(0.5)  # nobody reads: nobody looks at the store
    _post(client, 2)
    SLOW_LOOK.set()
    stale, current, age = _board(client)  # served at once, as before, without the write
    page = _page_current(client)
    print(f"\nafter the quiet spell: {stale} results (had {results}), Board-Current "
          f"{current}, Board-Age {age:.2f}")
    assert stale == results  # the last computed board, at once (reads never wait)
    assert not current  # ... and not called current (was true)
    assert not page
    # A read that began check_s after the write and says current shows the write.
    time.sleep(CHECK_S * 1.5)
    deadline = time.monotonic() + 20
    seen = []
    while time.monotonic() < deadline:
        shown, current, _ = _board(client)
        seen.append((shown, current))
        if current:
            assert shown > results, seen
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"never current again: {seen[-5:]}")


def test_current_means_a_recent_look_that_found_the_snapshot() -> None:
    snapshot = Snapshot("v2", time.time(), None)
    assert Freshness.of(snapshot, (100.0, "v2"), 100.05, CHECK_S).current
    assert Freshness.of(snapshot, (100.0, "v2"), 100.0, CHECK_S).current
    assert not Freshness.of(snapshot, (100.0, "v2"), 100.2, CHECK_S).current  # an old look
    assert not Freshness.of(snapshot, (100.0, "v3"), 100.05, CHECK_S).current  # behind
    assert not Freshness.of(snapshot, None, 100.0, CHECK_S).current  # never looked
    assert Freshness.of(snapshot, (100.0, "v2"), 100.0, 0.0).current  # looked as it asked
