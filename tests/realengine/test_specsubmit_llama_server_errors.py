"""`specsubmit run --engine llama-server` against a real llama-server, every bad input a
contributor can give: no binary, a model missing, vocabularies that differ, a GGUF that will
not load, a port in use, the engine dying mid-run: one line, exit 1, the partial result kept
as incomplete, and no llama-server process left behind."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from specschema import get_protocol
from tests.realengine.test_specsubmit_llama_server import (
    _argv,
    _env,
    _llama_servers_using,
    _one_error_line,
    _run,
    _saved,
    _snapshot_all,
)
from tests.support.realengine.fixtures import RUN_NAMES
from tests.support.realengine.ollama_store import DEFAULT_NAMES, add_model
from tests.support.realengine.tiny_gguf import ModelSet

pytestmark = pytest.mark.realengine


def test_no_binary_found(tmp_path: Path, run_models_dir: Path) -> None:
    env = _env(tmp_path)
    env["PATH"] = str(tmp_path / "empty-bin")  # no ollama, no llama-server
    result = _run(tmp_path, _argv(None, run_models_dir), env=env)
    assert result.returncode == 1
    assert "no llama-server found: pass --llama-server PATH" in _one_error_line(result)
    assert _saved(tmp_path) == []


def test_a_model_missing_from_the_ollama_folder(tmp_path: Path, llama_server_bin: Path,
                                                tiny_model_set: ModelSet) -> None:
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", tiny_model_set.target)  # the drafts were never pulled
    before = _snapshot_all(folder)
    result = _run(tmp_path, _argv(llama_server_bin, folder))
    assert result.returncode == 1
    line = _one_error_line(result)
    assert "model 'qwen3:0.6b' is not in the Ollama models folder" in line
    assert "ollama pull qwen3:0.6b" in line
    assert _snapshot_all(folder) == before and _saved(tmp_path) == []
    assert _llama_servers_using(folder) == []


def test_incompatible_vocabularies(tmp_path: Path, llama_server_bin: Path,
                                   ollama_models_dir: Path) -> None:
    # helper-1's folder: qwen2.5:1.5b has another vocabulary (tiny_gguf "tiny-incompatible").
    # That config is incompatible and never started; every other config runs.
    assert DEFAULT_NAMES["draft_incompatible"] == "qwen2.5:1.5b"
    result = _run(tmp_path, _argv(llama_server_bin, ollama_models_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "draft_qwen2.5_1.5b_n8: qwen2.5:1.5b cannot draft for qwen3:14b" in result.stderr
    assert "vocabularies differ (token 259" in result.stderr
    (sub,) = _saved(tmp_path)
    refused = next(c for c in sub.configs if c.name == "draft_qwen2.5_1.5b_n8")
    assert refused.speculation.observed == "incompatible" and refused.trials == []
    # the other configs run the run's schedule: the protocol's, less the later blocks of a
    # draft the early-stop rule stopped (the unrelated qwen2.5:0.5b accepts nothing)
    run = get_protocol("llamacpp-draft").for_run(sub.protocol.parameters)
    assert run.stopped == ("draft_qwen2.5_0.5b_n8",)
    assert sub.complete and all(len(c.trials) == run.trials_for(c.name)
                                for c in sub.configs if c is not refused)
    # Never started: no launch recorded for it.
    assert refused.speculation.launches == []
    assert _llama_servers_using(ollama_models_dir) == []


def test_a_gguf_that_will_not_load(tmp_path: Path, llama_server_bin: Path,
                                   tiny_model_set: ModelSet) -> None:
    # The header (read before any trial) is intact; the tensor data is cut off, so only
    # llama-server's own load fails.
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(tiny_model_set.target.read_bytes()[:200_000])
    folder = tmp_path / "models"
    add_model(folder, "qwen3:14b", broken)
    roles = tiny_model_set.by_role()
    for name, role in RUN_NAMES.items():
        if name != "qwen3:14b":
            add_model(folder, name, roles[role])
    result = _run(tmp_path, _argv(llama_server_bin, folder))
    assert result.returncode == 1
    line = _one_error_line(result)
    assert "llama-server did not start for no_draft (model qwen3:14b)" in line
    assert "nothing was measured" in line
    assert _llama_servers_using(folder) == []


def test_a_port_in_use(tmp_path: Path, llama_server_bin: Path, run_models_dir: Path,
                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                       ) -> None:
    """Every free port the client picks is taken before llama-server binds it (the race the
    retry exists for, made permanent): after 3 tries, one line and exit 1."""
    from specsubmit.cli import main
    from specsubmit.engines.llama_server import process

    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(process, "free_port", lambda: port)
        with pytest.raises(SystemExit) as exited:
            main(_argv(llama_server_bin, run_models_dir)[1:])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("specsubmit: error:")]
    assert lines == [f"specsubmit: error: llama-server could not listen on 127.0.0.1:{port}: "
                     "the port is in use (3 ports tried) (nothing was measured)"]
    assert process.live_processes() == [] and _llama_servers_using(run_models_dir) == []


def test_the_engine_dying_mid_run(tmp_path: Path, llama_server_bin: Path,
                                  run_models_dir: Path) -> None:
    """SIGKILL the running llama-server once two trials are saved: the run stops with one
    line, exit 1, and keeps what it measured as an incomplete result. A result is saved
    once a block is whole (2 trials), so the kill lands in the next block's start or in its
    requests: either way the engine died mid-run."""
    proc = subprocess.Popen(_argv(llama_server_bin, run_models_dir), env=_env(tmp_path),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    killed: list[int] = []
    try:
        deadline = time.monotonic() + 600
        while not killed and time.monotonic() < deadline and proc.poll() is None:
            saved = _saved(tmp_path) if (tmp_path / "specsubmit-home" / "results").exists() \
                else []
            if saved and sum(len(c.trials) for c in saved[0].configs) >= 2:
                for pid in _llama_servers_using(run_models_dir):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.05)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed, "the run never got to two trials"
    assert proc.returncode == 1, stderr
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    line = _one_error_line(result)
    assert re.search(r"llama-server (exited \(code -9\) during a \S+ request|did not start "
                     r"for \S+)", line), line
    assert "the partial result" in line and "is saved at" in line
    (sub,) = _saved(tmp_path)
    kept = sum(len(c.trials) for c in sub.configs)
    assert not sub.complete and 2 <= kept < 50 and kept % 2 == 0  # whole blocks of 2
    assert sub.note and re.search(r"llama-server failed \((EngineDied|EngineStartFailed)\)",
                                  sub.note)
    assert _llama_servers_using(run_models_dir) == []
