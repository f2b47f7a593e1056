"""An LM Studio test server (http.server in a thread on 127.0.0.1; no extra dependency).

Every field follows the lmstudio-ai/docs repository (commit c6854fb), file by file:

- ``GET /api/v1/models`` — ``1_developer/2_rest/list.md``: ``{"models": [...]}``, each with
  ``type``, ``publisher``, ``key``, ``display_name``, ``architecture``, ``quantization``
  (``name``, ``bits_per_weight``), ``size_bytes``, ``params_string``, ``loaded_instances``
  (``id``, ``config``: ``context_length``, ``eval_batch_size``, ``parallel``,
  ``flash_attention``, ``offload_kv_cache_to_gpu``), ``max_context_length``, ``format``
  ("gguf" | "mlx"), ``capabilities`` (``vision``, ``trained_for_tool_use``),
  ``description``.
- ``POST /api/v0/chat/completions`` — ``1_developer/2_rest/endpoints.mdx``: the response's
  ``id``, ``object`` "chat.completion", ``created``, ``model``, ``choices`` (``index``,
  ``logprobs``, ``finish_reason``, ``message``: ``role``, ``content``), ``usage``
  (``prompt_tokens``, ``completion_tokens``, ``total_tokens``), ``stats``
  (``tokens_per_second``, ``time_to_first_token``, ``generation_time``, ``stop_reason``
  "eosFound" | "maxPredictedTokensReached"), ``model_info`` (``arch``, ``quant``,
  ``format``, ``context_length``) and ``runtime`` (``name``, ``version``,
  ``supported_formats``; the documented values). The request's parameters are those
  ``1_developer/3_openai-compat/chat-completions.md`` lists (``max_tokens``,
  ``temperature``, ``top_p``, ``top_k``, ``repeat_penalty``, ``seed``, ``stream``).
- Speculative decoding — ``1_developer/api-changelog.md`` (0.3.10): a top-level
  ``draft_model`` request field; the response's ``stats`` then add ``draft_model``,
  ``total_draft_tokens_count``, ``accepted_draft_tokens_count``,
  ``rejected_draft_tokens_count`` and ``ignored_draft_tokens_count``.
  ``0_app/5_advanced/speculative-decoding.md``: the draft must share the main model's
  vocabulary; the main model accepts only the tokens it would have generated and adds one
  of its own after the last accepted one, so the output is the same with or without a
  draft; ``2_typescript/2_llm-prediction/speculative-decoding.md``: the draft need not be
  loaded first.

What the docs leave open, the fake decides (docs/run.md says so too): the HTTP status and
body of an error (here 404 / 400 with ``{"error": "..."}``); what happens to a draft whose
vocabulary differs (here 400); whether a draft chosen in the app's sidebar also applies to
API requests without ``draft_model`` (knob ``sidebar_draft``: it does); and versions
before 0.3.10 (knob ``honours_draft_model=False``: the field is ignored, no draft stats).
Generation sleeps the times it reports, so a client's wall time always covers them.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# 1_developer/2_rest/endpoints.mdx, the "runtime" object of both example responses
RUNTIME = {"name": "llama.cpp-mac-arm64-apple-metal-advsimd", "version": "1.3.0",
           "supported_formats": ["gguf"]}
_WORDS = ["def", " merge", "_dicts", "(*", "dicts", ")", " ->", " dict", ":", "\n", "    ",
          "result", " =", " {}", " for", " d", " in", " result", ".update", "(d", ")\n",
          " return"]


@dataclass
class FakeLMModel:
    key: str
    architecture: str = "qwen2"
    params_string: str = "14B"
    size_bytes: int = 8_990_000_000
    quantization: str = "Q4_K_M"
    format: str = "gguf"
    vocabulary: str = "qwen2.5"  # drafts must share it (speculative-decoding.md)
    loaded_context: int | None = None  # a loaded instance with this context_length

    def listed(self) -> dict[str, Any]:
        instances = [] if self.loaded_context is None else [{
            "id": self.key, "config": {"context_length": self.loaded_context,
                                       "eval_batch_size": 512, "parallel": 4,
                                       "flash_attention": True,
                                       "offload_kv_cache_to_gpu": True}}]
        return {"type": "llm", "publisher": "lmstudio-community", "key": self.key,
                "display_name": self.key, "architecture": self.architecture,
                "quantization": {"name": self.quantization, "bits_per_weight": 4},
                "size_bytes": self.size_bytes, "params_string": self.params_string,
                "loaded_instances": instances, "max_context_length": 32768,
                "format": self.format,
                "capabilities": {"vision": False, "trained_for_tool_use": True},
                "description": None}


def default_lm_models() -> list[FakeLMModel]:
    return [FakeLMModel("qwen2.5-14b-instruct"),
            FakeLMModel("qwen2.5-0.5b-instruct", params_string="0.5B", size_bytes=397_000_000),
            FakeLMModel("qwen2.5-1.5b-instruct", params_string="1.5B", size_bytes=986_000_000),
            FakeLMModel("llama-3.2-1b-instruct", architecture="llama", params_string="1B",
                        size_bytes=770_000_000, vocabulary="llama3")]


@dataclass
class FakeLMStudio:
    models: list[FakeLMModel] = field(default_factory=default_lm_models)
    # The main model's decode rate alone. Fast, because the fake sleeps the times it
    # reports (a run of lmstudio-draft sleeps about 1.9 s at 3,000, 3.4 s at 1,500); a
    # draft's speedup (rounds x 1.3 passes for the tokens) does not depend on it. Its
    # drafted rate, 3.1 x this, stays under the server's plausible 10,000 tok/s.
    tps: float = 3000.0
    draft_round: int = 4  # tokens drafted per round; all but one accepted (a good draft)
    honours_draft_model: bool = True  # False: LM Studio before 0.3.10
    sidebar_draft: str | None = None  # a draft set in the app, applied to every request

    def __post_init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the server first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeLMStudio:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeLMStudio:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def find(self, key: object) -> FakeLMModel | None:
        return next((m for m in self.models if m.key == key), None)

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        model = self.find(body.get("model"))
        if model is None:
            return 404, {"error": f"model '{body.get('model')}' not found"}
        draft_key = body.get("draft_model") if self.honours_draft_model else None
        draft_key = draft_key or self.sidebar_draft
        draft = self.find(draft_key) if draft_key else None
        if draft_key and draft is None:
            return 404, {"error": f"draft model '{draft_key}' not found"}
        if draft is not None and draft.vocabulary != model.vocabulary:
            return 400, {"error": f"draft model '{draft.key}' is incompatible with "
                                  f"'{model.key}'"}
        limit = body.get("max_tokens")
        count = limit if isinstance(limit, int) and limit > 0 else 200
        messages = body.get("messages") or []
        prompt = json.dumps(messages, sort_keys=True)
        # Greedy output depends on the main model and the prompt only (lossless drafting).
        seed = int(hashlib.sha256(f"{model.key}|{prompt}".encode()).hexdigest(), 16)
        text = "".join(_WORDS[(seed >> (i % 200)) % len(_WORDS)] for i in range(count))
        prompt_tokens = max(1, len(prompt) // 4)
        ttft = round(prompt_tokens / 6000 + 0.01, 3)
        stats: dict[str, Any] = {"stop_reason": "maxPredictedTokensReached"}
        if draft is None:
            generation = count / self.tps
        else:
            rounds = math.ceil(count / self.draft_round)
            drafted = rounds * self.draft_round
            accepted = count - rounds  # each round: the accepted drafts, then one of its own
            generation = rounds * 1.3 / self.tps  # a verifying pass costs more than one
            stats.update(draft_model=draft.key, total_draft_tokens_count=drafted,
                         accepted_draft_tokens_count=accepted,
                         rejected_draft_tokens_count=drafted - accepted,
                         ignored_draft_tokens_count=0)
        generation = round(generation, 3) or 0.001
        time.sleep(ttft + generation)
        stats = {"tokens_per_second": count / generation, "time_to_first_token": ttft,
                 "generation_time": generation, **stats}
        return 200, {
            "id": f"chatcmpl-{seed % 10**12:x}", "object": "chat.completion",
            "created": int(time.time()), "model": model.key,
            "choices": [{"index": 0, "logprobs": None, "finish_reason": "length",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": count,
                      "total_tokens": prompt_tokens + count},
            "stats": stats,
            "model_info": {"arch": model.architecture, "quant": model.quantization,
                           "format": model.format, "context_length": 4096},
            "runtime": RUNTIME,
        }


class _Handler(BaseHTTPRequestHandler):
    fake: FakeLMStudio
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.fake.requests.append(("GET", self.path, None))
        if self.path == "/api/v1/models":
            self._send(200, {"models": [m.listed() for m in self.fake.models]})
        else:
            self._send(404, {"error": f"unexpected endpoint {self.path}"})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            self._send(400, {"error": "invalid JSON"})
            return
        self.fake.requests.append(("POST", self.path, body))
        if self.path != "/api/v0/chat/completions" or not isinstance(body, dict):
            self._send(404, {"error": f"unexpected endpoint {self.path}"})
            return
        self._send(*self.fake.complete(body))
