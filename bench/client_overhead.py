"""Client overhead per trial: wall time minus the server-reported total_duration.

specsubmit's httpx adapter and the official `ollama` Python package send the same
streamed /api/generate requests, alternating, to the same loopback fake Ollama in one
run. What remains after subtracting total_duration is what the client adds: sending
the request, parsing every NDJSON chunk, and reading the final one.

    .venv/bin/python bench/client_overhead.py [--trials 100] [--tokens 200] [--tokens-per-s 2000]

The fake server runs in its own process so that it does not share the client's GIL.

Target: specsubmit's median <= 2 ms and not above the official client's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ollama  # noqa: E402
from tests.fakeollama import FakeModel, FakeOllama  # noqa: E402

from specschema.stats import median, percentile  # noqa: E402
from specsubmit.engines.ollama.client import GenerateRequest, OllamaClient  # noqa: E402

PROMPT = ("Write a Python function `merge_dicts(*dicts)` that takes any number of dicts and "
          "returns a single dict with all keys merged.")


def ours(client: OllamaClient, options: dict[str, int | float]) -> float:
    gen = client.generate(GenerateRequest(model="qwen3:14b", prompt=PROMPT, options=options,
                                          keep_alive="30m"))
    return gen.wall_s - gen.total_duration_ns / 1e9


def official(client: ollama.Client, options: dict[str, int | float]) -> float:
    start = time.perf_counter()
    for chunk in client.generate(model="qwen3:14b", prompt=PROMPT, options=options,
                                 keep_alive="30m", stream=True):
        if chunk.done:
            wall = time.perf_counter() - start
            assert chunk.total_duration is not None
            return wall - chunk.total_duration / 1e9
    raise RuntimeError("no final chunk")


def serve(tokens_per_s: float, conn: Connection) -> None:
    model = FakeModel("qwen3:14b", tokens_per_s=tokens_per_s)
    with FakeOllama(models=[model]) as fake:
        conn.send(fake.url)
        conn.recv()  # until the parent is done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--tokens-per-s", type=float, default=2000)
    args = parser.parse_args()
    options: dict[str, int | float] = {"num_predict": args.tokens, "temperature": 0.0,
                                       "seed": 42, "top_k": 40, "top_p": 0.9}
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(
        target=serve, args=(args.tokens_per_s, child), daemon=True)
    server.start()
    url = parent.recv()
    try:
        samples, cpu = measure(url, options, args.trials)
    finally:
        parent.send("stop")
        server.join(timeout=5)
    print(f"client overhead = wall - total_duration, {args.trials} trials each, "
          f"{args.tokens} streamed tokens at {args.tokens_per_s:.0f} tok/s, loopback fake Ollama")
    print(f"load average before: {load}")
    print(f"{'client':<28}{'median ms':>12}{'p95 ms':>10}{'max ms':>10}{'CPU ms/trial':>15}")
    for name, values in samples.items():
        print(f"{name:<28}{median(values):>12.3f}{percentile(values, 0.95):>10.3f}"
              f"{max(values):>10.3f}{median(cpu[name]):>15.3f}")


def measure(url: str, options: dict[str, int | float], trials: int
            ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    with OllamaClient(url) as mine:
        theirs = ollama.Client(host=url)
        runners: dict[str, Callable[[], float]] = {
            "specsubmit (httpx)": lambda: ours(mine, options),
            f"ollama-python {ollama_version()}": lambda: official(theirs, options),
        }
        samples: dict[str, list[float]] = {name: [] for name in runners}
        cpu: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(5):  # warm-up: connections, first load
            for run in runners.values():
                run()
        for _ in range(trials):
            for name, run in runners.items():
                cpu_start = time.thread_time()
                samples[name].append(run() * 1000)
                cpu[name].append((time.thread_time() - cpu_start) * 1000)
    return samples, cpu


def ollama_version() -> str:
    from importlib.metadata import version

    return version("ollama")


if __name__ == "__main__":
    main()
