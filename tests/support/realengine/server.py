"""Start a real llama-server on a free loopback port and always stop it again.

``running_server(...)`` is a context manager: the server runs in its own process group,
which is killed on exit (SIGTERM, then SIGKILL), and on Linux the kernel also kills it if the
test process itself dies (PR_SET_PDEATHSIG), so no test leaves an orphan engine behind.
Stdlib only (urllib), so adapters' tests can use it without the project's HTTP client.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.ports import free_port

HOST = "127.0.0.1"
# The standard scenario of the tests and of the captured fixtures: greedy, a fixed prompt,
# 64 tokens, up to 8 drafted tokens per step.
PROMPT = "the speculative decoding benchmark"
N_PREDICT = 64
DRAFT_N_MAX = 8
# (drafted, accepted) per request of that scenario on x86-64 with the pinned build and
# tiny_gguf's "tiny" set, by draft role ("synthetic": the unrelated draft with
# --spec-synth-len 4). Exact: the same on every run (tests/realengine asserts them, and the
# captured fixtures show them). Changing tiny_gguf or the scenario moves them: update them
# and re-run python -m tests.support.realengine.capture together.
RECORDED_COUNTERS: dict[str, tuple[int, int]] = {
    "draft_identical": (56, 56),
    "draft_truncated": (141, 44),
    "draft_unrelated": (468, 0),
    "synthetic": (153, 43),
}
# Same counter line as Ollama's llama-server prints (llama.cpp PR #24536 format).
ACCEPTANCE_LINE = re.compile(
    r"draft acceptance = (?P<rate>[0-9.]+) \(\s*(?P<accepted>\d+) accepted /\s*"
    r"(?P<generated>\d+) generated\)"
)


class ServerStartError(RuntimeError):
    """llama-server exited or never became healthy; the message has its log's tail."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    # PR_SET_PDEATHSIG (1): the kernel sends SIGKILL when the parent dies, even by SIGKILL.
    # "Parent" is the thread that started the server: start it from a thread that outlives
    # it (the main thread, in pytest).
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def server_args(
    model: Path,
    port: int,
    *,
    draft: Path | None = None,
    draft_n_max: int = DRAFT_N_MAX,
    ctx: int = 512,
    threads: int = 1,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line after the binary (flags of llama.cpp 0c1e57098's llama-server)."""
    args = [
        "--model", str(model),
        "--host", HOST, "--port", str(port),
        "--ctx-size", str(ctx),
        # A fixed thread count, so nothing depends on the machine's core count. One thread:
        # the tiny models gain nothing from two, and on a busy 2-core machine two threads
        # waiting for each other made requests up to 10x slower (counters are the same).
        "--threads", str(threads), "--threads-batch", str(threads),
        "--parallel", "1",
        # The default busy-wait halves drafted-run speed on 2 cores (real-engine.md).
        "--poll", "0",
        "--no-warmup",
        "--metrics",
    ]
    if draft is not None:
        args += [
            "--spec-type", "draft-simple",
            "--spec-draft-model", str(draft),
            "--spec-draft-n-max", str(draft_n_max),
            # Always draft n-max tokens, however unsure the draft is: the number of drafted
            # tokens then depends on the models only, not on a confidence threshold.
            "--spec-draft-n-min", "0",
            "--spec-draft-p-min", "0",
        ]
    return args + list(extra)


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    command: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def get(self, path: str, timeout: float = 30) -> Any:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as response:
            return json.loads(response.read())

    def post(self, path: str, body: dict[str, Any], timeout: float = 120) -> Any:
        request = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def post_text(self, path: str, body: dict[str, Any], timeout: float = 120) -> str:
        """The raw response body (e.g. a server-sent event stream)."""
        request = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text: str = response.read().decode()
            return text

    def get_text(self, path: str, timeout: float = 30) -> str:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as response:
            text: str = response.read().decode()
            return text

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(
        self, pattern: re.Pattern[str], count: int = 1, timeout: float = 10
    ) -> list[str]:
        """The first `count` log lines matching `pattern`, waiting for them to be written
        (llama.cpp logs from a worker thread, so a line can trail the HTTP response)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [line for line in self.log_text().splitlines() if pattern.search(line)]
            if len(lines) >= count:
                return lines[:count]
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(lines)} of {count} log lines match {pattern.pattern!r} "
                    f"in {self.log_path}"
                )
            time.sleep(0.05)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(process: subprocess.Popen[bytes], grace: float = 10) -> None:
    """End the process group of `process`: SIGTERM, SIGKILL after `grace` seconds, and
    SIGKILL for anything the leader left behind; returns once the group is gone (or after
    a few seconds more, if something outside our control keeps a zombie in it)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(grace)
    # llama-server forks nothing, but whatever else runs here might have.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while _group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.02)  # signals are delivered, and orphans reaped, asynchronously


def _clean_env() -> dict[str, str]:
    # llama-server reads LLAMA_ARG_* (e.g. LLAMA_ARG_SPEC_SYNTH_LEN fakes acceptance); a
    # developer's environment must not change what the tests measure.
    return {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}


def _start(binary: Path, args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_clean_env(),
            start_new_session=True,  # own process group: stop() kills everything it forks
            # Only async-signal-safe work happens in it (one prctl call) before exec.
            preexec_fn=_die_with_parent,
        )


def _wait_healthy(server: RunningServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        code = server.process.poll()
        if code is not None:
            raise ServerStartError(
                f"llama-server exited with {code} before becoming healthy; "
                f"command: {server.command}\n{_tail(server.log_path)}"
            )
        try:
            # /health answers 503 while the model loads and 200 once it can serve.
            with urllib.request.urlopen(server.base_url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"llama-server not healthy after {timeout} s\n{_tail(server.log_path)}"
            )
        time.sleep(0.05)


@contextlib.contextmanager
def running_server(
    binary: Path,
    model: Path,
    log_path: Path,
    *,
    draft: Path | None = None,
    draft_n_max: int = DRAFT_N_MAX,
    ctx: int = 512,
    threads: int = 1,
    extra: Sequence[str] = (),
    startup_timeout: float = 120,
) -> Iterator[RunningServer]:
    """A healthy llama-server on a free 127.0.0.1 port, stopped (group killed) on exit.

    Raises ServerStartError (after stopping it) when it exits early or stays unhealthy.
    """
    for attempt in range(3):
        port = free_port()
        args = server_args(
            model, port, draft=draft, draft_n_max=draft_n_max, ctx=ctx, threads=threads,
            extra=extra,
        )
        process = _start(binary, args, log_path)
        server = RunningServer(process, port, log_path, [str(binary), *args])
        try:
            _wait_healthy(server, startup_timeout)
        except ServerStartError:
            stop(process)
            # Another process may have taken the port between free_port() and bind().
            if "couldn't bind" in server.log_text() and attempt < 2:
                continue
            raise
        except BaseException:
            stop(process)
            raise
        break
    try:
        yield server
    finally:
        stop(process)


def completion_body(prompt: str = PROMPT, n_predict: int = N_PREDICT) -> dict[str, Any]:
    """Greedy, reproducible /completion request: fixed seed, no prompt cache, no EOS stop."""
    return {
        "prompt": prompt,
        "n_predict": n_predict,
        "temperature": 0,
        "top_k": 1,
        "seed": 1,
        "ignore_eos": True,
        # Without this a second request would reuse the first one's KV cache and report
        # different prompt counters.
        "cache_prompt": False,
        "stream": False,
    }


def completion(
    server: RunningServer, prompt: str = PROMPT, n_predict: int = N_PREDICT
) -> dict[str, Any]:
    """The final JSON of a greedy /completion (see completion_body)."""
    result: dict[str, Any] = server.post("/completion", completion_body(prompt, n_predict))
    return result
