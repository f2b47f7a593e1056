"""LM Studio's REST API, as much as a run needs, from the lmstudio-ai/docs repository:

- ``GET /api/v1/models`` (``1_developer/2_rest/list.md``, LM Studio 0.4.0): every model
  on disk, with ``key``, ``type``, ``architecture``, ``quantization.name``, ``size_bytes``,
  ``params_string``, ``format`` ("gguf" | "mlx") and ``loaded_instances[].config.
  context_length``.
- ``POST /api/v0/chat/completions`` (``1_developer/2_rest/endpoints.mdx``): a messages
  array in, the assistant's message out, with ``usage.prompt_tokens`` /
  ``completion_tokens``, ``stats.tokens_per_second`` / ``time_to_first_token`` /
  ``generation_time`` / ``stop_reason``, ``model_info`` and ``runtime.name`` /
  ``runtime.version``. A top-level ``draft_model`` field turns speculative decoding on, and
  the response's ``stats`` then carries ``draft_model``, ``total_draft_tokens_count``,
  ``accepted_draft_tokens_count``, ``rejected_draft_tokens_count`` and
  ``ignored_draft_tokens_count`` (``1_developer/api-changelog.md``, LM Studio 0.3.10).

The request is not streamed: the docs show ``stats`` on whole responses only. Every failure
leaves as a ``specsubmit.errors`` class; no httpx exception escapes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from specsubmit.engines.base import Generation
from specsubmit.engines.bounded import (
    MAX_ANSWER_BYTES,
    REQUEST_DEADLINE_S,
    PastDeadline,
    TooLong,
    read_bounded,
)
from specsubmit.errors import EngineError, EngineUnreachable
from specsubmit.outside_text import visible

JsonDict = dict[str, Any]
DEFAULT_URL = "http://127.0.0.1:1234"  # `lms server start`'s port (3_cli/1_serve)
# choices[].finish_reason -> the wire's done_reason (OpenAI's words are the wire's)
_DONE_REASON = {"stop": "stop", "length": "length"}


@dataclass(frozen=True)
class Reply:
    """One chat completion: the generation and what the response said about the engine."""

    generation: Generation
    runtime_name: str | None  # runtime.name, e.g. "llama.cpp-mac-arm64-apple-metal-advsimd"
    runtime_version: str | None  # runtime.version, e.g. "1.3.0"
    model_format: str | None  # model_info.format: "gguf" | "mlx"
    draft_model: str | None  # stats.draft_model: the draft the engine says it used


def _seconds_to_ns(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return round(value * 1e9)


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _text(value: object, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def reply_from(body: JsonDict, *, wall_s: float) -> Reply:
    """A chat completion's fields as a Generation (seconds -> integer nanoseconds).

    ``generation_time`` is the decode time (the docs' completions example: 9 tokens in
    0.156 s is its 57.69 tokens_per_second); ``time_to_first_token`` is the prompt's
    processing. The API reports no load time: whatever of the client's wall time the two do
    not account for (a model loaded for this request shows up there) is the load.
    """
    stats, usage = body.get("stats"), body.get("usage")
    choices = body.get("choices")
    if not isinstance(stats, dict) or not isinstance(usage, dict) or not isinstance(
            choices, list) or not choices or not isinstance(choices[0], dict):
        raise EngineError("LM Studio's response has no stats, usage or choices "
                          f"({visible(str(body), 160)})")
    eval_count = _count(usage.get("completion_tokens"))
    eval_ns = _seconds_to_ns(stats.get("generation_time"))
    prompt_ns = _seconds_to_ns(stats.get("time_to_first_token"))
    if eval_count is None or eval_ns is None:
        raise EngineError("LM Studio's response has no completion_tokens or generation_time "
                          f"({visible(str(stats), 160)})")
    served_ns = eval_ns + (prompt_ns or 0)
    load_ns = max(0, round(wall_s * 1e9) - served_ns)
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    runtime, model_info = body.get("runtime"), body.get("model_info")
    runtime = runtime if isinstance(runtime, dict) else {}
    model_info = model_info if isinstance(model_info, dict) else {}
    finish = choices[0].get("finish_reason")
    generation = Generation(
        wall_s=wall_s,
        ttft_s=prompt_ns / 1e9 if prompt_ns is not None else None,
        text=content if isinstance(content, str) else "",
        total_duration_ns=load_ns + served_ns,
        load_duration_ns=load_ns,
        prompt_eval_count=_count(usage.get("prompt_tokens")),
        prompt_eval_duration_ns=prompt_ns,
        eval_count=eval_count,
        eval_duration_ns=eval_ns,
        done_reason=_DONE_REASON.get(finish) if isinstance(finish, str) else None,
        draft_n=_count(stats.get("total_draft_tokens_count")),
        draft_accepted=_count(stats.get("accepted_draft_tokens_count")),
    )
    return Reply(generation, _text(runtime.get("name")), _text(runtime.get("version"), 40),
                 _text(model_info.get("format"), 32), _text(stats.get("draft_model"), 120))


class LMStudioApi:
    """One LM Studio server (``lms server start``) at ``base_url``."""

    def __init__(self, base_url: str, *, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, body: JsonDict | None = None) -> JsonDict:
        deadline = time.monotonic() + REQUEST_DEADLINE_S  # engines/bounded.py
        try:
            with self._http.stream(method, path, json=body) as response:
                failed = response.status_code >= 400  # its message: the first 64 KiB
                content = read_bounded(response, 64 * 1024 if failed else MAX_ANSWER_BYTES,
                                       deadline, cut=failed)
        except (PastDeadline, TooLong) as exc:
            what = ("did not finish answering" if isinstance(exc, PastDeadline)
                    else f"answered with more than {MAX_ANSWER_BYTES // 2**20} MiB to")
            raise EngineError(f"LM Studio at {self.base_url} {what} {path}") from None
        except httpx.ConnectError:
            raise EngineUnreachable(
                f"LM Studio is not answering at {self.base_url}: start its server with "
                "`lms server start` (or pass --engine-url)") from None
        except httpx.HTTPError as exc:
            raise EngineError(f"LM Studio at {self.base_url} failed: "
                              f"{visible(type(exc).__name__)}") from None
        if response.status_code >= 400:
            raise EngineError(f"LM Studio answered {response.status_code} to {path}: "
                              f"{visible(content, 200)}")
        try:
            data = json.loads(content)
        except ValueError:
            raise EngineError(f"LM Studio's answer to {path} is not JSON") from None
        if not isinstance(data, dict):
            raise EngineError(f"LM Studio's answer to {path} is not a JSON object")
        return data

    def models(self) -> list[JsonDict]:
        """``GET /api/v1/models``'s ``models`` (every model on disk, loaded or not)."""
        found = self._request("GET", "/api/v1/models").get("models")
        return [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []

    def chat(self, body: JsonDict) -> Reply:
        started = time.perf_counter()
        data = self._request("POST", "/api/v0/chat/completions", body)
        return reply_from(data, wall_s=time.perf_counter() - started)
