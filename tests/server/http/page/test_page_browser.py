"""The page in a real headless Chromium, against a real uvicorn on a free loopback port."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from specschema.conclusion import conclusion
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.http.app import create_app
from specserver.ingest import hardnumbers
from specserver.settings import ServerSettings
from tests.support.boardfill import fill, insert_submission, key, new_engine
from tests.support.liveserver import free_port, serve

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


# The real, published Hard Numbers file (provenance: data/hardnumbers_spec_decode_m2.json
# .provenance): its page must read like the seed article's table.
HARDNUMBERS = Path(__file__).parents[2] / "data" / "hardnumbers_spec_decode_m2.json"
SITE_IDS: dict[str, str] = {}
LONG_CHIP = "X" * 190  # one unbroken word, as long as the wire format allows


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    path = tmp_path_factory.mktemp("site") / "store.duckdb"
    engine = new_engine(path)
    ids = fill(engine, 28, contributors=7)
    SITE_IDS["confirmed"] = ids[0]
    for seed in range(3):  # three imported references: a noise floor with percentiles
        ref = example_submission("hardnumbers-m2", seed=700 + seed, machine=EXAMPLE_MACHINES[0],
                                 engine_version="0.12.8",
                                 created_at=datetime(2026, 11, 1, tzinfo=UTC))
        insert_submission(engine, ref, None, source_note="Hard Numbers reference")
    # Unverified results on Apple M2 with a tempting 1.5x: never merged with the confirmed
    # ones, never coloured as a speedup.
    for seed in range(2):
        unverified = example_submission(
            "ollama-draft", seed=800 + seed, engine_version="0.30.1",
            machine=EXAMPLE_MACHINES[0], draft_speedups={"spec_4": 1.5, "spec_8": 1.5},
            counters_seen=False, created_at=datetime(2026, 11, 1, tzinfo=UTC))
        SITE_IDS["not_observed"] = insert_submission(engine, unverified, key(40 + seed))
    # An unstable result on Apple M2: its drafts reported counters, but its baseline blocks
    # disagree (the machine slowed by 60 % across the run): listed as what it is, never as
    # a result without counters.
    unstable = example_submission(
        "ollama-draft", seed=810, engine_version="0.30.1", machine=EXAMPLE_MACHINES[0],
        draft_speedups={"spec_4": 1.5, "spec_8": 1.5}, counters_seen=True, blocks=True,
        drift=0.6, schema_version=2, created_at=datetime(2026, 11, 1, tzinfo=UTC))
    assert {c.speculation.observed for c in unstable.configs[1:]} == {"unstable"}
    assert all(c.speculation.drafted_tokens for c in unstable.configs[1:])
    SITE_IDS["unstable"] = insert_submission(engine, unstable, key(45))
    real = hardnumbers.build_submission(
        HARDNUMBERS.read_bytes(), chip="Apple M2", memory_gb=24, ollama_version="0.12.8",
        os_name="macos", source="hardnumbers-experiments spec-decode-m2")
    SITE_IDS["hardnumbers"] = insert_submission(engine, real.submission, None,
                                                source_note="hardnumbers-experiments")
    SITE_IDS["real_conclusion"] = conclusion(
        real.summaries, {c.name: c.speculation for c in real.submission.configs},
        engine_version="0.12.8", complete=True)
    hostile = example_submission(
        "ollama-draft", seed=990, engine_version="0.30.1", counters_seen=True,
        machine=dict(EXAMPLE_MACHINES[0], chip=LONG_CHIP),
        created_at=datetime(2026, 11, 1, tzinfo=UTC))
    hostile = hostile.model_copy(update={"note": "<b>N</b>" + "n" * 480})
    SITE_IDS["hostile"] = insert_submission(engine, hostile, key(50))
    engine.dispose()
    port = free_port()  # the page's snippet uses public_base_url, never the Host header
    settings = ServerSettings(database_url=str(path), public_base_url=f"http://127.0.0.1:{port}")
    with serve(create_app(settings), port) as url:
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
    assert tab.locator("h1").inner_text() == "Will speculative decoding speed up your machine?"
    assert tab.locator("h2#leaderboard").inner_text() == "Speculative decoding leaderboard"
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
    # 2 draft configs x 4 chips confirmed, + 2 not-observed and 2 unstable groups on Apple
    # M2, split apart (the long-named chip of the hostile submission, a chip nobody else
    # reports, is not counted here: whether it is on this board is another rule's).
    chips = tab.evaluate("""() => [...document.querySelectorAll(
        "table.board[data-board='speedup-ollama-draft'] tr.group .chip")]
        .map(c => c.innerText.replace(/\\s/g, ''))""")
    assert sum(chip != LONG_CHIP for chip in chips) == 12
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
    chips = {rows.nth(i).locator(".chip").inner_text() for i in range(rows.count())}
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
    for heading in ("Results", "Details", "Moderation history", "Verify the signature yourself"):
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


# --- reading a result and the board like a person (layout assertions, not pixels) ----------

WIDE = {"width": 1280, "height": 800}
RAW_NAMES = ("engine_can_honor", "outputs_match_baseline", "counters_source", "config_name",
             "speedup_tps", "eval_duration_ns", "load_duration_ns", "total_duration_ns",
             "median_tps", "drafted_tokens", "observed")
GREEN = "rgb(47, 143, 78)"  # --good in style.css


def _overflow(tab) -> tuple[int, int]:
    return tab.evaluate("() => [document.documentElement.scrollWidth, "
                        "document.documentElement.clientWidth]")


def _visible_text(tab) -> str:
    return tab.evaluate("() => document.body.innerText")


def _rows(tab, selector: str) -> list[list[str]]:
    return tab.evaluate(f"""() => [...document.querySelectorAll({selector!r})].map(
        tr => [...tr.querySelectorAll('td')].map(td => td.innerText.trim()))""")


@pytest.fixture
def wide(browser, site):
    context = browser.new_context(viewport=WIDE)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(str(e)))
    yield tab, problems
    context.close()


@pytest.mark.browser
def test_the_real_hard_numbers_result_reads_like_the_article(wide, site):
    tab, problems = wide
    assert tab.goto(f"{site}/submissions/{SITE_IDS['hardnumbers']}").status == 200
    # The conclusion comes first (right after the title line): a short line per config,
    # then the paragraph in the CLI's own words.
    first = tab.evaluate("() => document.querySelector('h1 + p.subtitle + *').id")
    assert first == "conclusion"
    lines = tab.locator("ul.verdicts li").all_inner_texts()
    assert lines[0].startswith("no_draft: the baseline, 3.99 tok/s")
    assert [line.split(": ")[1] for line in lines[1:]] == ["not applied"] * 2
    assert all(line.endswith("is run-to-run noise") for line in lines[1:])
    text = tab.locator("p.conclusion").inner_text()
    assert text == SITE_IDS["real_conclusion"]
    assert text.startswith("Speculative decoding did not run in this test: Ollama 0.12.8")
    assert "run-to-run noise" in text
    # The article's table, with units: 3.99 / 3.79 / 3.58 tok/s, 0.95x and 0.90x.
    headers = tab.evaluate("() => [...document.querySelectorAll('table.results th')]"
                           ".map(th => th.innerText)")
    assert headers[:6] == ["Config", "Median wall (s)", "Median eval (s)", "Median tok/s",
                           "tok/s vs baseline [95% within-run CI]",
                           "wall vs baseline, prompt included [95% within-run CI]"]
    rows = _rows(tab, "table.results tr.config")
    assert [r[0].split("\n")[0] for r in rows] == ["no_draft", "draft_qwen2.5_0.5b",
                                                    "draft_qwen2.5_1.5b"]
    assert [r[2] for r in rows] == ["50.1", "52.8", "55.9"]
    assert [r[3] for r in rows] == ["3.99", "3.79", "3.58"]
    # A ratio whose verdict is not a measured speedup: no interval, and what it is.
    assert [r[4] for r in rows] == ["1.00x", "0.95x, noise", "0.90x, noise"]
    assert [r[6] for r in rows] == ["baseline", "not applied (noise)", "not applied (noise)"]
    for draft in rows[1:]:
        assert "checked by the server" in draft[7]
        assert "Ollama 0.12.8 cannot honor this request" in draft[7]
    # A noise ratio is not styled as a slowdown.
    ratio = tab.locator("table.results tr.config").nth(1).locator("td").nth(4)
    assert ratio.evaluate("td => getComputedStyle(td).color") != "rgb(192, 86, 43)"
    # Details fold away; the trial table says what the file did not publish.
    assert tab.evaluate("() => [...document.querySelectorAll('details')].every(d => !d.open)")
    visible = _visible_text(tab)
    assert not re.search(r"\b(True|False|None)\b", visible)
    assert not [n for n in RAW_NAMES if n in visible]
    assert _overflow(tab)[0] <= _overflow(tab)[1]
    assert problems == []


@pytest.mark.browser
def test_a_confirmed_result_separates_what_the_server_checked(wide, site):
    tab, problems = wide
    tab.goto(f"{site}/submissions/{SITE_IDS['confirmed']}")
    rows = _rows(tab, "table.results tr.config")
    assert [r[6] for r in rows] == ["baseline", "confirmed (75% accepted)",
                                    "confirmed (75% accepted)"]
    evidence = rows[1][7]
    assert "reported by the client\n1200 of 1600 drafted tokens accepted" in evidence.replace(
        " 1200 of", "\n1200 of")
    assert "checked by the server" in evidence and "cannot see the log itself" in evidence
    assert "evidence level log (log counters, consistent)" in evidence  # specschema.evidence
    assert tab.locator("p.conclusion").inner_text().startswith("spec_4 speculated")
    assert tab.locator("ul.verdicts li").nth(1).inner_text().startswith("spec_4: faster, 1.")
    # Opened, the details still fit and still speak in words and units.
    for summary in tab.locator("details > summary").all():
        summary.click()
    assert tab.evaluate("() => [...document.querySelectorAll('details')].every(d => d.open)")
    trial_head = tab.evaluate("() => [...document.querySelectorAll('table.trials th')]"
                              ".map(th => th.innerText)")
    assert "Wall (s)" in trial_head and "tok/s" in trial_head and "Load (ms)" in trial_head
    assert not re.search(r"\b(True|False)\b", _visible_text(tab))
    assert _overflow(tab)[0] <= _overflow(tab)[1]
    assert problems == []


@pytest.mark.browser
def test_long_contributor_text_wraps_instead_of_widening_the_page(wide, site):
    tab, problems = wide
    tab.goto(f"{site}/submissions/{SITE_IDS['hostile']}")
    for summary in tab.locator("details > summary").all():
        summary.click()
    assert LONG_CHIP in _visible_text(tab).replace("\n", "")
    assert tab.locator("main b").count() == 0  # the note's markup is text, not markup
    assert _overflow(tab)[0] <= _overflow(tab)[1]
    tab.goto(site + "/")  # the chip is in the filter menu, the board and the recent list too
    assert _overflow(tab)[0] <= _overflow(tab)[1]
    assert problems == []


@pytest.mark.browser
def test_the_board_separates_confirmed_unverified_and_noise(wide, site):
    tab, problems = wide
    tab.goto(site + "/")
    assert _overflow(tab)[0] <= _overflow(tab)[1]
    speed = "table.board[data-board='speedup-ollama-draft'] tr.group"
    rows = tab.evaluate(f"""() => [...document.querySelectorAll({speed!r})].map(tr => {{
        const ratio = tr.querySelector('td.ratio');
        const style = getComputedStyle(ratio);
        return {{style: tr.dataset.style, verdict: tr.querySelector('td.outcome').dataset.verdict,
                 outcome: tr.querySelector('td.outcome').innerText.split('\\n')[0],
                 engine: tr.querySelector('.engine').innerText,
                 chip: tr.querySelector('.chip').innerText,
                 draft: tr.querySelector('.draft').innerText,
                 colour: style.color, weight: style.fontWeight, ratio: ratio.innerText}};
    }})""")
    assert {r["engine"] for r in rows} == {"ollama"}  # the Engine column
    m2_spec4 = [r for r in rows if r["chip"] == "Apple M2" and r["draft"].startswith("spec_4")]
    assert sorted(r["verdict"] for r in m2_spec4) == ["confirmed", "not_observed", "unstable"]
    unverified = [r for r in rows if r["style"] == "unverified"]
    assert sorted(r["verdict"] for r in unverified) == ["not_observed"] * 2 + ["unstable"] * 2
    # Asked 1.5x (the example's trials scatter by a few percent around it).
    unseen = [r for r in unverified if r["verdict"] == "not_observed"]
    assert all(float(r["ratio"].rstrip("x")) > 1.4 for r in unseen)
    assert all(r["colour"] != GREEN and r["weight"] == "400" for r in unverified)
    # Each says what it holds: no counters, or counters with a baseline that moved.
    assert all(r["outcome"] == "unverified: not observed; no counters reported"
               for r in unseen)
    assert all(r["outcome"] == ("unverified: unstable (baseline blocks disagree); counters "
                                "reported")
               for r in unverified if r["verdict"] == "unstable")
    # Listed, never drawn as a speedup: no bar length, no whiskers, no interval.
    drawn = tab.evaluate("""() => [...document.querySelectorAll(
        "svg.chart[data-board='speedup-ollama-draft'] rect.bar")]
        .filter(r => parseFloat(r.getAttribute('width')) > 0)
        .map(r => r.getAttribute('class'))""")
    # Only confirmed groups have a length, in their outcome's colour.
    confirmed = sum(r["verdict"] == "confirmed" for r in rows)
    assert confirmed >= 8 and len(drawn) == confirmed
    assert all(c.split()[1] in ("faster", "slower", "unclear") for c in drawn)
    unverified_widths = tab.evaluate("""() => [...document.querySelectorAll(
        "svg.chart[data-board='speedup-ollama-draft'] rect.bar.unverified")]
        .map(r => parseFloat(r.getAttribute('width')))""")
    assert unverified_widths == [0.0] * 4
    spreads = tab.evaluate(f"""() => [...document.querySelectorAll({speed!r})]
        .filter(tr => tr.dataset.style === 'unverified')
        .map(tr => tr.querySelector('td.spread').innerText)""")
    assert spreads == ["no interval: not a measured speedup"] * 4
    assert any(r["colour"] == GREEN and r["outcome"] == "faster"
               for r in rows if r["style"] == "effect"), rows  # confirmed 1.2x: green, "faster"
    # The rule at length is one click away ("How this board is made"), the legend in view.
    assert "Colour by outcome" in tab.locator("#protocol-ollama-draft p.legend").inner_text()
    tab.locator("#protocol-ollama-draft details.rule > summary").click()
    note = tab.locator("#protocol-ollama-draft p.speedup-rule").inner_text()
    assert "the unverified ones are its view=unverified, never in a confirmed median" in note
    assert "unverified rows (not observed: the engine could speculate, but no counters" in note
    # The noise floor: labelled as such, its ratios neutral, never green or red.
    floor = tab.locator("#protocol-hardnumbers-m2")
    title = floor.locator("h3").nth(1).inner_text()
    assert "run-to-run difference, no speculation applied" in title
    head = floor.locator("table.board[data-board='noise-hardnumbers-m2'] th").all_inner_texts()
    assert any("no speculation applied" in h for h in head)
    assert "Median speedup" not in " ".join(head)
    cells = tab.evaluate("""() => [...document.querySelectorAll(
        "table.board[data-board='noise-hardnumbers-m2'] tr.group")].map(tr => {
            const cell = tr.querySelector('td.ratio');
            const style = getComputedStyle(cell);
            return [cell.className, style.color, style.fontWeight];
        })""")
    assert cells and all(c == ["num ratio noise", "rgb(107, 123, 140)", "400"] for c in cells)
    bars = tab.evaluate("""() => [...document.querySelectorAll(
        "svg.chart[data-board='noise-hardnumbers-m2'] rect.bar")]
        .map(r => r.getAttribute('class'))""")
    assert bars and set(bars) == {"bar noise"}
    assert problems == []
