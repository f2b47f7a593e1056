"""The page in a real headless Chromium, against a real uvicorn on a free loopback port."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime

import httpx
import pytest
from boardfill import fill, insert_submission, new_engine
from liveserver import serve

from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.http.app import create_app
from specserver.settings import ServerSettings

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def _chromium() -> str:
    """Debian's chromium (CI installs it), or another Chromium on PATH / in SPECBENCH_CHROMIUM.

    Missing: skipped on a developer's machine, a failure under CI=true.
    """
    explicit = os.environ.get("SPECBENCH_CHROMIUM")
    found = explicit or next(filter(None, map(shutil.which, CHROMIUM_CANDIDATES)), None)
    if found:
        return found
    message = "no Chromium found (apt-get install chromium, or set SPECBENCH_CHROMIUM)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    path = tmp_path_factory.mktemp("site") / "store.duckdb"
    engine = new_engine(path)
    fill(engine, 28, contributors=7)
    for seed in range(3):  # three imported references: a noise floor with percentiles
        ref = example_submission("hardnumbers-m2", seed=700 + seed, machine=EXAMPLE_MACHINES[0],
                                 engine_version="0.12.8",
                                 created_at=datetime(2026, 11, 1, tzinfo=UTC))
        insert_submission(engine, ref, None, source_note="Hard Numbers reference")
    engine.dispose()
    with serve(create_app(ServerSettings(database_url=str(path)))) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, site):
    context = browser.new_context()
    tab = context.new_page()
    problems: list[str] = []
    off_site: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(str(e)))
    tab.on("request", lambda r: None if r.url.startswith((site, "data:")) else off_site.append(
        r.url))
    yield tab, problems, off_site
    context.close()


def groups_per_board(tab) -> dict[str, tuple[int, int]]:
    """Board name -> (bars in its chart, rows in its table)."""
    found = tab.evaluate("""() => {
        const out = {};
        for (const svg of document.querySelectorAll('svg.chart')) {
            const board = svg.dataset.board;
            out[board] = [svg.querySelectorAll('rect.bar').length,
                          document.querySelectorAll(`tr.group[data-board="${board}"]`).length];
        }
        return out;
    }""")
    return {board: (bars, rows) for board, (bars, rows) in found.items()}


@pytest.mark.browser
def test_page_renders_offline_without_console_errors(page, site):
    tab, problems, off_site = page
    response = tab.goto(site + "/")
    assert response.status == 200
    assert tab.locator("h1").inner_text() == "Speculative decoding leaderboard"
    assert tab.locator("section.protocol").count() == 2
    assert problems == []
    assert off_site == []  # no CDN, nothing outside the server


@pytest.mark.browser
def test_each_chart_has_one_bar_per_group_in_its_table(page, site):
    tab, problems, _ = page
    tab.goto(site + "/")
    boards = groups_per_board(tab)
    assert set(boards) == {"speedup-ollama-draft", "noise-hardnumbers-m2"}
    for bars, rows in boards.values():
        assert bars == rows > 0
    assert boards["speedup-ollama-draft"] == (8, 8)  # 2 draft configs x 4 chips
    assert tab.locator("svg.chart line.unity").count() == 2
    # Seven contributors over four chips: groups with >= 3 contributors get IQR whiskers.
    assert tab.locator("svg.chart g.iqr").count() > 0
    assert problems == []


@pytest.mark.browser
def test_a_filter_changes_the_rows(page, site):
    tab, problems, _ = page
    tab.goto(site + "/")
    before = tab.locator("tr.group").count()
    tab.select_option("select[name=chip]", "Apple M3 Pro")
    with tab.expect_navigation():
        tab.click("form.filters button[type=submit]")
    assert "chip=Apple+M3+Pro" in tab.url
    rows = tab.locator("tr.group")
    assert 0 < rows.count() < before
    chips = {rows.nth(i).locator("td").nth(2).inner_text() for i in range(rows.count())}
    assert chips == {"Apple M3 Pro"}
    assert tab.locator("select[name=chip]").input_value() == "Apple M3 Pro"
    assert groups_per_board(tab)["speedup-ollama-draft"] == (2, 2)
    assert problems == []


@pytest.mark.browser
def test_submission_page_from_the_recent_list(page, site):
    tab, problems, off_site = page
    tab.goto(site + "/")
    with tab.expect_navigation():
        tab.locator("a[href^='/submissions/']").first.click()
    assert tab.locator("h1").inner_text().startswith("Submission")
    for heading in ("Speculation verdicts", "Fingerprint", "Trials", "Moderation history",
                    "Verify the signature yourself"):
        assert tab.get_by_role("heading", name=heading).count() == 1
    assert tab.locator("pre.verify").count() == 1
    assert problems == [] and off_site == []


def test_the_verification_snippet_on_the_page_runs_as_printed(site):
    listing = httpx.get(f"{site}/v1/submissions", params={"protocol": "ollama-draft",
                                                         "limit": 1}).json()
    sid = listing["items"][0]["submission_id"]
    page = httpx.get(f"{site}/submissions/{sid}").text
    snippet = html.unescape(re.search(r'<pre class="verify">(.*?)</pre>', page, re.S).group(1))
    result = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"verified {sid} signed by ")


def test_unknown_submission_page_is_404_html(site):
    response = httpx.get(f"{site}/submissions/nope")
    assert response.status_code == 404 and "<h1>Not found</h1>" in response.text
