"""A small httpx adapter for the Ollama HTTP API (shared/reference/ollama-api.md).

Every failure leaves this module as a ``specsubmit.errors`` class with a one-line
message a contributor can act on; no httpx exception escapes, and any text Ollama sends
back (an error, a reason phrase) is quoted through ``specsubmit.outside_text.visible``.
Generation is streamed (NDJSON) so that the time to first token is measured here, on the
client's monotonic clock; every other duration comes from Ollama's final chunk.

What a server that stalls or floods can cost, bounded (an address can be anything's):
every request has a total deadline (``deadline_s``, besides the read timeout
``timeout_s`` for silence), checked as each block arrives; a line may be at most
``MAX_LINE_BYTES`` long and is gathered in one buffer that grows linearly; a JSON answer
at most ``MAX_JSON_BYTES``; a generation stops reading at its ``done`` chunk.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx

from specsubmit.engines.base import DEFAULT_TIMEOUT_S
from specsubmit.engines.base import Generation as Generation  # re-exported
from specsubmit.engines.base import PullProgress as PullProgress  # re-exported
from specsubmit.engines.bounded import (
    MAX_ANSWER_BYTES,
    MAX_LINE_BYTES,
    REQUEST_DEADLINE_S,
    PastDeadline,
    TooLong,
    bounded_lines,
    read_bounded,
)
from specsubmit.errors import (
    ModelMissing,
    OllamaError,
    OllamaStreamError,
    OllamaTimeout,
    OllamaUnreachable,
)
from specsubmit.outside_text import visible

JsonDict = dict[str, Any]
DEFAULT_CONNECT_TIMEOUT_S = 5.0
# One request (a warm-up, a trial, a model list) in all; a pull of a model is longer.
DEFAULT_DEADLINE_S = REQUEST_DEADLINE_S
PULL_DEADLINE_S = 6 * 3600.0
# Ollama's lines are a token or a progress report; the final chunk of a generation carries
# its context (a few thousand numbers). /api/show can carry a model's whole metadata.
MAX_JSON_BYTES = MAX_ANSWER_BYTES


@dataclass(frozen=True)
class GenerateRequest:
    model: str
    prompt: str
    options: Mapping[str, int | float | bool | str]
    keep_alive: str | int | None = None
    extra_fields: Mapping[str, int | float | bool | str] = field(default_factory=dict)

    def body(self) -> JsonDict:
        body: JsonDict = dict(self.extra_fields)
        body.update(model=self.model, prompt=self.prompt, stream=True, options=dict(self.options))
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        return body


def _metric(final: JsonDict, key: str, *, required: bool) -> int | None:
    value = final.get(key)
    if value is None:
        return 0 if required else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OllamaStreamError(f"Ollama's final chunk has a bad {key}: {value!r}")
    return value


def generation_from_final(final: JsonDict, *, wall_s: float, ttft_s: float | None,
                          text: str) -> Generation:
    done_reason = final.get("done_reason")
    return Generation(
        wall_s=wall_s,
        ttft_s=ttft_s,
        text=text,
        total_duration_ns=_metric(final, "total_duration", required=True) or 0,
        load_duration_ns=_metric(final, "load_duration", required=True) or 0,
        prompt_eval_count=_metric(final, "prompt_eval_count", required=False),
        prompt_eval_duration_ns=_metric(final, "prompt_eval_duration", required=False),
        eval_count=_metric(final, "eval_count", required=True) or 0,
        eval_duration_ns=_metric(final, "eval_duration", required=True) or 0,
        done_reason=done_reason if isinstance(done_reason, str) and done_reason else None,
    )


_PARSE_NOW = (b'"done":true', b'"done": true', b'"error"')


def _text(chunk: JsonDict, key: str) -> str:
    value = chunk.get(key)
    return value if isinstance(value, str) else ""


def _piece(chunk: JsonDict) -> str:
    return _text(chunk, "thinking") + _text(chunk, "response")


def _parse_line(line: bytes) -> JsonDict:
    try:
        data = json.loads(line)
    except ValueError:
        raise OllamaStreamError(
            f"Ollama sent a line that is not JSON: {visible(line, 80)}") from None
    if not isinstance(data, dict):
        raise OllamaStreamError(f"Ollama sent an unexpected line: {visible(line, 80)}")
    if "error" in data:
        raise OllamaStreamError(f"Ollama reported an error mid-stream: {visible(data['error'])}")
    return data


def _error_text(response: httpx.Response, body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return visible(data["error"])
    text = body.decode("utf-8", errors="replace").strip()
    return visible(text) if text else visible(response.reason_phrase or "no message", 80)


class OllamaClient:
    """Talks to one Ollama server. Use as a context manager, or call ``close()``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        deadline_s: float = DEFAULT_DEADLINE_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            transport=transport,
            headers={"User-Agent": "specsubmit"},
            trust_env=False,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OllamaClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- error mapping -----------------------------------------------------------------

    def _transport_error(self, exc: httpx.HTTPError, *, streaming: bool = False) -> OllamaError:
        if isinstance(exc, httpx.ConnectTimeout):
            return OllamaUnreachable(
                f"Ollama at {self.base_url} did not accept a connection in time — "
                "is `ollama serve` running and reachable?"
            )
        if isinstance(exc, httpx.ConnectError) and "ssl" in str(exc).lower():
            return OllamaUnreachable(
                f"the TLS handshake with {self.base_url} failed: {visible(exc, 160)}"
            )
        if isinstance(exc, httpx.ConnectError):
            return OllamaUnreachable(
                f"Ollama is not running at {self.base_url} — start it with `ollama serve`"
            )
        if isinstance(exc, httpx.TimeoutException):
            return OllamaTimeout(
                f"Ollama at {self.base_url} sent nothing for {self.timeout_s:g} s "
                "(raise the limit with --timeout)"
            )
        if streaming or isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
            return OllamaStreamError(
                f"the connection to Ollama at {self.base_url} broke mid-response "
                "(did Ollama stop or crash?)"
            )
        return OllamaError(f"talking to Ollama at {self.base_url} failed: {visible(exc, 200)}")

    def _past_deadline(self, path: str, deadline_s: float) -> OllamaTimeout:
        return OllamaTimeout(f"Ollama at {self.base_url} did not finish answering {path} "
                             f"within {deadline_s:g} s")

    def _status_error(self, response: httpx.Response, path: str, model: str | None,
                      deadline: float) -> OllamaError:
        try:
            body = read_bounded(response, 64 * 1024, deadline, cut=True)
        except PastDeadline:
            body = b""
        message = _error_text(response, body)
        if response.status_code == 404 and model is not None:
            return ModelMissing(
                f"model '{model}' is not available in Ollama ({message}) — "
                f"run `ollama pull {model}` or rerun with --pull"
            )
        return OllamaError(f"Ollama answered HTTP {response.status_code} to {path}: {message}")

    def _json(self, method: str, path: str, *, body: JsonDict | None = None,
              model: str | None = None) -> JsonDict:
        deadline = time.monotonic() + self.deadline_s
        try:
            with self._http.stream(method, path, json=body) as response:
                if response.status_code != 200:
                    raise self._status_error(response, path, model, deadline)
                content = read_bounded(response, MAX_JSON_BYTES, deadline)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        except PastDeadline:
            raise self._past_deadline(path, self.deadline_s) from None
        except TooLong:
            raise OllamaError(f"{self.base_url}{path} answered with more than "
                              f"{MAX_JSON_BYTES // 2**20} MiB — is this an Ollama server?"
                              ) from None
        try:
            data = json.loads(content)
        except ValueError:
            raise OllamaError(
                f"{self.base_url}{path} did not answer with JSON — is this an Ollama server?"
            ) from None
        if not isinstance(data, dict):
            raise OllamaError(f"{self.base_url}{path} answered with unexpected JSON")
        return data

    # --- endpoints ---------------------------------------------------------------------

    def version(self) -> str:
        version = self._json("GET", "/api/version").get("version")
        if not isinstance(version, str) or not version:
            raise OllamaError(f"{self.base_url}/api/version has no version — is this Ollama?")
        return version

    def tags(self) -> list[JsonDict]:
        models = self._json("GET", "/api/tags").get("models") or []
        return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []

    def show(self, model: str) -> JsonDict:
        return self._json("POST", "/api/show", body={"model": model}, model=model)

    def ps(self) -> list[JsonDict]:
        models = self._json("GET", "/api/ps").get("models") or []
        return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []

    def _raw_lines(self, path: str, body: JsonDict, model: str | None,
                   deadline_s: float | None = None) -> Generator[tuple[float, bytes]]:
        """(seconds since the request started, raw NDJSON line) as each line arrives
        (``engines.bounded.bounded_lines``: one buffer per line, at most MAX_LINE_BYTES)."""
        deadline_s = self.deadline_s if deadline_s is None else deadline_s
        start = time.perf_counter()
        deadline = time.monotonic() + deadline_s
        try:
            with self._http.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    raise self._status_error(response, path, model, deadline)
                for arrived, line in bounded_lines(response, MAX_LINE_BYTES, deadline):
                    yield arrived - start, line
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, streaming=True) from None
        except PastDeadline:
            raise self._past_deadline(path, deadline_s) from None
        except TooLong:
            raise OllamaStreamError(
                f"Ollama sent a line longer than {MAX_LINE_BYTES // 2**20} MiB to {path}: "
                "not an Ollama stream") from None

    def _stream_lines(self, path: str, body: JsonDict, model: str | None,
                      deadline_s: float | None = None) -> Iterator[tuple[float, JsonDict]]:
        for elapsed, line in self._raw_lines(path, body, model, deadline_s):
            yield elapsed, _parse_line(line)

    def pull(self, model: str, on_progress: Callable[[PullProgress], None] | None = None) -> None:
        succeeded = False
        try:
            for _, data in self._stream_lines("/api/pull", {"model": model, "stream": True}, model,
                                              PULL_DEADLINE_S):
                status = visible(data.get("status", ""), 120)
                completed, total = data.get("completed"), data.get("total")
                if on_progress is not None:
                    on_progress(PullProgress(
                        status=status,
                        completed=completed if isinstance(completed, int) else None,
                        total=total if isinstance(total, int) else None,
                    ))
                succeeded = succeeded or status == "success"
        except OllamaStreamError as exc:
            raise OllamaError(f"could not pull {model}: {exc.message}") from None
        if succeeded:
            return
        raise OllamaError(f"pulling {model} ended without success")

    def stream_generate(self, request: GenerateRequest) -> Iterator[tuple[float, JsonDict]]:
        """The raw NDJSON chunks of a streamed /api/generate, with client-side times."""
        return self._stream_lines("/api/generate", request.body(), request.model)

    def generate(self, request: GenerateRequest) -> Generation:
        """One streamed generation. Only the lines that matter for timing are parsed as
        they arrive (the first text for TTFT, the final chunk, error lines); the others
        are parsed after the final chunk, so the client never falls behind the stream."""
        ttft: float | None = None
        head: list[str] = []
        tail: list[bytes] = []
        final: JsonDict | None = None
        final_piece = ""
        wall = 0.0
        # Reading stops at `done`: a server that goes on sending (or holds the stream open)
        # after it costs nothing. The connection is then not reused: the next request
        # opens a new one (on loopback, a fraction of a millisecond before its clock starts
        # to matter, and the same for every config).
        lines = self._raw_lines("/api/generate", request.body(), request.model)
        try:
            for elapsed, line in lines:
                if ttft is None:
                    chunk = _parse_line(line)
                    piece = _piece(chunk)
                    if piece:
                        head.append(piece)
                        ttft = elapsed
                    if chunk.get("done") is True:
                        final, wall = chunk, elapsed
                        break
                elif any(marker in line for marker in _PARSE_NOW):
                    chunk = _parse_line(line)
                    if chunk.get("done") is True:
                        final, wall, final_piece = chunk, elapsed, _piece(chunk)
                        break
                    tail.append(line)
                else:
                    tail.append(line)
        finally:
            lines.close()  # the response closes now, not when the generator is collected
        if final is None:
            raise OllamaStreamError(
                f"Ollama's response for {request.model} ended without its final chunk "
                "(no \"done\"): the model runner may have crashed"
            )
        text = "".join(head) + "".join(_piece(_parse_line(line)) for line in tail) + final_piece
        return generation_from_final(final, wall_s=wall, ttft_s=ttft, text=text)
