"""The unbounded page: one key can create groups without end (a new chip name per
submission), and the home page rendered every group, so 28 KB grew to 5 MB after 2,000
submissions. Now each board section of the page shows at most ``page_groups`` groups, the
groups with ``min_contributors`` first, with links to the next pages; the section of chips
not yet corroborated (where invented chips stay, board/chips.py) its first
``page_groups``; and each filter menu offers at most ``page_menu_values`` values
(http/page/routes.py, store/queries.py).

The honest contributors are stored as an older server stored them (established keys, 30
days before); the attacker posts real signed envelopes through the API with one key, each
with a chip name of its own. The control run lifts both caps and shows the growth itself.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from specschema import envelope_bytes, sign_envelope, submission_bytes
from specschema.examples import EXAMPLE_MACHINES, example_submission
from tests.reliability.apps import STORES, app_on
from tests.reliability.hostile import signing_key
from tests.reliability.storecount import app_engine
from tests.support.boardfill import insert_submission
from tests.support.inprocess import InProcessClient

URL = "/v1/submissions"
M2 = next(m for m in EXAMPLE_MACHINES if m["chip"] == "Apple M2")
HONEST = [1.06, 1.09, 1.11, 1.14]
CAPS = {"page_groups": 10, "page_menu_values": 20, "new_key_probation_days": 0}


def _submission(seed: int, speedup: float, machine: dict[str, Any], created_at: datetime) -> Any:
    # qwen3:14b: a target the server can size (known_models.json), so established groups
    # can be established (an unsized target's groups page after them, like thin ones).
    return example_submission("ollama-draft", seed=seed, engine_version="0.30.1",
                              target="qwen3:14b",
                              machine=machine, draft_speedups={"spec_4": speedup,
                                                               "spec_8": speedup},
                              counters_seen=True, created_at=created_at)


def _flooded(client: InProcessClient, flood: int) -> None:
    """Four established contributors on Apple M2, then ``flood`` submissions from one key,
    each on a chip of its own (3.0x: above every honest group in the default sort)."""
    now = datetime.now(UTC)
    engine = app_engine(client.app)
    for i, speedup in enumerate(HONEST):
        insert_submission(engine, _submission(10 + i, speedup, M2, now - timedelta(days=31)),
                          signing_key(10 + i),
                          received_at=(now - timedelta(days=30)).replace(tzinfo=None))
    attacker = signing_key(7000)
    for i in range(flood):
        machine = {**M2, "chip": f"Flood Chip {i}"}
        sub = _submission(5000 + i, 3.0, machine, now - timedelta(minutes=5))
        body = envelope_bytes(sign_envelope(submission_bytes(sub), attacker))
        response = client.post(URL, content=body)
        assert response.status_code == 201, response.text


def _speed_rows(page: str) -> list[str]:
    """The rows of the ollama-draft speedup board, as their chip cells."""
    return [chip for _draft, chip in _speed_groups(page)]


def _speed_groups(page: str) -> list[tuple[str, str]]:
    """The rows of the ollama-draft speedup board, as (draft config, chip)."""
    table = re.search(r'<table class="board" data-board="speedup-ollama-draft">(.*?)</table>',
                      page, re.S)
    assert table is not None, "no ollama-draft speedup board"
    # the chip's span holds the name alone (its "new chip" mark follows it)
    return re.findall(r'<tr class="group".*?<span class="draft">(.*?)</span>'
                      r'.*?<span class="chip">(.*?)</span>', table.group(1), re.S)


def _chip_options(page: str) -> list[str]:
    menu = re.search(r'<select name="chip">(.*?)</select>', page, re.S)
    assert menu is not None
    return re.findall(r'<option value="([^"]*)"', menu.group(1))


def _apart_rows(page: str) -> list[str]:
    """The chips of the section of chips not yet corroborated."""
    section = re.search(r'<section class="uncorroborated".*?</section>', page, re.S)
    if section is None:
        return []
    return re.findall(r'<tr class="group".*?<span class="chip">(.*?)</span>', section.group(0),
                      re.S)


@pytest.mark.slow  # a flood of thousands of groups: ~25 s a store, loaded (full tier)
@pytest.mark.parametrize("store", STORES)
def test_a_flood_of_invented_chips_stays_apart_and_the_page_bounded(
        store: str, tmp_path: Path) -> None:
    """One key, a chip name of its own per submission: none is a listed chip nor
    corroborated from other address ranges, so the flood never reaches the speedup board;
    its section apart shows the first ``page_groups`` and says how many more there are."""
    sizes = {}
    for flood in (30, 90):
        with app_on(store, tmp_path / str(flood), **CAPS) as app, InProcessClient(app) as client:
            _flooded(client, flood)
            response = client.get("/")
            assert response.status_code == 200
            page = response.text
            sizes[flood] = len(response.content)
            assert _speed_rows(page) == ["Apple M2", "Apple M2"]  # the established alone
            apart = _apart_rows(page)
            assert len(apart) == CAPS["page_groups"]
            assert all(chip.startswith("Flood Chip ") for chip in apart)
            assert f"{2 * flood - CAPS['page_groups']} more groups on chips not yet" in page
            assert len(_chip_options(page)) == 1 + CAPS["page_menu_values"]  # "any" + the cut
    print(f"\npage with {2 * 30} groups apart: {sizes[30]:,} B; with {2 * 90}: {sizes[90]:,} B")
    assert sizes[90] < sizes[30] * 1.05  # three times the groups, the same page


@pytest.mark.slow  # a flood of groups on the board, paged (full tier)
@pytest.mark.parametrize("store", STORES)
def test_a_board_of_many_groups_is_paged(store: str, tmp_path: Path) -> None:
    """A small deployment that counts every chip (``min_contributors`` 1: corroborated by one
    range) puts the same flood on the board: each section shows ``page_groups`` groups, with
    links to the next pages."""
    flood = 30
    with app_on(store, tmp_path, **CAPS, min_contributors=1) as app, \
            InProcessClient(app) as client:
        _flooded(client, flood)
        page = client.get("/").text
        rows = _speed_rows(page)
        assert len(rows) == CAPS["page_groups"]  # 2 x flood + 2 groups on this board
        assert f"of {2 * flood + 2}" in page and 'rel="next"' in page
        assert _apart_rows(page) == []
        # the next page: the following groups, and a way back
        second = client.get("/", params={"protocol": "ollama-draft", "page": 2}).text
        second_groups = _speed_groups(second)
        assert len(second_groups) == CAPS["page_groups"]
        assert not set(second_groups) & set(_speed_groups(page)) and 'rel="prev"' in second
        # a chip below the menu's cut can still be chosen (by URL) and is kept selected
        rare = client.get("/", params={"chip": f"Flood Chip {flood - 1}"}).text
        assert _speed_rows(rare) == [f"Flood Chip {flood - 1}"] * 2
        assert f'value="Flood Chip {flood - 1}" selected' in rare
        # past the last page: an empty board with a way back, not an error
        last = client.get("/", params={"protocol": "ollama-draft", "page": 99}).text
        assert "no groups on page 99" in last
        bad = client.get("/", params={"page": "0"})
        assert bad.status_code == 422 and "page" in bad.json()["error"]["message"]


@pytest.mark.slow  # the same flood without the caps (full tier)
def test_without_the_caps_the_same_flood_grows_the_page(tmp_path: Path) -> None:
    """The control: with caps above the flood the page grows with every group."""
    sizes = {}
    lifted = {**CAPS, "page_groups": 1000, "page_menu_values": 10_000}
    for flood in (30, 90):
        with app_on("duckdb", tmp_path / str(flood), **lifted) as app, \
                InProcessClient(app) as client:
            _flooded(client, flood)
            response = client.get("/")
            sizes[flood] = len(response.content)
            assert len(_apart_rows(response.text)) == 2 * flood
    print(f"\nuncapped: {sizes[30]:,} B -> {sizes[90]:,} B")
    assert sizes[90] > sizes[30] * 2
