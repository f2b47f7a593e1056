"""The fake Ollama's HTTP side: one handler per request, its routes and its streaming
(server.py says what the fake reproduces)."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from tests.fakeollama.model import (
    BOOL_OPTIONS,
    FLOAT_OPTIONS,
    INT_OPTIONS,
    BadRequest,
    FakeModel,
    Loaded,
    greedy_tokens,
    normalize,
    now_rfc3339,
    parse_keep_alive,
)

if TYPE_CHECKING:
    from tests.fakeollama.server import FakeOllama


def check_options(fake: FakeOllama, options: dict[str, Any]) -> None:
    int_options = set(INT_OPTIONS)
    if fake.knows_draft_num_predict:
        int_options.add("draft_num_predict")
    for key, value in options.items():
        if key in int_options:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            kind = "integer"
        elif key in FLOAT_OPTIONS:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            kind = "float32"
        elif key in BOOL_OPTIONS:
            ok, kind = isinstance(value, bool), "boolean"
        elif key == "stop":
            ok, kind = isinstance(value, list) and all(isinstance(v, str) for v in value), "array"
        else:
            fake.log("WARN", "types.go:835", "invalid option provided", f"option={key}")
            continue
        if not ok:
            raise BadRequest(500, f'option "{key}" must be of type {kind}')


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (or a kill()) is normal here; anything else is a bug.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError | OSError):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
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
            raise BadRequest(400, "missing request body")
        try:
            data = json.loads(raw)
        except ValueError:
            raise BadRequest(400, "invalid character in request body") from None
        if not isinstance(data, dict):
            raise BadRequest(400, "json: cannot unmarshal into Go value of type request")
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
        except BadRequest as exc:
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
            {"name": normalize(m.name), "model": normalize(m.name),
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
            {"name": normalize(e.model.name), "model": normalize(e.model.name),
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
            raise BadRequest(400, "model is required")
        model = self.fake.find(name)
        if model is None:
            raise BadRequest(404, f"model '{name}' not found")
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
            raise BadRequest(400, "model is required")
        self._start_stream()
        self._chunk({"status": "pulling manifest"})
        model = next((m for m in self.fake.pullable if normalize(m.name) == normalize(name)),
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
            raise BadRequest(400, "model is required")
        model = fake.find(name)
        if model is None:
            raise BadRequest(404, f"model '{name}' not found")
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise BadRequest(400, "json: cannot unmarshal options")
        keep = parse_keep_alive(body.get("keep_alive"))
        check_options(fake, options)
        with fake._lock:
            fake.generate_count += 1
            ordinal = fake.generate_count
        if fake.stall_s:
            time.sleep(fake.stall_s)
        # load: a model not loaded, or loaded with other load-time options, (re)starts
        key = normalize(model.name)
        num_ctx = int(options.get("num_ctx", 4096))
        mlx = model.format == "safetensors"
        dnp = int(options.get("draft_num_predict", 4)) if fake.knows_draft_num_predict else 0
        runner_dnp = None if mlx else dnp  # the MLX runner never reads draft_num_predict
        current = {normalize(e.model.name): e for e in fake.loaded_models()}.get(key)
        if current is None or (current.num_ctx, current.draft_num_predict) != (num_ctx,
                                                                               runner_dnp):
            time.sleep(model.load_s)
            if fake.knows_draft_num_predict and not mlx:
                fake.starting_line(model, num_ctx, dnp)
        with fake._lock:
            fake._loaded[key] = Loaded(model, None if keep is None else
                                        datetime.now(UTC) + keep, num_ctx, runner_dnp)
        load_ns = time.monotonic_ns() - start_ns
        prompt = body.get("prompt") or ""
        stream = body.get("stream", True) is not False
        if not prompt:
            final = {"model": name, "created_at": now_rfc3339(), "response": "", "done": True,
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
        tokens = greedy_tokens(model, prompt, options, count)
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
            self._chunk({**base, "created_at": now_rfc3339(), "response": token, "done": False})
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
        final = {**base, "created_at": now_rfc3339(), "response": response, "done": True,
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
