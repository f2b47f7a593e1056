"""The page's browser tests share one headless Chromium per module and a folder for their
screenshots ($SPECBENCH_SCREENSHOTS, else the test's temporary folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.server.http.page.test_page_browser import CHROMIUM_ARGS, _chromium


@pytest.fixture(scope="module")
def chromium():  # type: ignore[no-untyped-def]
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("SPECBENCH_SCREENSHOTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path
