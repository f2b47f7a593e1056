"""A stand-in for llama-server (stdlib only) that the engine adapter starts like the real one.

It answers what specsubmit uses: ``--version``, ``/health``, ``/props``, ``/slots``, a
streamed ``/completion`` whose final chunk carries ``timings`` (with ``draft_n`` and
``draft_n_accepted`` only while it speculates) and the generated ``tokens`` when
``return_tokens`` is set, and with ``--metrics`` a ``/metrics`` whose speculative counters
have the real build's names (tests/fixtures/llama_server/metrics-*.txt): rounds of the
draft depth (``--spec-draft-n-max``, ``--spec-ngram-simple-size-m`` or
``--spec-ngram-mod-n-max``) and per-position counts, each round accepting a prefix. A
``--spec-type`` without a draft model (n-gram, MTP) speculates like a draft. Its log lines
are the real engine's (tests/fixtures/llama_server/: ``incompatible-vocab.txt``, the
acceptance line's format).

What it does with a draft is set per draft file (the first 12 hex digits of its sha256) in
``FAKE_LLAMA_DRAFTS`` (``digest=behaviour,...``):
- ``refuse``: log llama.cpp's two refusal lines, then serve without speculation
  (``/slots``: ``speculative: false``), as this build does for an incompatible vocab;
- ``silent``: serve without speculation and log nothing (only ``/slots`` tells);
- ``fail``: log "failed to load draft model" and exit 1;
- ``blind``: speculate, accepting none of what it drafts (an unrelated draft);
- anything else, or not listed: speculate, accepting half of what it drafts.

The generated token ids are ``100 + i`` plus a multiple of 10,000 that depends on the prompt
(each prompt of a prompt set has its own answer); with ``FAKE_LLAMA_DIVERGE_AT=N`` a
speculating server emits another id from position N on (as the target's batched arithmetic
does).
With ``--spec-synth-rates`` (llama.cpp's synthetic acceptance, which ``--help`` lists unless
``FAKE_LLAMA_SYNTH=absent``) a completion of ``n_predict = k + 1`` tokens is one round
drafting k - 1 tokens, every one accepted, in 1 + 0.5 k ms (k = 1: a plain step), as the
real build does when the prompt lookup finds the continuation (the probe's rounds).
Run as ``python fake_llama_server.py ARGS`` (``write_fake_binary`` writes a launcher).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VERSION = "version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with fake for x86_64\n"
REFUSAL_LINES = (  # verbatim from tests/fixtures/llama_server/incompatible-vocab.txt
    "0.00.125.759 E spec common_specu: the target and draft vocabs are not compatible",
    "0.00.125.886 E srv    load_model: failed to initialize speculative decoding context: "
    "draft model vocab type must match target model to use speculation",
)


# What the pinned build logs, then exits 1, for --spec-type draft-mtp on a target without
# MTP layers (seen on Gemma 3 270M; tests/realengine/test_gemma_real.py).
MTP_LINES = (
    "0.00.100.000 W llama_init_from_model: context type MTP requested but model doesn't "
    "contain MTP layers",
    "0.00.100.100 E common_speculative_init_result: failed to create MTP context",
    "0.00.100.200 E srv    load_model: failed to create MTP context",
    "0.00.100.300 E srv  llama_server: exiting due to model loading error",
)


def write_fake_binary(folder: Path) -> Path:
    """An executable that runs this file with the test's Python."""
    folder.mkdir(parents=True, exist_ok=True)
    launcher = folder / "llama-server"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    return launcher


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def _behaviour(draft: str | None) -> str | None:
    if draft is None:
        return None
    wanted = dict(item.split("=", 1) for item in
                  os.environ.get("FAKE_LLAMA_DRAFTS", "").split(",") if "=" in item)
    return wanted.get(_digest(draft), "speculate")


def _log(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    if "--version" in argv:
        sys.stderr.write(VERSION)
        return 0
    if "--help" in argv:
        sys.stdout.write("----- speculative params -----\n--spec-draft-n-max N\n")
        if os.environ.get("FAKE_LLAMA_SYNTH") != "absent":
            sys.stdout.write("--spec-synth-rates P0,P1,...   comma-separated unconditional "
                             "per-position synthetic acceptance probabilities\n")
        return 0
    args: dict[str, str] = {}
    for i, item in enumerate(argv):
        if item.startswith("--"):
            following = argv[i + 1] if i + 1 < len(argv) else ""
            args[item] = "" if following.startswith("--") else following
    draft = args.get("--spec-draft-model")
    behaviour = _behaviour(draft)
    if args.get("--spec-type") == "draft-mtp" and os.environ.get("FAKE_LLAMA_MTP") == "absent":
        for line in MTP_LINES:
            _log(line)
        return 1
    if behaviour is None and args.get("--spec-type"):
        behaviour = "speculate"
    depth = int(args.get("--spec-draft-n-max") or args.get("--spec-ngram-simple-size-m")
                or args.get("--spec-ngram-mod-n-max") or 3)
    counters = {"rounds": 0, "drafted": 0, "accepted": 0, "per_position": [0] * depth}
    _log("0.00.001.473 I srv  llama_server: initializing ...")
    if behaviour == "fail":
        _log(f"0.00.010.000 E srv    load_model: failed to load draft model, '{draft}'")
        return 1
    if behaviour == "refuse":
        for line in REFUSAL_LINES:
            _log(line)
    speculating = behaviour in ("speculate", "blind")
    accept_share = 0.0 if behaviour == "blind" else 0.5
    diverge_at = int(os.environ.get("FAKE_LLAMA_DIVERGE_AT", "-1"))
    tasks = iter(range(1, 1_000_000))
    cached: list[int] = []  # the slot's cached prompt (unstreamed completions)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *a: Any) -> None:  # noqa: A002 - the base's name
            pass

        def _json(self, body: Any, status: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _prefill(self, body: dict[str, Any]) -> None:
            """An unstreamed completion of token ids, the cached prefix reused as the real
            server does with --swa-full: its timings say how many tokens were processed
            anew, at 1 ms plus 0.5 ms per token."""
            tokens = [int(t) for t in body.get("prompt", [])]
            with lock:
                kept = next((i for i, (a, b) in enumerate(zip(tokens, cached, strict=False))
                             if a != b), min(len(tokens), len(cached)))
                cached[:] = tokens
            fresh = len(tokens) - kept
            self._json({"content": "x", "stop": True, "timings": {
                "prompt_n": fresh, "prompt_ms": 1.0 + 0.5 * fresh, "predicted_n": 1,
                "predicted_ms": 0.25, "cache_n": kept}})

        def _synthetic_round(self, n: int) -> None:
            """One round checking n - 1 tokens (n - 2 drafted, all accepted): 1 + 0.5 (n - 1)
            ms; n = 2 is a plain step."""
            drafted = max(n - 2, 0)
            timings: dict[str, Any] = {"cache_n": len(cached), "prompt_n": 1,
                                       "prompt_ms": 1.0, "predicted_n": n,
                                       "predicted_ms": 1.0 + 0.5 * (n - 1)}
            if drafted:
                timings.update(draft_n=drafted, draft_n_accepted=drafted)
                with lock:
                    counters["rounds"] += 1
                    counters["drafted"] += drafted
                    counters["accepted"] += drafted
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(n):
                chunk = {"content": f"s{i} ", "stop": False}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            final = {"content": "", "stop": True, "stop_type": "limit", "timings": timings}
            self.wfile.write(f"data: {json.dumps(final)}\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health":
                self._json({"status": "ok"})
            elif self.path == "/props":
                self._json({"build_info": "b1-0c1e570"})
            elif self.path == "/slots":
                self._json([{"id": 0, "n_ctx": 4096, "speculative": speculating,
                             "is_processing": False}])
            elif self.path == "/metrics" and "--metrics" in args:
                with lock:
                    lines = [f"llamacpp:spec_decode_num_draft_tokens_total {counters['drafted']}",
                             "llamacpp:spec_decode_num_accepted_tokens_total "
                             f"{counters['accepted']}",
                             f"llamacpp:spec_decode_num_drafts_total {counters['rounds']}"]
                    if counters["accepted"]:
                        lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total'
                                  f'{{position="{i}"}} {count}'
                                  for i, count in enumerate(counters["per_position"])]
                data = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._json({"error": "not found"}, 404)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/tokenize":  # one id per character: enough for the probe
                self._json({"tokens": [ord(c) for c in str(body.get("content", ""))]})
                return
            if self.path != "/completion":
                self._json({"error": "not found"}, 404)
                return
            if body.get("stream") is False:
                self._prefill(body)
                return
            n = int(body.get("n_predict", 16))
            if "--spec-synth-rates" in args:
                self._synthetic_round(n)
                return
            answer = 10_000 * (sum(str(body.get("prompt", "")).encode()) % 97)
            ids = [answer + (100 + i if not (speculating and 0 <= diverge_at <= i) else 900 + i)
                   for i in range(n)]
            # 2 ms of prompt, 0.25 ms per token (4000 tok/s): the wall time covers them.
            prompt_ms, predicted_ms = 2.0, n * 0.25
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            time.sleep(prompt_ms / 1000)
            for token in ids:
                chunk: dict[str, Any] = {"content": f"t{token} ", "stop": False}
                if body.get("return_tokens"):
                    chunk["tokens"] = [token]
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            time.sleep(predicted_ms / 1000)
            timings: dict[str, Any] = {"cache_n": 0, "prompt_n": 5, "prompt_ms": prompt_ms,
                                       "predicted_n": n, "predicted_ms": predicted_ms}
            with lock:
                task = next(tasks)
            if speculating:
                accepted = int(n * accept_share)
                timings.update(draft_n=n, draft_n_accepted=accepted)
                rounds = -(-n // depth)  # n drafted in rounds of at most ``depth``
                each, extra = divmod(accepted, rounds)
                with lock:
                    counters["rounds"] += rounds
                    counters["drafted"] += n
                    counters["accepted"] += accepted
                    for i in range(depth):
                        counters["per_position"][i] += (
                            rounds if i < each else extra if i == each else 0)
                _log(f"0.01.000.000 I slot print_timing: id  0 | task {task} | draft "
                     f"acceptance = {accept_share:.5f} ({accepted:5d} accepted / {n:5d} "
                     "generated), mean len =  2.00")
            final = {"content": "", "stop": True, "stop_type": "limit", "timings": timings,
                     "tokens": []}
            self.wfile.write(f"data: {json.dumps(final)}\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

    server = ThreadingHTTPServer((args.get("--host", "127.0.0.1"), int(args["--port"])),
                                 Handler)
    _log(f"0.00.022.162 I srv  llama_server: listening on http://127.0.0.1:{args['--port']}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
