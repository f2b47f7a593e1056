"""The page at a glance, in a real headless Chromium at 960 and 1,440 px: a board of 30 groups
with chip names of every length, the home page and a submission page. Checked in the
browser's own layout (not pixels): no chart label starts or ends outside its chart, the page
never scrolls sideways (a table may, inside its own box), the columns sort, the contribute
line names this server, and the colours follow the outcome (a 0.30x slowdown is red and says
"slower", however confirmed). Screenshots of each go to $SPECBENCH_SCREENSHOTS (or the
test's temporary folder) for a person to look at."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from specschema.examples import example_submission
from specserver.http.app import create_app
from specserver.http.page import charts
from specserver.http.page.board import new_keys_note
from specserver.settings import ServerSettings
from tests.support.boardfill import insert_submission, key, new_engine
from tests.support.liveserver import free_port, serve

WIDTHS = (960, 1440)
GREEN, RED, BLUE = "rgb(47, 143, 78)", "rgb(192, 86, 43)", "rgb(61, 106, 153)"
# Chip names a board really gets: short, long, one unbroken word, wide capitals, CJK.
CHIPS = ["Apple M2", "Apple M3 Pro", "Apple M4 Max (16-core CPU, 40-core GPU)",
         "AMD EPYC 7B13 64-Core Processor", "NVIDIA GeForce RTX 4090 Laptop GPU",
         "AMD Ryzen AI MAX+ 395 w/ Radeon 8060S", "WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW",
         "Intel(R) Core(TM) Ultra 9 285K with a very long marketing name indeed",
         "苹果 M2 Ultra 芯片（二十四核中央处理器）", "x" * 120,
         "Qualcomm Snapdragon X Elite X1E-84-100",
         "NVIDIA RTX 6000 Ada Generation", "AMD Radeon RX 7900 XTX", "Raspberry Pi 5",
         "MMMMMMMMMMMMMMMMMMMMMMMMMM MMMMMMMMMMMMMM MMMMMMMMMMMMMMM"]
SPEEDUPS = [(1.6, 1.25), (1.0, 0.98), (0.3, 0.5)]  # faster; no clear difference; slower
SLOW: dict[str, str] = {}


def _machine(index: int) -> dict[str, object]:
    return {"chip": CHIPS[index], "memory_gb": 16 + 8 * (index % 6), "os": "linux",
            "os_version": "6.8", "arch": "x86_64", "gpu_vendor": "nvidia", "unified": False}


@pytest.fixture(scope="module")
def glance(tmp_path_factory):
    path = tmp_path_factory.mktemp("glance") / "store.duckdb"
    engine = new_engine(path)
    newest = datetime(2026, 11, 20, tzinfo=UTC)
    for index in range(len(CHIPS)):  # 15 chips x (spec_4, spec_8): 30 groups
        spec_4, spec_8 = SPEEDUPS[index % len(SPEEDUPS)]
        # 3-6 contributors: the columns have something to sort, and every chip (most are
        # in no chip table) is corroborated, so all 30 groups are on the board
        for copy in range(3 + index % 4):
            sub = example_submission(
                "ollama-draft", seed=100 * index + copy, engine_version="0.30.1",
                machine=_machine(index), draft_speedups={"spec_4": spec_4, "spec_8": spec_8},
                counters_seen=True, created_at=datetime(2026, 11, 1, tzinfo=UTC))
            sid = insert_submission(engine, sub, key(1000 + 10 * index + copy),
                                    received_at=newest - timedelta(days=30 - index - copy))
            if spec_4 == 0.3 and "id" not in SLOW:
                SLOW["id"] = sid
    engine.dispose()
    port = free_port()
    settings = ServerSettings(database_url=str(path), public_base_url=f"http://127.0.0.1:{port}",
                              page_groups=50)
    with serve(create_app(settings), port) as url:
        yield url


def _tab(chromium, width: int):  # type: ignore[no-untyped-def]
    context = chromium.new_context(viewport={"width": width, "height": 900})
    tab = context.new_page()
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(str(e)))
    return context, tab, problems


def _no_page_overflow(tab) -> None:  # type: ignore[no-untyped-def]
    wide, visible = tab.evaluate("() => [document.documentElement.scrollWidth, "
                                 "document.documentElement.clientWidth]")
    assert wide <= visible, f"the page scrolls sideways: {wide} > {visible} px"


def _clipped_labels(tab) -> list[str]:  # type: ignore[no-untyped-def]
    """Chart labels (in the chart's own units) that start before 0 or end past its width."""
    return tab.evaluate("""() => {
        const out = [];
        for (const svg of document.querySelectorAll('svg.chart')) {
            const width = svg.viewBox.baseVal.width;
            for (const text of svg.querySelectorAll('text')) {
                const box = text.getBBox();
                if (box.x < 0 || box.x + box.width > width) out.push(text.textContent);
            }
        }
        return out;
    }""")


def _tables_fit_or_scroll_inside(tab) -> None:  # type: ignore[no-untyped-def]
    """Every table fits the width of main, or sits in a box that scrolls by itself."""
    bad = tab.evaluate("""() => {
        const main = document.querySelector('main').getBoundingClientRect();
        const out = [];
        for (const table of document.querySelectorAll('table')) {
            const box = table.getBoundingClientRect();
            const scroller = table.closest('.scroll');
            const inside = scroller && getComputedStyle(scroller).overflowX === 'auto'
                && scroller.getBoundingClientRect().right <= main.right + 1;
            if (box.right > main.right + 1 && !inside) out.push(table.className);
        }
        return out;
    }""")
    assert bad == []


def _rows(tab, board: str) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    return tab.evaluate(f"""() => [...document.querySelectorAll(
        "table.board[data-board='{board}'] tr.group")].map(tr => {{
            const cell = name => tr.querySelector('td.' + name);
            return {{outcome: tr.dataset.outcome,
                     words: cell('outcome') ? cell('outcome').innerText.split('\\n')[0] : '',
                     ratio: cell('ratio').innerText,
                     colour: getComputedStyle(cell('ratio')).color,
                     contributors: parseInt(cell('contributors').innerText, 10),
                     chip: tr.querySelector('.chip').innerText}};
        }})""")


@pytest.mark.browser
@pytest.mark.parametrize("width", WIDTHS)
def test_a_board_of_30_groups_reads_at_a_glance(chromium, glance, shots, width):
    context, tab, problems = _tab(chromium, width)
    try:
        assert tab.goto(glance + "/?protocol=ollama-draft").status == 200
        tab.screenshot(path=str(shots / f"board-30-groups-{width}.png"), full_page=True)
        rows = _rows(tab, "speedup-ollama-draft")
        assert len(rows) == 30
        _no_page_overflow(tab)
        _tables_fit_or_scroll_inside(tab)
        assert _clipped_labels(tab) == []
        # Every label is there in full in its tooltip, even where the bar's text is cut.
        titles = tab.evaluate("() => [...document.querySelectorAll('svg.chart text.label')]"
                              ".map(t => t.querySelector('title').textContent)")
        assert len(titles) == 30 and any(CHIPS[9] in t for t in titles)
        # Outcome colours and words: faster green, slower red, not resolved blue (a spread
        # that includes 1.00x shows it speculated, not that it is faster or slower).
        expected = {"faster": GREEN, "slower": RED, "unclear": BLUE}
        words = {"faster": "faster", "slower": "slower",
                 "unclear": "speculated; speedup not resolved (contributors' "}
        for row in rows:
            assert row["colour"] == expected[row["outcome"]], row
            assert row["words"].startswith(words[row["outcome"]]), row
        slow = [r for r in rows if r["ratio"].startswith("0.3")]
        assert slow and all(r["outcome"] == "slower" and r["colour"] == RED for r in slow)
        assert not any("confirmed" in r["words"] for r in rows)
        # Where new keys are pooled, one line says so (the default probation is on).
        pooled = tab.locator("#protocol-ollama-draft p.new-keys").first.inner_text()
        assert pooled.startswith("Keys newer than 7 days count together as one contributor")
        # The contribute line, with this server's own URL.
        line = tab.locator("p.contribute").inner_text()
        assert f"specsubmit run --server {glance}" in line
        assert "pipx install ./client --preinstall ./schema" in line
        assert problems == []
    finally:
        context.close()


@pytest.mark.browser
def test_the_board_sorts_by_its_columns(chromium, glance):
    context, tab, problems = _tab(chromium, 960)
    try:
        tab.goto(glance + "/?protocol=ollama-draft")
        board = "speedup-ollama-draft"
        ratios = [float(r["ratio"].rstrip("x")) for r in _rows(tab, board)]
        assert ratios == sorted(ratios, reverse=True)  # the default: largest speedup first
        header = f"table.board[data-board='{board}'] th[data-sort=contributors] a"
        with tab.expect_navigation():
            tab.click(header)
        assert "sort=-contributors" in tab.url and "protocol=ollama-draft" in tab.url
        counts = [r["contributors"] for r in _rows(tab, board)]
        assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
        sorted_by = f"table.board[data-board='{board}'] th[data-sort=contributors]"
        assert tab.locator(sorted_by).get_attribute("aria-sort") == "descending"
        with tab.expect_navigation():
            tab.click(header)  # again: the other way
        counts = [r["contributors"] for r in _rows(tab, board)]
        assert counts == sorted(counts) and "sort=contributors" in tab.url
        # The chart follows the table's order.
        labels = tab.evaluate(f"""() => [...document.querySelectorAll(
            "svg.chart[data-board='{board}'] text.label title")].map(t => t.textContent)""")
        chips = [r["chip"] for r in _rows(tab, board)]
        assert [label.split(" · ")[0] for label in labels] == chips
        with tab.expect_navigation():
            tab.click(f"table.board[data-board='{board}'] th[data-sort=baseline_tps] a")
        assert "sort=-baseline_tps" in tab.url
        bad = tab.goto(glance + "/?sort=fastest")
        assert bad is not None and bad.status == 422
        assert problems == [] or all("422" in p for p in problems)
    finally:
        context.close()


@pytest.mark.browser
@pytest.mark.parametrize("width", WIDTHS)
def test_the_home_page_and_a_submission_page_fit(chromium, glance, shots, width):
    context, tab, problems = _tab(chromium, width)
    try:
        tab.goto(glance + "/")
        tab.screenshot(path=str(shots / f"home-{width}.png"), full_page=True)
        _no_page_overflow(tab)
        _tables_fit_or_scroll_inside(tab)
        assert _clipped_labels(tab) == []
        assert tab.locator("p.contribute").count() == 1
        assert tab.goto(f"{glance}/submissions/{SLOW['id']}").status == 200
        tab.screenshot(path=str(shots / f"submission-{width}.png"), full_page=True)
        _no_page_overflow(tab)
        _tables_fit_or_scroll_inside(tab)
        # The conclusion: one short line per config, first, coloured by its outcome; the
        # paragraph in full below it.
        first = tab.evaluate("() => document.querySelector('h1 + p.subtitle + *').id")
        assert first == "conclusion"
        lines = tab.evaluate("""() => [...document.querySelectorAll('ul.verdicts li')].map(
            li => [li.className, li.innerText, getComputedStyle(li).color])""")
        assert [line[1].split(":")[0] for line in lines] == ["spec_off", "spec_4", "spec_8"]
        assert all(len(text) <= 110 for _, text, _ in lines), lines
        assert lines[1][0] == "slower" and lines[1][1].startswith("spec_4: slower, 0.")
        assert lines[1][2] == RED and "speculation confirmed" in lines[1][1]
        assert tab.locator("ul.verdicts + p.conclusion").count() == 1
        ratio = tab.locator("table.results tr.config").nth(1).locator("td").nth(4)
        assert ratio.evaluate("td => getComputedStyle(td).color") == RED
        verdict = tab.locator("table.results tr.config").nth(1).locator("td.verdict")
        assert verdict.evaluate("td => getComputedStyle(td).color") != GREEN
        assert problems == []
    finally:
        context.close()


def test_a_chart_label_is_cut_to_its_column_by_a_conservative_estimate() -> None:
    for chip in CHIPS:
        label = charts.fit_parts(chip, "48 GB · spec_4")
        assert charts.text_width(label) <= charts.LABEL_ROOM
        assert label.endswith("48 GB · spec_4")  # the chip is cut first
    assert charts.fit_parts("Apple M2", "24 GB · spec_4") == "Apple M2 · 24 GB · spec_4"
    assert charts.fit("W" * 100).endswith("…")


def test_the_new_keys_line_says_why_a_fresh_board_reads_few_results() -> None:
    line = new_keys_note(7, 3)
    assert "Keys newer than 7 days count together as one contributor per group" in line
    assert "needs 3" in line
    assert new_keys_note(0, 3) == ""  # no pooling, nothing to explain
