"""Client side, end to end: the real `specsubmit` CLI, the fake Ollama, the real server.

The server is down when a contributor sends a finished run (``run`` checks ``--server``
before any trial, so the run itself is made without it): the signed result waits in the
pending queue and the command exits 75. Once the server is up,
`specsubmit submit --pending` delivers it; the server stores it exactly once, byte for
byte as it was parked; a second `--pending` sends nothing. (Ollama killed mid-run ->
clear message, partial result saved as incomplete, exit 1 is the client's own test:
tests/client/cli/test_run_cli.py::test_ollama_killed_mid_run. The retry/backoff unit
behaviour against a scripted server: tests/client/send/test_submit.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specschema import verify_envelope
from tests.fakeollama import FakeOllama
from tests.reliability.servers import ServerProcess, free_port
from tests.reliability.storecount import audit_file

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))


def _specsubmit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "SPECSUBMIT_"))}
    env.update({
        "HOME": str(tmp_path / "home"),
        "SPECSUBMIT_HOME": str(tmp_path / "state"),
        "SPECSUBMIT_RETRY_ATTEMPTS": "2",
        "SPECSUBMIT_RETRY_BASE_S": "0.05",
        "COLUMNS": "120",
    })
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=120,
                          env=env, check=False, stdin=subprocess.DEVNULL)


def _pending(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "state" / "pending").glob("*.json"))  # specsubmit.local.outbox


@pytest.mark.slow  # a real server stopped and restarted: ~30 s, loaded (full tier)
def test_server_down_then_pending_delivered_exactly_once(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with FakeOllama() as fake:
        run = _specsubmit(tmp_path, "run", "--ollama", fake.url)
    assert run.returncode == 0, run.stderr
    (result,) = sorted((tmp_path / "state" / "results").glob("*.json"))
    sent = _specsubmit(tmp_path, "submit", str(result), "--yes", "--server", url)
    assert "Traceback" not in sent.stderr
    print(f"submit with the server down: exit {sent.returncode}; "
          f"{[line for line in sent.stderr.splitlines() if line.strip()][-1:]}")
    assert sent.returncode == 75, sent.stderr  # saved and signed; delivery only postponed
    pending = _pending(tmp_path)
    assert len(pending) == 1, list((tmp_path / "state").rglob("*"))
    parked = pending[0].read_bytes()
    submission_id = json.loads(verify_envelope(json.loads(parked)).payload)["submission_id"]

    server = ServerProcess(str(tmp_path / "store.duckdb"), tmp_path, port=port)
    try:
        server.start()
        first = _specsubmit(tmp_path, "submit", "--pending", "--server", url)
        second = _specsubmit(tmp_path, "submit", "--pending", "--server", url)
        listed = _specsubmit(tmp_path, "results", "list", "--json")
    finally:
        server.stop()
    print(f"submit --pending: exit {first.returncode}, {first.stdout.strip()[:160]!r}; "
          f"again: {second.stdout.strip()!r}")
    assert first.returncode == 0, first.stderr
    assert f"submitted: {submission_id}" in first.stdout
    assert second.returncode == 0 and second.stdout.strip() == "nothing pending"
    assert _pending(tmp_path) == []
    assert submission_id in listed.stdout and "submitted" in listed.stdout
    audit = audit_file(str(tmp_path / "store.duckdb"), {submission_id: parked})
    assert audit["problems"] == [] and audit["stored"] == 1
