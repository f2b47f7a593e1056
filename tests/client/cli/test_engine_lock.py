"""One run per engine: a second `specsubmit run` against the same Ollama is refused with one
line before it sends any request (a lock in the state folder, keyed by the engine's
address); another Ollama is not held up; the lock dies with its holder, even by SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.client.cli.test_run_cli import _one_error_line, _saved, specsubmit
from tests.fakeollama import FakeOllama

HOLDER = """
import sys, time
from specsubmit.engines.ollama.host import parse_ollama_host
from specsubmit.local.enginelock import engine_lock
with engine_lock("ollama " + parse_ollama_host(sys.argv[1]), "x"):
    print("held", flush=True)
    time.sleep(120)
"""


def _hold(url: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE,
                              text=True, env=os.environ.copy())
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_run_against_the_same_ollama_is_refused(tmp_path: Path,
                                                         specsubmit_home: Path) -> None:
    with FakeOllama(version="0.12.8") as fake, FakeOllama(version="0.12.8") as other:
        holder = _hold(fake.url)
        try:
            result = specsubmit(tmp_path, "run", "--ollama", fake.url, "--no-submit")
            assert result.returncode == 1
            line = _one_error_line(result)
            assert line.startswith(f"specsubmit: error: another specsubmit run is using Ollama "
                                   f"at {fake.url.rstrip('/')} (pid {holder.pid}, since ")
            assert "would read each other's counters" in line
            assert fake.requests == [] and _saved(specsubmit_home) == []
            # Another Ollama (another address) is not held up by this lock.
            elsewhere = specsubmit(tmp_path, "run", "--ollama", other.url, "--no-submit")
            assert elsewhere.returncode == 0, elsewhere.stderr
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
            assert holder.stdout is not None
            holder.stdout.close()
        # The holder died without a chance to clean up: the lock went with it.
        again = specsubmit(tmp_path, "run", "--ollama", fake.url, "--no-submit")
        assert again.returncode == 0, again.stderr
    assert len(_saved(specsubmit_home)) == 2


def _llama_server_run_is_refused(tmp_path: Path, holder_env: dict[str, str]) -> None:
    """A process holding the llama-server lock under ``holder_env``; a run is refused."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.replace('"ollama " + parse_ollama_host(sys.argv[1])',
                                              '"llama-server"'), "-"],
        stdout=subprocess.PIPE, text=True, env=holder_env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = specsubmit(tmp_path, "run", "--engine", "llama-server", "--protocol",
                            "llamacpp-draft", "--ollama-models", str(tmp_path / "none"),
                            "--no-submit")
        assert result.returncode == 1
        assert "another specsubmit run is using llama-server on this machine (pid " in (
            _one_error_line(result))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()


def test_two_llama_server_runs_on_one_machine_are_refused(tmp_path: Path) -> None:
    _llama_server_run_is_refused(tmp_path, os.environ.copy())


def test_one_ollama_named_two_ways_is_one_lock(tmp_path: Path, specsubmit_home: Path) -> None:
    """`localhost` and `127.0.0.1` (and ::1, 0.0.0.0) reach the same Ollama: one lock."""
    with FakeOllama(version="0.12.8") as fake:
        port = fake.url.rstrip("/").rsplit(":", 1)[1]
        holder = _hold(f"http://localhost:{port}")
        try:
            result = specsubmit(tmp_path, "run", "--ollama", f"http://127.0.0.1:{port}",
                                "--no-submit")
            assert result.returncode == 1
            assert "another specsubmit run is using Ollama at" in _one_error_line(result)
            assert fake.requests == [] and _saved(specsubmit_home) == []
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
            if holder.stdout is not None:
                holder.stdout.close()


def test_a_llama_server_run_under_another_home_still_meets_the_lock(tmp_path: Path) -> None:
    """The lock is the machine's, not the state folder's: another HOME (and another
    SPECSUBMIT_HOME) is refused the same."""
    _llama_server_run_is_refused(tmp_path, {
        **os.environ, "HOME": str(tmp_path / "alice"),
        "SPECSUBMIT_HOME": str(tmp_path / "alice" / "state")})


def test_the_endpoint_is_its_resolved_address() -> None:
    from specsubmit.local.enginelock import canonical_address

    def resolve(host: str) -> list[str]:
        return {"localhost": ["127.0.0.1", "::1"], "box": ["192.0.2.7"]}[host]

    same = {canonical_address(f"ollama http://{host}:11434", resolve)
            for host in ("localhost", "127.0.0.1", "[::1]", "0.0.0.0", "127.0.0.2")}
    assert same == {"ollama http://loopback:11434"}
    assert canonical_address("ollama http://box:11434/", resolve) == "ollama http://192.0.2.7:11434"
    assert canonical_address("ollama http://localhost:11435", resolve) != next(iter(same))
    assert canonical_address("llama-server", resolve) == "llama-server"

    def unresolvable(host: str) -> list[str]:
        raise OSError("no such name")

    assert canonical_address("ollama http://nowhere:1", unresolvable) == (
        "ollama http://nowhere:1")
