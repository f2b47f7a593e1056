"""The Ollama-compatible test server (http.server in a thread; no extra dependency).

What it reproduces (shared/reference/ollama-api.md):
- /, /api/version, /api/tags, /api/show, /api/ps, /api/pull (streamed progress),
  /api/generate streamed as chunked NDJSON (or one JSON object with stream:false).
- Metrics only on the final chunk, integer nanoseconds on the server's own monotonic
  clock: load + prompt_eval + eval <= total, and total is taken just before the final
  chunk is written, so the client's wall time is always >= total. The eval duration is
  the model's nominal one (count / speed; the sleep is never shorter), not the measured
  sleep: a loaded test machine must not make the fake's decode rate drift between blocks,
  or verdicts in tests would depend on load (the baseline's blocks would "disagree").
- Greedy output (temperature 0) depends only on model and prompt: identical with and
  without speculation, as lossless speculative decoding must be.
- Unknown top-level fields are ignored; unknown options are ignored with a log line
  `level=WARN msg="invalid option provided" option=<key>`; a wrong option type gives
  HTTP 500 `{"error":"option \"num_predict\" must be of type integer"}`.
- 404 `model '<name>' not found` for generate and show.
- Versions: before 0.30.0 `draft_num_predict` is an unknown option. From 0.30.0 it is a
  runner (load-time) option (default 4) that makes a GGUF model flagged ``mtp`` speculate:
  decode runs faster and the log gets llama-server acceptance lines, in the old form
  `draft acceptance rate = ...` before 0.33.2 and the new one (llama.cpp PR #24536)
  `draft acceptance = ... (... accepted / ... generated), mean len = ...` from 0.33.2.
- Reloads (ollama-api.md "Read first" 2-3): a request whose load-time options
  (`draft_num_predict`, `num_ctx`) differ from the loaded runner's restarts it: the load
  (``FakeModel.load_s``) counts in that request's `load_duration`, and each GGUF start
  logs `msg="starting llama-server" cmd="…"` with `--spec-type draft-mtp
  --spec-draft-n-max N` when it speculates.
- MLX (safetensors models, item 4): `draft_num_predict` is not consulted; a model with a
  draft head (``mtp``) speculates on every request, the baseline included, unless it asks
  for `logprobs`/`top_logprobs`; the log gets `msg="speculative decode stats"` lines.
- Synthetic acceptance (item 5): ``spec_synth_len`` set puts `--spec-synth-len N` on the
  starting line (``synth_on_cmdline``; otherwise it came from the environment and only
  the warning shows) and llama-server's real warning line
  (tests/fixtures/llama_server/synthetic-warning.txt); every drafted token is accepted.
Fault knobs (attributes, settable while running): ``error_mid_stream``,
``end_without_done``, ``stall_s``, ``die_after_generates`` and ``kill()``.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.fakeollama.handler import Handler, Server
from tests.fakeollama.model import (
    FakeModel,
    Loaded,
    default_models,
    log_time,
    normalize,
    version_tuple,
)


@dataclass
class FakeOllama:
    version: str = "0.33.1"
    models: list[FakeModel] = field(default_factory=default_models)
    log_path: Path | None = None
    pullable: list[FakeModel] = field(default_factory=list)
    gpu_fraction: float = 1.0
    # fault knobs
    error_mid_stream: str | None = None
    error_after_tokens: int = 3
    end_without_done: bool = False
    stall_s: float = 0.0
    die_after_generates: int | None = None
    log_delay_s: float = 0.0  # speculation lines reach the log this long after the response
    spec_synth_len: int | None = None  # LLAMA_ARG_SPEC_SYNTH_LEN / --spec-synth-len
    synth_on_cmdline: bool = True

    def __post_init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.generate_count = 0
        self._loaded: dict[str, Loaded] = {}
        self._lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._late_done = threading.Condition()
        self._late_pending = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._task = 0
        self.dead = False

    # --- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the server first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> FakeOllama:
        handler = type("Handler", (Handler,), {"fake": self})
        self._server = Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self.log("INFO", "routes.go:1951", "server config",
                 f'env="map[OLLAMA_HOST:http://127.0.0.1:{self.port}]"')
        self.log("INFO", "routes.go:2001",
                 f"Listening on 127.0.0.1:{self.port} (version {self.version})")
        return self

    def kill(self) -> None:
        """Stop listening at once, like a killed process (later connects are refused)."""
        self.dead = True
        server = self._server
        if server is not None:
            # Refuse new connections now; the serve loop winds down in the background.
            try:
                server.socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            server.socket.close()
            threading.Thread(target=self._close, args=(server,), daemon=True).start()

    @staticmethod
    def _close(server: ThreadingHTTPServer) -> None:
        server.shutdown()
        server.server_close()

    def stop(self) -> None:
        if self._server is not None and not self.dead:
            self.dead = True
            self._close(self._server)

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- state -------------------------------------------------------------------------

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        return version_tuple(self.version)

    @property
    def knows_draft_num_predict(self) -> bool:
        return self.version_tuple >= (0, 30, 0)

    @property
    def new_acceptance_line(self) -> bool:
        return self.version_tuple >= (0, 33, 2)

    def starting_line(self, model: FakeModel, num_ctx: int, dnp: int) -> None:
        """Ollama's log line for a llama-server start (llm/llama_server.go:433)."""
        cmd = (f"/usr/local/lib/ollama/llama-server --model /root/.ollama/models/blobs/"
               f"sha256-{model.digest} --ctx-size {num_ctx} --batch-size 512 "
               f"--n-gpu-layers 999 --threads 8 --no-mmap --parallel 1 --port 39521")
        if model.mtp and dnp > 0:
            cmd += f" --spec-type draft-mtp --spec-draft-n-max {dnp} --spec-draft-backend-sampling"
        if self.spec_synth_len is not None and self.synth_on_cmdline:
            cmd += f" --spec-synth-len {self.spec_synth_len}"
        self.log("INFO", "llama_server.go:433", "starting llama-server", f'cmd="{cmd}"')
        if self.spec_synth_len is not None:  # llama-server's own warning (verbatim form)
            self.log_raw("0.00.171.700 W spec common_specu: synthetic speculative acceptance "
                         "is enabled for benchmarking; generated output is not valid")

    def find(self, name: str) -> FakeModel | None:
        wanted = normalize(name)
        return next((m for m in self.models if normalize(m.name) == wanted), None)

    def loaded_models(self) -> list[Loaded]:
        now = datetime.now(UTC)
        with self._lock:
            for key, entry in list(self._loaded.items()):
                if entry.expires_at is not None and entry.expires_at <= now:
                    del self._loaded[key]
            return list(self._loaded.values())

    def unload_all(self) -> None:
        with self._lock:
            self._loaded.clear()

    def log(self, level: str, source: str, msg: str, attrs: str = "") -> None:
        self.log_raw(f'time={log_time()} level={level} source={source} msg="{msg}"'
                     + (f" {attrs}" if attrs else ""))

    def log_raw(self, line: str) -> None:
        if self.log_path is None:
            return
        with self._log_lock, self.log_path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    def next_task(self) -> int:
        with self._lock:
            self._task += 1
            return self._task

    # Late log lines (``log_delay_s``) still to be written: a test can wait for them as a
    # condition instead of trusting that a timer thread ran on time on a loaded machine.
    def _late_line_scheduled(self) -> None:
        with self._late_done:
            self._late_pending += 1

    def _late_line_written(self) -> None:
        with self._late_done:
            self._late_pending -= 1
            self._late_done.notify_all()

    def wait_for_late_lines(self, timeout_s: float = 10.0) -> bool:
        """True once every late line scheduled so far is in the log."""
        with self._late_done:
            return self._late_done.wait_for(lambda: self._late_pending == 0, timeout_s)
