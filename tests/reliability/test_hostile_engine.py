"""The Ollama adapter against an address that answers like no Ollama would.

Replayed from the attacks that worked: a response line without a newline was joined again
for every block received (40 MB: 16 s of CPU and +82 MB; 200 MB did not finish in
100 s); the client read past ``done`` until the server closed; a stream that kept sending
kept a trial going for as long as the server liked. Now (``engines/ollama/client.py``):
one linearly growing buffer per line and at most ``MAX_LINE_BYTES``; reading stops at
``done``; every request has a total deadline. The CPU figures are printed (``-s``) for
RELIABILITY.md; they are not pass/fail.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from specsubmit.engines.ollama.client import MAX_LINE_BYTES, GenerateRequest, OllamaClient
from specsubmit.errors import OllamaStreamError, OllamaTimeout
from tests.reliability.rawpeer import RawPeer, response_head

TOKEN = json.dumps({"model": "m", "response": "tok", "done": False}).encode() + b"\n"
DONE = json.dumps({"model": "m", "response": "", "done": True, "done_reason": "stop",
                   "total_duration": 2000, "load_duration": 1, "prompt_eval_count": 1,
                   "prompt_eval_duration": 1, "eval_count": 2, "eval_duration": 1000}
                  ).encode() + b"\n"
REQUEST = GenerateRequest(model="m", prompt="p", options={"num_predict": 2})
STREAM_HEAD = response_head(200, "OK", {"Content-Type": "application/x-ndjson"})


def _no_newline(total: int):  # type: ignore[no-untyped-def]
    def answer(method: str, path: str, sock: socket.socket) -> None:
        sock.sendall(STREAM_HEAD + b'{"response": "')
        block = b"x" * 4096
        for _ in range(total // len(block)):
            sock.sendall(block)
    return answer


@pytest.mark.parametrize("size", [40_000_000, 200_000_000], ids=["40 MB", "200 MB"])
def test_a_line_without_a_newline_is_refused_at_the_line_limit(size: int) -> None:
    with RawPeer(_no_newline(size)) as peer, OllamaClient(peer.url, timeout_s=10) as client:
        cpu, wall = time.process_time(), time.monotonic()
        with pytest.raises(OllamaStreamError, match="longer than 8 MiB"):
            client.generate(REQUEST)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    print(f"\n{size / 1e6:.0f} MB line without a newline: refused after "
          f"{MAX_LINE_BYTES / 2**20:.0f} MiB, {cpu * 1000:.0f} ms CPU, {wall:.2f} s")


def test_a_long_line_under_the_limit_is_read_whole_in_small_blocks() -> None:
    piece = "y" * 6_000_000
    line = json.dumps({"model": "m", "response": piece, "done": False}).encode() + b"\n"

    def answer(method: str, path: str, sock: socket.socket) -> None:
        sock.sendall(STREAM_HEAD)
        for start in range(0, len(line), 4096):
            sock.sendall(line[start:start + 4096])
        sock.sendall(DONE)

    with RawPeer(answer) as peer, OllamaClient(peer.url, timeout_s=10) as client:
        cpu = time.process_time()
        generation = client.generate(REQUEST)
        cpu = time.process_time() - cpu
    assert generation.text == piece and generation.eval_count == 2
    print(f"\n6 MB line in 4 KiB blocks: read whole, {cpu * 1000:.0f} ms CPU")


def test_reading_stops_at_done_while_the_server_holds_the_stream_open() -> None:
    def answer(method: str, path: str, sock: socket.socket) -> None:
        sock.sendall(STREAM_HEAD + TOKEN + DONE)
        time.sleep(20)  # the stream stays open; a client reading on waits for it
        sock.sendall(TOKEN * 1000)

    with RawPeer(answer) as peer, OllamaClient(peer.url, timeout_s=30) as client:
        started = time.monotonic()
        generation = client.generate(REQUEST)
        seconds = time.monotonic() - started
    assert generation.done_reason == "stop" and generation.text == "tok"
    assert seconds < 10, seconds
    print(f"\ndone, then the stream held open 20 s: generate returned in {seconds:.2f} s")


def test_a_stream_that_never_ends_stops_at_the_request_deadline() -> None:
    def answer(method: str, path: str, sock: socket.socket) -> None:
        sock.sendall(STREAM_HEAD)
        for _ in range(1000):  # a token every 0.1 s: the read timeout never fires
            sock.sendall(TOKEN)
            time.sleep(0.1)

    with RawPeer(answer) as peer, \
            OllamaClient(peer.url, timeout_s=5, deadline_s=2) as client:
        started = time.monotonic()
        with pytest.raises(OllamaTimeout, match="did not finish answering /api/generate "
                                                "within 2 s"):
            client.generate(REQUEST)
        seconds = time.monotonic() - started
    assert seconds < 5, seconds
    print(f"\nendless token stream: OllamaTimeout after {seconds:.2f} s (deadline 2 s)")


def test_a_json_answer_that_trickles_stops_at_the_request_deadline() -> None:
    def answer(method: str, path: str, sock: socket.socket) -> None:
        sock.sendall(response_head(200, "OK", {"Content-Type": "application/json"}, 10**6)
                     + b'{"version": "')
        for _ in range(1000):
            sock.sendall(b"1")
            time.sleep(0.1)

    with RawPeer(answer) as peer, \
            OllamaClient(peer.url, timeout_s=5, deadline_s=2) as client:
        started = time.monotonic()
        with pytest.raises(OllamaTimeout, match="within 2 s"):
            client.version()
        assert time.monotonic() - started < 5


# --- the other adapters read through the same bounds (engines/bounded.py) ----------------


def test_llama_servers_stream_line_without_a_newline_is_refused_at_the_line_limit() -> None:
    from specsubmit.engines.llama_server.api import LlamaServerApi, StreamBroken

    def answer(method: str, path: str, sock: socket.socket) -> None:
        sock.sendall(response_head(200, "OK", {"Content-Type": "text/event-stream"})
                     + b'data: {"content": "')
        for _ in range(40_000_000 // 4096):
            sock.sendall(b"x" * 4096)

    with RawPeer(answer) as peer:
        api = LlamaServerApi(peer.url, timeout_s=10)
        try:
            with pytest.raises(StreamBroken, match="longer than 8 MiB"):
                api.completion({"prompt": "p"})
        finally:
            api.close()


def test_lm_studios_trickled_answer_stops_at_the_request_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from specsubmit.engines.lmstudio import api as lmstudio
    from specsubmit.errors import EngineError

    monkeypatch.setattr(lmstudio, "REQUEST_DEADLINE_S", 2.0)

    def answer(method: str, path: str, sock: socket.socket) -> None:
        sock.sendall(response_head(200, "OK", {"Content-Type": "application/json"}, 10**6)
                     + b'{"models": [')
        for _ in range(1000):
            sock.sendall(b" ")
            time.sleep(0.1)

    with RawPeer(answer) as peer:
        client = lmstudio.LMStudioApi(peer.url, timeout_s=5)
        started = time.monotonic()
        try:
            with pytest.raises(EngineError, match="did not finish answering /api/v1/models"):
                client.models()
        finally:
            client.close()
        assert time.monotonic() - started < 5
