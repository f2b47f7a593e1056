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

import hashlib
import json
import math
import random
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_INT_OPTIONS = {"num_keep", "seed", "num_predict", "top_k", "repeat_last_n", "num_ctx",
                "num_batch", "num_gpu", "main_gpu", "num_thread"}
_FLOAT_OPTIONS = {"min_p", "typical_p", "top_p", "temperature", "repeat_penalty",
                  "presence_penalty", "frequency_penalty"}
_BOOL_OPTIONS = {"use_mmap"}
_VOCAB = ["def", " merge", "_dicts", "(*", "dicts", ")", " ->", " dict", ":", "\n", "    ",
          "result", " =", " {}", " for", " d", " in", " result", ".update", "(d", ")\n",
          " return", " typing", " import", " Any", "[str", ",", " Any]", " #", " keys",
          " later", " wins", "```", "python", " values", " merged", " the", " a"]


def _version_tuple(text: str) -> tuple[int, int, int]:
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return (0, 0, 0)
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _log_time() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def _normalize(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


@dataclass
class FakeModel:
    name: str
    size: int = 400_000_000
    family: str = "qwen3"
    parameter_size: str = "14.8B"
    quantization: str = "Q4_K_M"
    format: str = "gguf"
    mtp: bool = False
    tokens_per_s: float = 10_000.0
    prompt_tokens_per_s: float = 50_000.0
    load_s: float = 0.0
    natural_tokens: int = 400
    acceptance: float = 0.75
    context_length: int = 40960
    # Added to the accepted count its log lines claim: a log that says more tokens were
    # accepted than generated (a broken or shared log), which no rule may call confirmed.
    inflate_accepted: int = 0

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"fake-model:{self.name}".encode()).hexdigest()

    def details(self) -> dict[str, Any]:
        return {"parent_model": "", "format": self.format, "family": self.family,
                "families": [self.family], "parameter_size": self.parameter_size,
                "quantization_level": self.quantization}


def default_models() -> list[FakeModel]:
    """The hardnumbers-m2 set: qwen3:14b and the two qwen2.5 drafts."""
    return [
        FakeModel("qwen3:14b"),
        FakeModel("qwen2.5:0.5b", size=397_821_319, family="qwen2", parameter_size="494.03M"),
        FakeModel("qwen2.5:1.5b", size=986_061_892, family="qwen2", parameter_size="1.5B"),
    ]


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Loaded:
    model: FakeModel
    expires_at: datetime | None
    num_ctx: int
    draft_num_predict: int | None = None


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
        self._loaded: dict[str, _Loaded] = {}
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
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = _Server(("127.0.0.1", 0), handler)
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
        return _version_tuple(self.version)

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
        wanted = _normalize(name)
        return next((m for m in self.models if _normalize(m.name) == wanted), None)

    def loaded_models(self) -> list[_Loaded]:
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
        self.log_raw(f'time={_log_time()} level={level} source={source} msg="{msg}"'
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


def _parse_keep_alive(value: Any) -> timedelta | None:
    """None = forever; raises _BadRequest on a bad duration string."""
    if value is None:
        return timedelta(minutes=5)
    if isinstance(value, bool):
        raise _BadRequest(400, "json: cannot unmarshal bool into Go value of type string")
    if isinstance(value, int | float):
        return None if value < 0 else timedelta(seconds=value)
    if isinstance(value, str):
        total = 0.0
        parts = re.findall(r"(-?\d+(?:\.\d+)?)(ns|us|ms|s|m|h)", value)
        if not parts or "".join(a + b for a, b in parts) != value:
            raise _BadRequest(400, f'time: invalid duration "{value}"')
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
        for number, unit in parts:
            total += float(number) * scale[unit]
        return None if total < 0 else timedelta(seconds=total)
    raise _BadRequest(400, "json: cannot unmarshal keep_alive")


def _check_options(fake: FakeOllama, options: dict[str, Any]) -> None:
    int_options = set(_INT_OPTIONS)
    if fake.knows_draft_num_predict:
        int_options.add("draft_num_predict")
    for key, value in options.items():
        if key in int_options:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            kind = "integer"
        elif key in _FLOAT_OPTIONS:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            kind = "float32"
        elif key in _BOOL_OPTIONS:
            ok, kind = isinstance(value, bool), "boolean"
        elif key == "stop":
            ok, kind = isinstance(value, list) and all(isinstance(v, str) for v in value), "array"
        else:
            fake.log("WARN", "types.go:835", "invalid option provided", f"option={key}")
            continue
        if not ok:
            raise _BadRequest(500, f'option "{key}" must be of type {kind}')


def _tokens(model: FakeModel, prompt: str, options: dict[str, Any], count: int) -> list[str]:
    temperature = options.get("temperature", 0.8)
    seed = options.get("seed", -1)
    if temperature == 0:
        rng = random.Random(hashlib.sha256(f"{model.name}\0{prompt}".encode()).digest())
    elif isinstance(seed, int | float) and seed >= 0:
        rng = random.Random(f"{model.name}\0{prompt}\0{seed}")
    else:
        rng = random.Random()
    return [rng.choice(_VOCAB) for _ in range(count)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (or a kill()) is normal here; anything else is a bug.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError | OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOllama
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "fakeollama"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return

    # --- plumbing ----------------------------------------------------------------------

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, payload: dict[str, Any]) -> None:
        line = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _cut(self) -> None:
        """Drop the connection without finishing the response (a killed server)."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            raise _BadRequest(400, "missing request body")
        try:
            data = json.loads(raw)
        except ValueError:
            raise _BadRequest(400, "invalid character in request body") from None
        if not isinstance(data, dict):
            raise _BadRequest(400, "json: cannot unmarshal into Go value of type request")
        return data

    def _gin(self, status: int, started: float) -> None:
        took = time.perf_counter() - started
        stamp = datetime.now().strftime("%Y/%m/%d - %H:%M:%S")
        self.fake.log_raw(f'[GIN] {stamp} | {status} | {took * 1000:10.4f}ms |       127.0.0.1 '
                          f'| {self.command:<7} "{self.path}"')

    # --- routing -----------------------------------------------------------------------

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def parse_request(self) -> bool:
        # Ollama's durations start at handler entry, before the body is read and decoded;
        # Go parses headers in microseconds, http.server takes far longer, so the clock
        # starts as soon as the request line is in.
        self.entered_ns = time.monotonic_ns()
        return super().parse_request()

    def _route(self, method: str) -> None:
        started = time.perf_counter()
        routes = {
            ("GET", "/"): self._root,
            ("GET", "/api/version"): self._version,
            ("GET", "/api/tags"): self._tags,
            ("GET", "/api/ps"): self._ps,
            ("POST", "/api/show"): self._show,
            ("POST", "/api/pull"): self._pull,
            ("POST", "/api/generate"): self._generate,
        }
        handler = routes.get((method, self.path))
        body: Any = None
        try:
            if handler is None:
                self._send_text(404 if (("GET", self.path) not in routes and
                                        ("POST", self.path) not in routes) else 405,
                                "404 page not found")
                return
            if method == "POST":
                body = self._body()
            self.fake.requests.append((method, self.path, body))
            status = handler(body)
            self._gin(status, started)
        except _BadRequest as exc:
            self._send_json(exc.status, {"error": exc.message})
            self._gin(exc.status, started)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- endpoints ---------------------------------------------------------------------

    def _root(self, _: Any) -> int:
        self._send_text(200, "Ollama is running")
        return 200

    def _version(self, _: Any) -> int:
        self._send_json(200, {"version": self.fake.version})
        return 200

    def _tags(self, _: Any) -> int:
        self._send_json(200, {"models": [
            {"name": _normalize(m.name), "model": _normalize(m.name),
             "modified_at": "2026-11-02T10:11:12.123456789+01:00", "size": m.size,
             "digest": m.digest, "details": m.details()}
            for m in self.fake.models
        ]})
        return 200

    def _ps(self, _: Any) -> int:
        loaded = sorted(self.fake.loaded_models(),
                        key=lambda e: e.expires_at or datetime.max.replace(tzinfo=UTC),
                        reverse=True)
        far = datetime.now(UTC) + timedelta(days=365 * 292)
        self._send_json(200, {"models": [
            {"name": _normalize(e.model.name), "model": _normalize(e.model.name),
             "size": e.model.size, "digest": e.model.digest, "details": e.model.details(),
             "expires_at": (e.expires_at or far).isoformat(),
             "size_vram": int(e.model.size * self.fake.gpu_fraction),
             "context_length": e.num_ctx}
            for e in loaded
        ]})
        return 200

    def _show(self, body: dict[str, Any]) -> int:
        name = body.get("model") or body.get("name")
        if not isinstance(name, str) or not name:
            raise _BadRequest(400, "model is required")
        model = self.fake.find(name)
        if model is None:
            raise _BadRequest(404, f"model '{name}' not found")
        arch = model.family
        info: dict[str, Any] = {
            "general.architecture": arch,
            "general.parameter_count": 14_768_307_200,
            "general.file_type": 15,
            f"{arch}.context_length": model.context_length,
            f"{arch}.block_count": 40,
        }
        if model.mtp:
            info[f"{arch}.nextn_predict_layers"] = 1
        self._send_json(200, {
            "license": "Apache 2.0", "modelfile": f"FROM {model.name}\n",
            "parameters": "temperature 0.6\ntop_k 20", "template": "{{ .Prompt }}",
            "details": model.details(), "model_info": info,
            "capabilities": ["completion"], "modified_at": "2026-11-02T10:11:12+01:00",
        })
        return 200

    def _pull(self, body: dict[str, Any]) -> int:
        name = body.get("model") or body.get("name")
        if not isinstance(name, str) or not name:
            raise _BadRequest(400, "model is required")
        self._start_stream()
        self._chunk({"status": "pulling manifest"})
        model = next((m for m in self.fake.pullable if _normalize(m.name) == _normalize(name)),
                     None)
        if model is None:
            self._chunk({"error": "pull model manifest: file does not exist"})
            self._end_stream()
            return 200
        digest = model.digest
        for step in range(5):
            self._chunk({"status": f"pulling {digest[:12]}", "digest": f"sha256:{digest}",
                         "total": model.size, "completed": model.size * step // 4})
            time.sleep(0.005)
        for status in ("verifying sha256 digest", "writing manifest", "removing unused layers"):
            self._chunk({"status": status})
        if self.fake.find(model.name) is None:
            self.fake.models.append(model)
        self._chunk({"status": "success"})
        self._end_stream()
        return 200

    def _generate(self, body: dict[str, Any]) -> int:
        fake = self.fake
        start_ns = self.entered_ns
        name = body.get("model")
        if not isinstance(name, str) or not name:
            raise _BadRequest(400, "model is required")
        model = fake.find(name)
        if model is None:
            raise _BadRequest(404, f"model '{name}' not found")
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise _BadRequest(400, "json: cannot unmarshal options")
        keep = _parse_keep_alive(body.get("keep_alive"))
        _check_options(fake, options)
        with fake._lock:
            fake.generate_count += 1
            ordinal = fake.generate_count
        if fake.stall_s:
            time.sleep(fake.stall_s)
        # load: a model not loaded, or loaded with other load-time options, (re)starts
        key = _normalize(model.name)
        num_ctx = int(options.get("num_ctx", 4096))
        mlx = model.format == "safetensors"
        dnp = int(options.get("draft_num_predict", 4)) if fake.knows_draft_num_predict else 0
        runner_dnp = None if mlx else dnp  # the MLX runner never reads draft_num_predict
        current = {_normalize(e.model.name): e for e in fake.loaded_models()}.get(key)
        if current is None or (current.num_ctx, current.draft_num_predict) != (num_ctx,
                                                                               runner_dnp):
            time.sleep(model.load_s)
            if fake.knows_draft_num_predict and not mlx:
                fake.starting_line(model, num_ctx, dnp)
        with fake._lock:
            fake._loaded[key] = _Loaded(model, None if keep is None else
                                        datetime.now(UTC) + keep, num_ctx, runner_dnp)
        load_ns = time.monotonic_ns() - start_ns
        prompt = body.get("prompt") or ""
        stream = body.get("stream", True) is not False
        if not prompt:
            final = {"model": name, "created_at": _now_rfc3339(), "response": "", "done": True,
                     "done_reason": "load"}
            self._send_json(200, final)
            return 200
        # prompt evaluation
        prompt_tokens = max(1, len(prompt) // 4)
        time.sleep(prompt_tokens / model.prompt_tokens_per_s)
        prompt_ns = time.monotonic_ns() - start_ns - load_ns
        # decode
        num_predict = int(options.get("num_predict", -1))
        count = model.natural_tokens if num_predict < 0 else min(num_predict, model.natural_tokens)
        done_reason = "length" if 0 <= num_predict < model.natural_tokens else "stop"
        if mlx and fake.knows_draft_num_predict:
            # The MLX runner's own draft depth (adaptive in Ollama; fixed at 4 here), and no
            # speculation when logprobs are asked for (x/mlxrunner/speculate.go:117-126).
            dnp = 0 if body.get("logprobs") or body.get("top_logprobs") else 4
        speculating = model.mtp and dnp > 0
        if speculating and fake.spec_synth_len is not None and not mlx:
            iterations_override = True
        else:
            iterations_override = False
        acceptance = 1.0 if iterations_override else model.acceptance  # synthetic: all
        iterations = math.ceil(count / (1 + acceptance * dnp)) if speculating else count
        speed = model.tokens_per_s
        if speculating:
            speed *= (count / max(iterations, 1)) / (1 + 0.1 * dnp)
        tokens = _tokens(model, prompt, options, count)
        die = fake.die_after_generates is not None and ordinal >= fake.die_after_generates
        base = {"model": name, "created_at": ""}
        if not stream:
            time.sleep(count / speed)
            eval_ns = int(count / speed * 1e9)
            self._log_speculation(model, speculating, count, iterations, dnp)
            final = self._final(base, "".join(tokens), done_reason, start_ns, load_ns,
                                prompt_tokens, prompt_ns, count, eval_ns)
            self._send_json(200, final)
            return 200
        self._start_stream()
        eval_start = time.monotonic_ns()
        for i, token in enumerate(tokens):
            due = eval_start + int((i + 1) / speed * 1e9)
            delay = (due - time.monotonic_ns()) / 1e9
            if delay > 0:
                time.sleep(delay)
            if die and i == 2:
                fake.kill()
                self._cut()
                return 200
            if fake.error_mid_stream is not None and i == fake.error_after_tokens:
                self._chunk({"error": fake.error_mid_stream})
                self._end_stream()
                return 200
            self._chunk({**base, "created_at": _now_rfc3339(), "response": token, "done": False})
        eval_ns = min(time.monotonic_ns() - eval_start, int(count / speed * 1e9))
        if fake.end_without_done:
            self._end_stream()
            return 200
        self._log_speculation(model, speculating, count, iterations, dnp)
        self._chunk(self._final(base, "", done_reason, start_ns, load_ns, prompt_tokens,
                                prompt_ns, count, eval_ns))
        self._end_stream()
        return 200

    def _final(self, base: dict[str, Any], response: str, done_reason: str, start_ns: int,
               load_ns: int, prompt_tokens: int, prompt_ns: int, count: int,
               eval_ns: int) -> dict[str, Any]:
        final = {**base, "created_at": _now_rfc3339(), "response": response, "done": True,
                 "done_reason": done_reason, "context": [1, 2, 3]}
        final.update(total_duration=time.monotonic_ns() - start_ns, load_duration=load_ns,
                     prompt_eval_count=prompt_tokens, prompt_eval_duration=prompt_ns,
                     eval_count=count, eval_duration=eval_ns)
        return final

    def _log_speculation(self, model: FakeModel, speculating: bool, count: int,
                         iterations: int, dnp: int) -> None:
        if not speculating:
            return
        if self.fake.log_delay_s > 0:  # like Ollama forwarding llama-server's output late
            self.fake._late_line_scheduled()

            def late() -> None:
                try:
                    self._write_speculation(model, count, iterations, dnp)
                finally:
                    self.fake._late_line_written()

            threading.Timer(self.fake.log_delay_s, late).start()
        else:
            self._write_speculation(model, count, iterations, dnp)

    def _write_speculation(self, model: FakeModel, count: int, iterations: int,
                           dnp: int) -> None:
        fake = self.fake
        drafted = iterations * dnp
        accepted = max(0, count - iterations) + model.inflate_accepted
        rate = accepted / drafted if drafted else 0.0
        if model.format == "safetensors":
            fake.log("INFO", "speculate_stats.go:61", "speculative decode stats",
                     f"iterations={iterations} drafted={drafted} accepted={accepted} "
                     f"acceptance={rate:.2f} avg_draft={dnp:.2f} max_draft={dnp} "
                     f"avg_accepted={accepted / max(iterations, 1):.2f} depth_over_time=[]")
        elif fake.new_acceptance_line:  # one line, as llama.cpp 0c1e57098 prints it
            task = fake.next_task()
            fake.log_raw(f"slot print_timing: id  0 | task {task} | draft acceptance = "
                         f"{rate:.5f} ({accepted:5d} accepted / {drafted:5d} generated), "
                         f"mean len = {count / max(iterations, 1):5.2f}")
        else:
            task = fake.next_task()
            fake.log_raw(f"slot print_timing: id  0 | task {task} | ")
            fake.log_raw(f"draft acceptance rate = {rate:.5f} ({accepted:5d} accepted / "
                         f"{drafted:5d} generated)")
            fake.log_raw(f"statistics mtp: #calls(b,g,a) = 1 {iterations} {iterations}, "
                         f"#gen tokens = {drafted}, #acc tokens = {accepted}")
