"""End to end: `specsubmit run` against the Ollama-compatible test server, submitted to a
real `specserver serve` process on loopback, then found on the leaderboard, on the page
and in the CSV export."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specschema import parse_submission
from specserver.ingest import chip_is_known
from tests.fakeollama import FakeModel, FakeOllama
from tests.support.liveserver import free_port

BIN = Path(sys.executable).parent
MTP = "qwen3.5:9b-mtp"


# One server for the module, as a real one serves many contributors: each test sends its
# own protocol's run from its own key and reads only that protocol's boards, and starting
# `specserver serve` costs seconds.
@pytest.fixture(scope="module")
def specserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("specserver")
    port = free_port()
    env = {**os.environ, "SPECSERVER_DATABASE_URL": str(folder / "store.duckdb")}
    log = folder / "specserver.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(BIN / "specserver"), "serve", "--port", str(port)],
            env=env, stdout=sink, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"specserver did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    try:
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def _specsubmit(home: Path, server: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECSUBMIT_HOME": str(home), "SPECSUBMIT_SERVER": server}
    return subprocess.run(
        [str(BIN / "specsubmit"), *args], env=env, capture_output=True, text=True,
        timeout=180, check=False, stdin=subprocess.DEVNULL,
    )


def _saved_result(home: Path) -> dict:  # type: ignore[type-arg]
    files = sorted((home / "results").glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_hardnumbers_run_lands_on_the_noise_floor_page_and_export(
    tmp_path: Path, specserver: str
) -> None:
    home = tmp_path / "home"
    models = [
        # Fast, yet under the physical bound of a 9.3 GB qwen3:14b on the fastest memory
        # there is (8,000 GB/s x slack 2: 1,720 tok/s); faster is rightly quarantined.
        FakeModel("qwen3:14b", tokens_per_s=1000.0),
        FakeModel("qwen2.5:0.5b", tokens_per_s=2000.0, family="qwen2"),
        FakeModel("qwen2.5:1.5b", tokens_per_s=2000.0, family="qwen2"),
    ]
    with FakeOllama(version="0.12.8", models=models) as ollama:
        result = _specsubmit(home, specserver, "run", "--ollama", ollama.url, "--yes")
    assert result.returncode == 0, result.stderr
    saved = _saved_result(home)
    submission = parse_submission(json.dumps(saved).encode())
    submission_id = str(submission.submission_id)
    assert f"{specserver}/submissions/{submission_id}" in result.stdout + result.stderr

    stored = httpx.get(f"{specserver}/v1/submissions/{submission_id}").json()
    assert stored["submission"]["submission_id"] == submission_id
    assert len(stored["trials"]) == sum(len(c.trials) for c in submission.configs)

    # A not_applied draft never reaches the speedup board; it is on the noise-floor view.
    board = httpx.get(f"{specserver}/v1/leaderboard", params={"protocol": "hardnumbers-m2"})
    assert board.status_code == 200
    noise = httpx.get(
        f"{specserver}/v1/leaderboard",
        params={"protocol": "hardnumbers-m2", "view": "noise_floor", "group_by": "chip"},
    ).json()
    assert board.json()["groups"] == []
    chip = submission.fingerprint.chip
    assert chip is not None
    # One group per draft config (a draft is always part of the group key).
    assert len(noise["groups"]) == 2
    assert {g["key"]["chip"]["chip"] for g in noise["groups"]} == {chip}
    assert noise["verdict_counts"].get("not_applied") == 2  # two draft configs

    page = httpx.get(f"{specserver}/", params={"protocol": "hardnumbers-m2"})
    assert page.status_code == 200 and chip in page.text
    detail = httpx.get(f"{specserver}/submissions/{submission_id}")
    assert detail.status_code == 200 and "not_applied" in detail.text

    export = httpx.get(f"{specserver}/v1/export", params={"format": "csv"})
    assert export.status_code == 200
    rows = [r for r in csv.DictReader(io.StringIO(export.text))
            if r["submission_id"] == submission_id]
    assert sorted(r["config_name"] for r in rows) == sorted(c.name for c in submission.configs)


def test_confirmed_draft_counts_on_the_speedup_board(tmp_path: Path, specserver: str) -> None:
    home = tmp_path / "home"
    log = tmp_path / "server.log"
    with FakeOllama(version="0.33.1", models=[FakeModel(MTP, mtp=True, tokens_per_s=1500.0)],
                    log_path=log) as ollama:
        result = _specsubmit(home, specserver, "run", "--protocol", "ollama-draft",
                             "--target", MTP, "--ollama", ollama.url,
                             "--ollama-log", str(log), "--yes")
    assert result.returncode == 0, result.stderr
    submission = parse_submission(json.dumps(_saved_result(home)).encode())
    assert {c.speculation.observed for c in submission.configs if c.role == "draft"} == {
        "confirmed"
    }
    board = httpx.get(
        f"{specserver}/v1/leaderboard",
        params={"protocol": "ollama-draft", "group_by": "chip"},
    ).json()
    # This machine's chip: on the speedup board if the known-chip table lists it, else
    # listed apart until other address ranges corroborate it (board/chips.py).
    chip = submission.fingerprint.chip
    shown = board["groups" if chip_is_known(chip) else "uncorroborated_groups"]
    assert len(shown) == 2
    assert {g["key"]["chip"]["chip"] for g in shown} == {chip}
    assert board["verdict_counts"].get("confirmed") == 2  # spec_4 and spec_8
