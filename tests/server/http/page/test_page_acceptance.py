"""A group's acceptance per draft position on the page, in a real headless Chromium at 1,440
and 390 px: once a machine and a target are chosen, each speculating group of the speedup
board shows a small bar per draft position with its share as text, the median across its
contributors of their pooled a_i (the board's rule), every bar in view on a phone."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from specschema.breakdown import acceptance_of
from specserver.http.app import create_app
from tests.server.board.acceptance_reference import across_contributors
from tests.support.crowd import M2, map_result, signed_result, target_of
from tests.support.liveserver import free_port, serve
from tests.support.served import Served, settings_for

PHONE = {"width": 390, "height": 844}
MAP = target_of(map_result(0, M2))
SEEDS = (0, 1, 2)  # three contributors, each their own shape of counts
CHOSEN = {"chip": "Apple M2", "memory_gb": "24", "engine": "llama-server",
          "target": MAP.name}


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("acceptance")
    small = {"new_key_probation_days": 0, "cohort_window_hours": 0}
    with Served(settings_for(folder, **small)) as app:  # each result from its own range
        for seed in SEEDS:
            response = app.client.post("/v1/submissions",
                                       content=signed_result(seed, M2, seed),
                                       peer=(f"198.51.{100 + seed}.7", 40000))
            assert response.status_code == 201, response.text
    port = free_port()
    settings = settings_for(folder, **small, public_base_url=f"http://127.0.0.1:{port}")
    with serve(create_app(settings), port) as url:
        yield url


def _expected(config: str) -> list[float]:
    """The median across the three contributors of each one's a_i (its trials pooled)."""
    profiles = []
    for seed in SEEDS:
        [found] = [c for c in map_result(seed, M2).configs if c.name == config]
        pooled = acceptance_of(found.trials)
        assert pooled is not None and pooled.rounds and pooled.per_position
        profiles.append((pooled.rounds, pooled.per_position))
    group = across_contributors(profiles)
    assert group is not None
    return list(group.per_position)


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [{"width": 1440, "height": 900}, PHONE],
                         ids=lambda v: str(v["width"]))
def test_each_group_shows_a_bar_per_draft_position(chromium, mapped, shots,  # type: ignore[no-untyped-def]
                                                   viewport):
    context = chromium.new_context(viewport=viewport)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda e: problems.append(str(e)))
    try:
        assert tab.goto(f"{mapped}/?{urlencode(CHOSEN)}").status == 200
        found = tab.evaluate("""() => [...document.querySelectorAll(
            'table.board tr.group')].filter(tr => tr.querySelector('.positions'))
            .map(tr => ({draft: tr.querySelector('.draft').innerText,
                         words: tr.querySelector('.positions').title,
                         bars: [...tr.querySelectorAll('.positions .pos')].map(b => {
                             const box = b.getBoundingClientRect();
                             return {text: b.innerText, share: Number(b.dataset.share),
                                     left: box.left, right: box.right, width: box.width,
                                     fill: getComputedStyle(b).getPropertyValue('--a')};
                         })}))""")
        rows = {str(r["draft"]): r for r in found}
        assert set(rows) == {"ngram_simple_m8", "ngram_mod_16", "mtp_n3"}
        tab.locator("tr.group .positions").first.scroll_into_view_if_needed()
        tab.screenshot(path=str(shots / f"acceptance-bars-{viewport['width']}.png"))
        for name, row in rows.items():
            expected = _expected(name)
            bars = row["bars"]
            assert [b["share"] for b in bars] == pytest.approx(expected, rel=1e-12)
            assert [b["text"] for b in bars] == [f"{a:.0%}" for a in expected]
            assert [float(b["fill"]) for b in bars] == pytest.approx(expected, abs=5e-4)
            assert str(row["words"]).startswith("accepted at draft position 1st ")
            assert "median of 3 contributors" in str(row["words"])
            for bar in bars:  # every bar wide enough for its text, none off the screen
                assert bar["width"] >= 20 and 0 <= bar["left"], bar
                assert bar["right"] <= viewport["width"], bar
        assert problems == []
    finally:
        context.close()


def test_the_page_reads_no_acceptance_before_a_machine_is_chosen(mapped):  # type: ignore[no-untyped-def]
    import httpx

    page = httpx.get(f"{mapped}/", timeout=30).text
    assert 'class="positions"' not in page
    chosen = httpx.get(f"{mapped}/?{urlencode(CHOSEN)}", timeout=30).text
    assert chosen.count('class="positions"') == 3
