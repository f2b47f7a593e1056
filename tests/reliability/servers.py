"""Real `specserver serve` processes on free loopback ports, for the fault tests.

Each server is a child process started with the installed console script, its settings
from ``SPECSERVER_*`` variables, its output in a log file under the test's tmp folder.
Rate limits are off unless a test asks for them: fault tests drive load from one address.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.ports import free_port

SPECSERVER = str(Path(sys.executable).with_name("specserver"))


@dataclass
class ServerProcess:
    database: str
    workdir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    preexec_fn: Callable[[], None] | None = None
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"server-{self.port}.log"

    def start(self, timeout: float = 30.0) -> None:
        """Start (or restart) the server and wait until /healthz answers 200."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.port = self.port or free_port()
        env = dict(os.environ)
        env.update({
            "SPECSERVER_RATE_KEY_PER_MINUTE": "0",
            "SPECSERVER_RATE_ADDR_PER_MINUTE": "0",
            "SPECSERVER_PUBLIC_BASE_URL": self.url,
        })
        env.update(self.env)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [SPECSERVER, "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--database", self.database],
            stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=self.preexec_fn,
        )
        log.close()
        self.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server did not become healthy in {timeout}s:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""
