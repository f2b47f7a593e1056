"""The maintainer's quarantine commands: list what the plausibility rule held, reject one
(audited), through the running server's admin API and on the store directly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from specschema import envelope_bytes, sign_envelope, submission_bytes
from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.cli import admin
from specserver.http.app import create_app
from specserver.settings import ServerSettings
from tests.reliability.hostile import signing_key
from tests.support.liveserver import serve

TOKEN = "quarantine-admin-token"
M2 = next(m for m in EXAMPLE_MACHINES if m["chip"] == "Apple M2")


@pytest.fixture(autouse=True)
def _no_admin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPECSERVER_ADMIN_URL", "SPECSERVER_ADMIN_TOKEN", "SPECSERVER_DATABASE_URL",
                 "SPECSERVER_ADMIN_ACTOR"):
        monkeypatch.delenv(name, raising=False)


def cli(*args: str) -> Any:
    app = typer.Typer()
    admin.register(app)
    return CliRunner().invoke(app, list(args))


def post(url: str, seed: int, baseline_tps: float) -> str:
    sub = example_submission("ollama-draft", seed=seed, engine_version="0.30.1", machine=M2,
                             baseline_tps=baseline_tps, counters_seen=True, target="qwen3:14b",
                             created_at=datetime.now(UTC) - timedelta(minutes=5))
    body = envelope_bytes(sign_envelope(submission_bytes(sub), signing_key(seed)))
    response = httpx.post(f"{url}/v1/submissions", content=body,
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    return str(response.json()["submission_id"])


def test_quarantine_is_listed_and_rejected_through_the_server_and_directly(
        tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    with serve(create_app(ServerSettings(database_url=str(db), admin_token=TOKEN))) as url:
        base = ["--server", url, "--token", TOKEN, "--actor", "alice"]
        assert cli("quarantine", *base).output.strip() == "quarantine is empty"
        fast_a, fast_b = post(url, 41, 500.0), post(url, 42, 480.0)
        honest = post(url, 43, 9.5)
        listed = cli("quarantine", "--json", *base)
        assert listed.exit_code == 0, listed.output
        items = json.loads(listed.output)
        assert [i["submission_id"] for i in items] == [fast_a, fast_b]  # oldest first
        assert all("tok/s" in i["reason"] and i["chip"] == "Apple M2" for i in items)
        table = cli("quarantine", *base).output
        assert fast_a in table and fast_b in table and honest not in table
        rejected = cli("reject", fast_a, "--reason", "invented baseline", *base)
        assert rejected.exit_code == 0 and rejected.output.strip() == f"reject {fast_a}: done"
        refused = cli("reject", honest, "--reason", "x", *base)
        assert refused.exit_code == 1 and "not in quarantine" in refused.output
        no_reason = cli("reject", fast_b, "--reason", " ", *base)
        assert no_reason.exit_code == 1 and "needs a reason" in no_reason.output
        history = httpx.get(f"{url}/v1/submissions/{fast_a}").json()["moderation"]
        assert [(h["action"], h["reason"], h["actor"]) for h in history] == [
            ("reject", "invented baseline", "alice")]
    # No server now: the same commands open the store itself.
    direct = ["--database", str(db), "--actor", "bob"]
    left = json.loads(cli("quarantine", "--json", *direct).output)
    assert [i["submission_id"] for i in left] == [fast_b]  # a rejected one leaves the queue
    assert cli("reject", fast_b, "--reason", "same source", *direct).exit_code == 0
    assert cli("quarantine", *direct).output.strip() == "quarantine is empty"
