"""The server helper's process control, on stand-in processes (no llama-server needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.realengine import server

ROOT = Path(__file__).resolve().parents[2]


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "stand-in.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def test_stop_kills_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    # The child inherits the ignored SIGTERM: only SIGKILL on the whole group ends both.
    script = _script(tmp_path, "trap '' TERM\nsleep 60 &\nwait\n")
    process = server._start(script, [], tmp_path / "log")
    try:
        time.sleep(0.2)  # let the shell fork its child
        started = time.monotonic()
        server.stop(process, grace=0.5)
        assert process.returncode == -signal.SIGKILL
        assert _group_gone(process.pid)
        assert time.monotonic() - started < 8  # not the default 10 s grace, nor a hang
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_stop_kills_children_left_behind_by_an_exited_leader(tmp_path: Path) -> None:
    script = _script(tmp_path, "sleep 60 &\nexit 0\n")
    process = server._start(script, [], tmp_path / "log")
    process.wait(10)
    assert not _group_gone(process.pid)  # the orphaned sleep still holds the group
    server.stop(process)
    assert _group_gone(process.pid)


def test_the_environment_cannot_fake_acceptance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LLAMA_ARG_* would configure llama-server behind the test's back (e.g. synthetic
    # acceptance); the helper drops them and keeps everything else.
    monkeypatch.setenv("LLAMA_ARG_SPEC_SYNTH_LEN", "4")
    monkeypatch.setenv("SPECBENCH_PROBE", "kept")
    script = _script(tmp_path, "env\n")
    process = server._start(script, [], tmp_path / "log")
    process.wait(10)
    env = (tmp_path / "log").read_text()
    assert "SPECBENCH_PROBE=kept" in env
    assert "LLAMA_ARG_" not in env


def test_free_port_is_a_bindable_loopback_port() -> None:
    import socket

    port = server.free_port()
    with socket.socket() as probe:
        probe.bind((server.HOST, port))
    assert server.HOST == "127.0.0.1"


def test_the_server_dies_with_a_killed_test_process(tmp_path: Path) -> None:
    # A test run killed by SIGKILL (a CI timeout) runs no cleanup: the kernel must end the
    # engine then (PR_SET_PDEATHSIG), or it would keep its port and CPU after the run.
    script = _script(tmp_path, "exec sleep 60\n")
    with subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path\n"
         "from tests.support.realengine import server\n"
         f"p = server._start(Path({str(script)!r}), [], Path({str(tmp_path / 'log')!r}))\n"
         "print(p.pid, flush=True); time.sleep(60)\n"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    ) as parent:
        try:
            assert parent.stdout is not None
            pid = int(parent.stdout.readline())
            assert not _group_gone(pid)
        finally:
            parent.kill()  # leaving the block reaps it
    deadline = time.monotonic() + 5
    while not _group_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _group_gone(pid)
