"""One llama-server process: started on 127.0.0.1 and a free port, always stopped again.

No orphan, whatever happens to the run:
- the server runs in its own session (process group), and stopping it kills the group:
  SIGTERM, then SIGKILL after a grace period;
- every live server is in ``_LIVE``, which an ``atexit`` hook stops (a normal exit, an
  uncaught exception, SystemExit from the SIGTERM handler the engine installs);
- on Linux the kernel kills it when this process dies by any means, SIGKILL included
  (``PR_SET_PDEATHSIG``, set in the child before exec).
Its environment has no ``LLAMA_ARG_*`` variables: those set any flag (``LLAMA_ARG_SPEC_SYNTH_LEN``
fakes acceptance), and a run must use exactly the command line it records.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

HOST = "127.0.0.1"
STOP_GRACE_S = 5.0
_LIVE: set[subprocess.Popen[bytes]] = set()
_LOCK = threading.Lock()


def free_port() -> int:
    """A port nobody listens on right now (the server may still lose a race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    if sys.platform.startswith("linux"):
        # prctl(PR_SET_PDEATHSIG = 1, SIGKILL): the kernel kills the server with us.
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def clean_env(library_dir: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    if library_dir is not None:
        key = "DYLD_LIBRARY_PATH" if sys.platform == "darwin" else "LD_LIBRARY_PATH"
        env[key] = os.pathsep.join(p for p in (str(library_dir), env.get(key)) if p)
    return env


def spawn(command: Sequence[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True, preexec_fn=_die_with_parent,  # noqa: PLW1509
        )
    with _LOCK:
        _LIVE.add(process)
    return process


def stop(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """Stop the server's whole process group (idempotent)."""
    try:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(grace_s)
        else:
            # The leader is gone; anything it forked may still hold the group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
    finally:
        with _LOCK:
            _LIVE.discard(process)


def live_processes() -> list[subprocess.Popen[bytes]]:
    with _LOCK:
        return list(_LIVE)


@atexit.register
def stop_all() -> None:
    for process in live_processes():
        stop(process, grace_s=2.0)


def log_tail(path: Path, lines: int = 40) -> list[str]:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64_000))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def wait_until(check: Callable[[], bool], process: subprocess.Popen[bytes],
               timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll `check` until it is true (True), the process exits or time runs out (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if check():
            return True
        time.sleep(interval_s)
    return False


def cpu_seconds(process_: subprocess.Popen[bytes]) -> float | None:
    """User + system CPU time the server has used so far (Linux /proc; None elsewhere).
    On busy machines it is steadier than wall time: waiting for a core costs no CPU."""
    try:
        fields = Path(f"/proc/{process_.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def exit_code_within(process_: subprocess.Popen[bytes], wait_s: float = 1.0) -> int | None:
    """The process's exit code if it ends within ``wait_s``; None while it runs."""
    try:
        return process_.wait(wait_s)
    except subprocess.TimeoutExpired:
        return None
