"""llama-server's HTTP API, as much as a run needs: /health, /props, /apply-template and a
streamed /completion whose final chunk carries ``timings`` (with ``draft_n`` and
``draft_n_accepted`` only when the request drafted).

Every failure leaves as a ``specsubmit.errors`` class; no httpx exception escapes. The
caller (the engine) turns a broken connection into ``EngineDied`` when the process is gone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from specsubmit.engines.base import Generation
from specsubmit.engines.bounded import (
    MAX_LINE_BYTES,
    REQUEST_DEADLINE_S,
    PastDeadline,
    TooLong,
    bounded_lines,
)
from specsubmit.errors import LlamaServerError
from specsubmit.outside_text import visible

JsonDict = dict[str, Any]

# llama-server's stop_type -> Ollama's done_reason words, so both engines read the same.
_DONE_REASON = {"limit": "length", "eos": "stop", "word": "stop"}
# Drafts past the answer's end: none at the token limit, because the pinned build never
# drafts past it (server-context.cpp get_n_draft_max caps each round's draft at the tokens
# left less one, and at the context left; common_speculative_draft truncates every spec
# type's draft to that). Measured with an identical copy as the draft at depth 8: 19 of 19
# accepted at 23 tokens, 43 of 43 at 50, 88 of 88 at 101, 176 of 176 at 200. An answer
# that ends at an end-of-generation token or a stop word ("eos", "word") may have drafted
# past it, and those tokens are verified like any other: counted as accepted when the
# target agrees, so the totals cannot tell them apart and the count is left unsaid.


class StreamBroken(LlamaServerError):
    """The connection failed or the stream ended without its final chunk."""


def _ms_to_ns(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return round(value * 1_000_000)


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def generation_from_final(final: JsonDict, *, wall_s: float, ttft_s: float | None,
                          text: str, token_ids: tuple[int, ...] | None = None) -> Generation:
    """The final chunk's timings as a Generation (llama-server's ms -> integer ns)."""
    timings = final.get("timings")
    if not isinstance(timings, dict):
        raise StreamBroken("llama-server's final chunk has no timings")
    prompt_ns = _ms_to_ns(timings.get("prompt_ms"))
    predicted_ns = _ms_to_ns(timings.get("predicted_ms"))
    predicted = _count(timings.get("predicted_n"))
    if predicted is None or predicted_ns is None:
        raise StreamBroken(f"llama-server's final chunk has bad timings: {timings!r:.120}")
    cache_n, prompt_n = _count(timings.get("cache_n")), _count(timings.get("prompt_n"))
    draft_n = _count(timings.get("draft_n"))
    accepted = _count(timings.get("draft_n_accepted"))
    stop_type = final.get("stop_type")
    return Generation(
        wall_s=wall_s,
        ttft_s=ttft_s,
        text=text,
        # The server was loaded before the first request: nothing here waited for a load.
        total_duration_ns=(prompt_ns or 0) + predicted_ns,
        load_duration_ns=0,
        # Ollama >= 0.30 reports the same: cache_n + prompt_n, prompt_ms, predicted_n/_ms.
        prompt_eval_count=(cache_n or 0) + prompt_n if prompt_n is not None else None,
        prompt_eval_duration_ns=prompt_ns,
        eval_count=predicted,
        eval_duration_ns=predicted_ns,
        done_reason=_DONE_REASON.get(str(stop_type), None) if stop_type else None,
        draft_n=draft_n if draft_n else None,
        draft_accepted=(accepted or 0) if draft_n else None,
        draft_past_end=0 if draft_n and stop_type == "limit" else None,
        token_ids=token_ids,
    )


class LlamaServerApi:
    def __init__(self, base_url: str, *, timeout_s: float, connect_timeout_s: float = 5.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url
        self._http = httpx.Client(
            base_url=base_url, timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            transport=transport, trust_env=False, headers={"User-Agent": "specsubmit"},
        )

    def close(self) -> None:
        self._http.close()

    def healthy(self) -> bool:
        """/health answers 503 while the model loads and 200 once it can serve."""
        try:
            return self._http.get("/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def _json(self, method: str, path: str, body: JsonDict | None = None) -> JsonDict:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise StreamBroken(f"llama-server did not answer {path}: {type(exc).__name__}"
                               ) from None
        if response.status_code != 200:
            raise LlamaServerError(
                f"llama-server answered HTTP {response.status_code} to {path}: "
                f"{visible(response.text, 160)}")
        try:
            data = response.json()
        except ValueError:
            raise LlamaServerError(f"llama-server's {path} is not JSON") from None
        if not isinstance(data, dict):
            raise LlamaServerError(f"llama-server's {path} is not a JSON object")
        return data

    def props(self) -> JsonDict:
        return self._json("GET", "/props")

    def slots(self) -> list[JsonDict] | None:
        """/slots (one object per slot, with ``speculative``); None when the server does
        not offer it (``--no-slots``) or answers something else."""
        try:
            response = self._http.get("/slots")
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        try:
            data = response.json()
        except ValueError:
            return None
        if not isinstance(data, list):
            return None
        return [slot for slot in data if isinstance(slot, dict)]

    def tokenize(self, text: str) -> list[int]:
        """The target's token ids for ``text`` (/tokenize, no special tokens added)."""
        data = self._json("POST", "/tokenize", {"content": text, "add_special": False})
        tokens = data.get("tokens")
        if not isinstance(tokens, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise LlamaServerError("llama-server's /tokenize gave no token ids")
        return list(tokens)

    def timed_prefill(self, tokens: list[int]) -> tuple[int, float]:
        """One unstreamed /completion of ``tokens`` that generates one token, reusing the
        slot's cached prefix: (tokens it processed anew, their milliseconds)."""
        data = self._json("POST", "/completion", {
            "prompt": tokens, "n_predict": 1, "cache_prompt": True, "temperature": 0.0,
            "stream": False})
        timings = data.get("timings")
        processed = _count(timings.get("prompt_n")) if isinstance(timings, dict) else None
        spent = timings.get("prompt_ms") if isinstance(timings, dict) else None
        if processed is None or isinstance(spent, bool) or not isinstance(spent, int | float):
            raise LlamaServerError(f"llama-server's /completion gave no prompt timings: "
                                   f"{visible(str(timings), 120)}")
        return processed, float(spent)

    def metrics_text(self) -> str | None:
        """/metrics as text (Prometheus); None when the server does not offer it (started
        without ``--metrics``) or does not answer."""
        try:
            response = self._http.get("/metrics")
        except httpx.HTTPError:
            return None
        if response.status_code != 200 or len(response.content) > 1 << 20:
            return None
        return response.text

    def apply_template(self, prompt: str) -> str | None:
        """The prompt in the model's own chat template (None: the model has none)."""
        try:
            data = self._json("POST", "/apply-template",
                              {"messages": [{"role": "user", "content": prompt}]})
        except LlamaServerError:
            return None
        rendered = data.get("prompt")
        return rendered if isinstance(rendered, str) and rendered else None

    def completion(self, body: Mapping[str, Any]) -> Generation:
        """One streamed /completion (SSE ``data:`` lines), timed on the client's clock."""
        ttft: float | None = None
        pieces: list[str] = []
        tokens: list[int] = []
        tokens_seen = False
        final: JsonDict | None = None
        wall = 0.0
        start = time.perf_counter()
        try:
            # A fresh connection per request: llama-server's HTTP library closes a kept-alive
            # connection after a few requests or seconds, and a request sent as it closes
            # fails with nothing received (seen here mid-run). Loopback connects cost ~0.1 ms.
            with self._http.stream("POST", "/completion", json=dict(body),
                                   headers={"Connection": "close"}) as response:
                if response.status_code != 200:
                    response.read()
                    raise LlamaServerError(
                        f"llama-server answered HTTP {response.status_code} to /completion: "
                        f"{visible(response.text, 160)}")
                deadline = time.monotonic() + REQUEST_DEADLINE_S
                for _, raw in bounded_lines(response, MAX_LINE_BYTES, deadline):
                    line = raw.decode("utf-8", errors="replace").rstrip("\r")
                    if not line.startswith("data:"):
                        continue
                    try:
                        chunk = json.loads(line[5:])
                    except ValueError:
                        raise StreamBroken("llama-server sent a line that is not JSON: "
                                           f"{visible(line, 80)}") from None
                    if not isinstance(chunk, dict):
                        continue
                    if "error" in chunk:
                        raise LlamaServerError(f"llama-server reported an error: "
                                               f"{visible(chunk['error'], 160)}")
                    ids = chunk.get("tokens")
                    if isinstance(ids, list) and not chunk.get("stop"):
                        tokens_seen = True
                        tokens.extend(i for i in ids if isinstance(i, int)
                                      and not isinstance(i, bool))
                    content = chunk.get("content")
                    if isinstance(content, str) and content:
                        if ttft is None:
                            ttft = time.perf_counter() - start
                        pieces.append(content)
                    if chunk.get("stop") is True:
                        final, wall = chunk, time.perf_counter() - start
        except httpx.HTTPError as exc:
            raise StreamBroken(f"the connection to llama-server broke ({type(exc).__name__})"
                               ) from None
        except PastDeadline:
            raise StreamBroken(f"llama-server's answer did not end within "
                               f"{REQUEST_DEADLINE_S:g} s") from None
        except TooLong:
            raise StreamBroken(f"llama-server sent a line longer than "
                               f"{MAX_LINE_BYTES // 2**20} MiB") from None
        if final is None:
            raise StreamBroken("llama-server's response ended without its final chunk")
        return generation_from_final(final, wall_s=wall, ttft_s=ttft, text="".join(pieces),
                                     token_ids=tuple(tokens) if tokens_seen else None)
