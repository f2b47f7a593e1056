"""The first screen in a real headless Chromium at 1,440 and 390 px: "your machine" chosen
from the menus (and kept in the URL), its candidates with their measured speedups best
first, the speedup column in view on a phone, the method one click away. Screenshots of
the first screen go to $SPECBENCH_SCREENSHOTS (or the test's temporary folder)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import httpx
import pytest

from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.http.app import create_app
from specserver.settings import ServerSettings
from tests.support.boardfill import insert_submission, key, new_engine
from tests.support.crowd import (
    M2,
    M3_PRO,
    RADEON,
    RTX,
    cost_probe,
    map_result,
    signed_probe,
    signed_result,
    target_of,
)
from tests.support.liveserver import free_port, serve
from tests.support.served import Served, settings_for

TARGET = "qwen3:14b"
MINE = EXAMPLE_MACHINES[1]  # Apple M3 Pro, 36 GB
OTHER = EXAMPLE_MACHINES[2]  # an RTX 4090: its results are not this machine's
HOSTILE_CHIP = '<img src=x onerror="document.title=1"> Apple M3 Pro'
CHOSEN = {"chip": MINE["chip"], "memory_gb": str(MINE["memory_gb"]), "engine": "ollama",
          "target": TARGET}
PHONE = {"width": 390, "height": 844}
WHEN = datetime(2026, 11, 1, tzinfo=UTC)
MAP = target_of(map_result(0, M2))  # the llamacpp-map results' target


@pytest.fixture(scope="module")
def atlas(tmp_path_factory):
    path = tmp_path_factory.mktemp("machine") / "store.duckdb"
    engine = new_engine(path)
    for copy in range(3):  # three contributors: spec_4 1.6x, spec_8 1.25x, confirmed
        sub = example_submission("ollama-draft", seed=10 + copy, engine_version="0.30.1",
                                 target=TARGET, machine=MINE, counters_seen=True,
                                 draft_speedups={"spec_4": 1.6, "spec_8": 1.25},
                                 created_at=WHEN)
        # Received weeks apart: three keys out of probation, three contributors.
        insert_submission(engine, sub, key(300 + copy),
                          received_at=WHEN + timedelta(days=20 * copy))
    # The same target on another chip, much faster: never this machine's candidates.
    fast = example_submission("ollama-draft", seed=40, engine_version="0.30.1", target=TARGET,
                              machine=OTHER, counters_seen=True,
                              draft_speedups={"spec_4": 2.5, "spec_8": 2.5}, created_at=WHEN)
    insert_submission(engine, fast, key(340))
    # Drafts Ollama 0.12.8 did not apply, for this target on this machine: noise, listed
    # with what they are, never as a speedup.
    noise = example_submission("hardnumbers-m2", seed=50, engine_version="0.12.8",
                               target=TARGET, machine=MINE, created_at=WHEN)
    insert_submission(engine, noise, key(350))
    # A hostile chip name from three contributors: corroborated (a chip in no table stays
    # off the board until results on it come from three ranges), so it reaches the page.
    for copy in range(3):
        hostile = example_submission("ollama-draft", seed=60 + copy, engine_version="0.30.1",
                                     target=TARGET, machine=dict(MINE, chip=HOSTILE_CHIP),
                                     counters_seen=True, draft_speedups={"spec_4": 1.4},
                                     created_at=WHEN)
        insert_submission(engine, hostile, key(360 + copy))
    engine.dispose()
    port = free_port()
    settings = ServerSettings(database_url=str(path), public_base_url=f"http://127.0.0.1:{port}")
    with serve(create_app(settings), port) as url:
        yield url


def _tab(chromium, viewport: dict[str, int]):  # type: ignore[no-untyped-def]
    context = chromium.new_context(viewport=viewport)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(str(e)))
    return context, tab, problems


def _candidates(tab) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    return tab.evaluate("""() => [...document.querySelectorAll(
        'table.candidates tr.candidate')].map(tr => {
            const measured = tr.querySelector('td.measured');
            const box = measured.querySelector('.speedup, .none').getBoundingClientRect();
            return {draft: tr.querySelector('.draft').innerText,
                    measured: tr.dataset.measured,
                    speedup: measured.querySelector('.speedup')
                        ? measured.querySelector('.speedup').innerText : null,
                    cell: measured.innerText,
                    bars: tr.querySelectorAll('.sbar').length,
                    predicted: tr.querySelector('td.predicted').innerText,
                    reason: tr.querySelector('td.predicted .reason')
                        ? tr.querySelector('td.predicted .reason').textContent : null,
                    left: box.left, right: box.right, bottom: box.bottom,
                    predicted_right: tr.querySelector('td.predicted')
                        .getBoundingClientRect().right};
        })""")


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [{"width": 1440, "height": 900}, PHONE],
                         ids=lambda v: str(v["width"]))
def test_the_first_screen_answers_for_a_chosen_machine(chromium, atlas, shots, viewport):
    context, tab, problems = _tab(chromium, viewport)
    try:
        assert tab.goto(f"{atlas}/?{urlencode(CHOSEN)}").status == 200
        tab.screenshot(path=str(shots / f"your-machine-{viewport['width']}.png"))
        # The menus show the machine the URL holds.
        for name, value in CHOSEN.items():
            assert tab.locator(f"select[name={name}]").input_value() == value
        rows = _candidates(tab)
        # Measured candidates first, best first, each with its bar; another chip's 2.5x
        # and the hostile chip's rows are not this machine's.
        measured = [r for r in rows if r["measured"] == "yes"]
        assert [r["draft"] for r in measured] == ["spec_4", "spec_8"]
        speeds = [float(str(r["speedup"]).rstrip("x")) for r in measured]
        assert speeds == sorted(speeds, reverse=True) and 1.45 < speeds[0] < 1.75
        assert all(r["bars"] == 1 and "3 contributors" in str(r["cell"]) for r in measured)
        assert all("IQR" in str(r["cell"]) for r in measured)
        # The drafts Ollama did not apply: listed after, as noise, no bar, no interval.
        rest = rows[len(measured):]
        assert {r["draft"] for r in rest} == {"draft_qwen2.5_0.5b (qwen2.5:0.5b)",
                                             "draft_qwen2.5_1.5b (qwen2.5:1.5b)"}
        for row in rest:
            assert row["measured"] == "no" and row["bars"] == 0 and row["speedup"] is None
            assert str(row["cell"]).startswith("not measured") and "noise" in str(row["cell"])
            assert "IQR" not in str(row["cell"])
        # No prediction here, and each cell says why in /v1/predict's words (Ollama reports
        # no acceptance per draft position); nothing predicts a config never confirmed. The
        # reason is one tap away, so the row stays short on a phone.
        answer = httpx.get(f"{atlas}/v1/predict", params={**CHOSEN, "target": TARGET}).json()
        why = {c["candidate"]["depth"]: c["why_not_predicted"] for c in answer["candidates"]
               if c["domain"] == "all"}
        assert [(r["predicted"], r["reason"]) for r in measured] == [
            ("not predicted", why[4]), ("not predicted", why[8])]
        assert all(r["predicted"] == "no prediction yet" and r["reason"] is None for r in rest)
        # The speedup column is in view without scrolling sideways, the best candidate's
        # on the first screen.
        for row in rows:
            assert 0 <= float(row["left"]) and float(row["right"]) <= viewport["width"], row
        assert float(rows[0]["bottom"]) <= viewport["height"], rows[0]
        wide, visible = tab.evaluate("() => [document.documentElement.scrollWidth, "
                                     "document.documentElement.clientWidth]")
        assert wide <= visible, f"the page scrolls sideways: {wide} > {visible} px"
        # The method, one click away.
        method = tab.locator("details#method")
        assert method.evaluate("d => d.open") is False
        method.locator("summary").click()
        assert "confirmed" in method.inner_text() and "specsubmit probe" in method.inner_text()
        assert problems == []
    finally:
        context.close()


@pytest.mark.browser
def test_the_machine_is_chosen_from_the_menus_and_kept_in_the_url(chromium, atlas):
    context, tab, problems = _tab(chromium, PHONE)
    try:
        tab.goto(atlas + "/")
        assert "Choose Chip and Target model" in tab.locator("p.choose").inner_text()
        assert tab.locator("table.candidates").count() == 0
        for name, value in CHOSEN.items():
            tab.select_option(f"select[name={name}]", value)
        with tab.expect_navigation():
            tab.click("form.filters button[type=submit]")
        for name, value in CHOSEN.items():
            assert urlencode({name: value}) in tab.url
        assert [r["draft"] for r in _candidates(tab)][:2] == ["spec_4", "spec_8"]
        tab.reload()  # the URL is the whole state
        assert [r["draft"] for r in _candidates(tab)][:2] == ["spec_4", "spec_8"]
        assert problems == []
    finally:
        context.close()


@pytest.mark.browser
def test_a_hostile_chip_name_is_text_on_the_first_screen(chromium, atlas):
    context, tab, problems = _tab(chromium, PHONE)
    try:
        chosen = dict(CHOSEN, chip=HOSTILE_CHIP)
        assert tab.goto(f"{atlas}/?{urlencode(chosen)}").status == 200
        assert tab.locator("main img").count() == 0 and tab.title() != "1"
        assert [r["draft"] for r in _candidates(tab)] == ["spec_4", "spec_8"]  # 1.4x, 1.0x
        assert tab.locator("select[name=chip]").input_value() == HOSTILE_CHIP
        chips = tab.locator("table.board td.machine .chip").all_inner_texts()
        assert chips and all(chip == HOSTILE_CHIP for chip in chips)
        # Memory left open: each candidate's line names it (the chip, chosen, is not repeated).
        del chosen["memory_gb"]
        tab.goto(f"{atlas}/?{urlencode(chosen)}")
        machines = tab.locator("table.candidates td.candidate-name .machine").all_inner_texts()
        assert machines == ["36 GB", "36 GB"]
        assert tab.locator("main img").count() == 0 and tab.title() != "1"
        assert problems == []
    finally:
        context.close()


# --- a machine with predictions: llama-server results with acceptance per draft position
# from four machines, and a cost probe of this one (tests/support/crowd.py) ---------------


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("predicted")
    small = {"new_key_probation_days": 0, "cohort_window_hours": 0}  # a small deployment
    with Served(settings_for(folder, **small)) as app:  # each result from its own range
        for seed, machine in enumerate([RTX, M3_PRO, RADEON, M2]):
            response = app.client.post("/v1/submissions",
                                       content=signed_result(seed, machine, seed),
                                       peer=(f"198.51.{100 + seed}.7", 40000))
            assert response.status_code == 201, response.text
        probe = app.client.post("/v1/probes", content=signed_probe(cost_probe(MAP, M2), 9))
        assert probe.status_code == 201, probe.text
    port = free_port()
    settings = settings_for(folder, **small, public_base_url=f"http://127.0.0.1:{port}")
    with serve(create_app(settings), port) as url:
        yield url


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [{"width": 1440, "height": 900}, PHONE],
                         ids=lambda v: str(v["width"]))
def test_measured_and_predicted_side_by_side(chromium, predicted, shots, viewport):
    context, tab, problems = _tab(chromium, viewport)
    try:
        chosen = {"chip": "Apple M2", "memory_gb": "24", "engine": "llama-server",
                  "target": MAP.name}
        assert tab.goto(f"{predicted}/?{urlencode(chosen)}").status == 200
        tab.screenshot(path=str(shots / f"your-machine-predicted-{viewport['width']}.png"))
        rows = {str(r["draft"]): r for r in _candidates(tab)}
        assert set(rows) == {"ngram_simple_m8", "ngram_mod_16", "mtp_n3"}
        assert all(r["measured"] == "yes" and r["bars"] == 1 for r in rows.values())
        # The n-gram drafters are predicted, with an interval; MTP's cost is not probed.
        for name in ("ngram_simple_m8", "ngram_mod_16"):
            point, interval = str(rows[name]["predicted"]).split("\n")
            low, high = (float(v) for v in interval.rstrip("x").split("–"))
            assert low <= float(point.rstrip("x")) <= high, rows[name]
        assert rows["mtp_n3"]["predicted"] == "not predicted"
        assert "draft layers" in str(rows["mtp_n3"]["reason"])
        for row in rows.values():  # measured and predicted in view without scrolling
            assert 0 <= float(row["left"]) and float(row["right"]) <= viewport["width"], row
            assert float(row["predicted_right"]) <= viewport["width"], row
        best = rows["ngram_simple_m8"]  # the best measured: on the first screen
        assert float(best["bottom"]) <= viewport["height"], best
        assert problems == []
    finally:
        context.close()
