"""The advisor's prediction against measurement on the real engine: Gemma 3 270M (PyPI,
tests/support/realengine/gemma.py) on the pinned llama-server, prompt lookup
(ngram-simple, lookup 3) at depths 2, 4 and 8 on llamacpp-map's six prompts.

    .venv/bin/python bench/advise.py [--rounds 2] [--threads 1] [--num-predict 96]

1. Measures, in bracketed blocks (baseline, depths ascending, baseline, depths descending,
   baseline, ... one llama-server start per block, each block the six prompts once), decode
   tok/s per prompt; a depth's speedup per prompt is the ratio of its median to the
   baseline's median for that prompt, overall the geometric mean over the prompts.
2. Reads the acceptance per draft position of the depth-8 runs from /metrics.
3. Probes the target (``specsubmit probe``'s measurement: a forward pass over k new tokens
   after a cached context, plain decoding for k = 1).
4. Predicts every depth from the depth-8 acceptance and the probe (``specschema.predict``),
   and with the textbook formula, and prints prediction against measurement: the held-out
   depths are 2 and 4 (predicted from a profile measured at 8).

Prints figures; asserts nothing. The machine's load is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.realengine import build, gemma  # noqa: E402

from specschema import get_protocol  # noqa: E402
from specschema.predict import (  # noqa: E402
    CostCurve,
    mean_acceptance,
    non_decreasing,
    predicted_speedup,
    textbook_speedup,
)
from specsubmit.engines.base import RunListener  # noqa: E402
from specsubmit.engines.llama_server.api import LlamaServerApi  # noqa: E402
from specsubmit.engines.llama_server.metrics import parse_spec_metrics  # noqa: E402
from specsubmit.engines.llama_server.probe import measure  # noqa: E402

DEPTHS = (2, 4, 8)


def _start(binary: Path, model: Path, port: int, threads: int, extra: list[str]
           ) -> tuple[subprocess.Popen[bytes], LlamaServerApi]:
    proc = subprocess.Popen(
        [str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
         "--parallel", "1", "--poll", "0", "--no-warmup", "--threads", str(threads),
         "--threads-batch", str(threads), "--ctx-size", "4096", "--metrics", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = LlamaServerApi(f"http://127.0.0.1:{port}", timeout_s=600)
    for _ in range(600):
        if api.healthy():
            return proc, api
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("llama-server did not start")


def _spec(depth: int) -> list[str]:
    return ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
            "--spec-ngram-simple-size-m", str(depth), "--spec-draft-p-min", "0.0",
            "--spec-draft-n-min", "0"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--num-predict", type=int, default=96)
    args = parser.parse_args()
    print(f"load at start: {os.getloadavg()}", flush=True)
    binary, model = build.llama_server_binary(), gemma.gemma_gguf()
    protocol = get_protocol("llamacpp-map")
    prompts = [(p.domain, p.text) for p in protocol.prompts or ()]
    order: list[int | None] = []
    for _ in range(args.rounds):
        order += [None, *DEPTHS, None, *reversed(DEPTHS)]
    order.append(None)
    rates: dict[int | None, dict[str, list[float]]] = {
        d: {domain: [] for domain, _ in prompts} for d in (None, *DEPTHS)}
    positions: list[int] = []
    rounds_seen = 0
    port = 18300
    for block, depth in enumerate(order):
        port += 1
        proc, api = _start(binary, model, port, args.threads, [] if depth is None
                           else _spec(depth))
        try:
            templated = {text: api.apply_template(text) or text for _, text in prompts}
            api.completion({"prompt": templated[prompts[0][1]], "n_predict": 8,
                            "temperature": 0.0, "cache_prompt": False, "stream": True})
            for domain, text in prompts:
                gen = api.completion({
                    "prompt": templated[text], "n_predict": args.num_predict,
                    "temperature": 0.0, "seed": 42, "top_k": 40, "top_p": 0.9,
                    "repeat_penalty": 1.0, "min_p": 0.0, "cache_prompt": False,
                    "stream": True})
                rates[depth][domain].append(gen.eval_count / gen.eval_duration_ns * 1e9)
            if depth == max(DEPTHS):
                found = parse_spec_metrics(api.metrics_text() or "")
                if found is not None:
                    rounds_seen += found.rounds
                    width = max(len(positions), len(found.per_position))
                    positions = [(positions[i] if i < len(positions) else 0)
                                 + (found.per_position[i] if i < len(found.per_position)
                                    else 0) for i in range(width)]
        finally:
            api.close()
            proc.terminate()
            proc.wait()
        print(f"block {block + 1}/{len(order)}: {'baseline' if depth is None else depth}",
              flush=True)
    # the probe, on its own start (with the full sliding-window cache it needs)
    port += 1
    proc, api = _start(binary, model, port, args.threads, ["--swa-full"])
    try:
        text = "\n\n".join(t for _, t in prompts) * 4
        _, found_costs, decoded = measure(api, text, RunListener())
    finally:
        api.close()
        proc.terminate()
        proc.wait()
    sizes = sorted(found_costs)
    smooth = non_decreasing([statistics.median(found_costs[k]) for k in sizes])
    cost = CostCurve({1: statistics.median(decoded), **dict(zip(sizes, smooth, strict=True))})
    reached = [rounds_seen, *positions[:-1]]
    profile = [a / r if r else 0.0 for a, r in zip(positions, reached, strict=True)]
    alpha = mean_acceptance(profile)
    print(f"\nacceptance by position at depth 8 ({rounds_seen} rounds): "
          + " ".join(f"{a:.2f}" for a in profile))
    print("cost curve (ms): " + " ".join(f"{k}:{cost.at(k) * 1000:.1f}"
                                         for k in (1, 2, 3, 5, 9, 16)))
    print(f"\n{'depth':>5} {'measured':>9} {'predicted':>10} {'error':>7} {'textbook':>9}")
    errors = []
    for depth in DEPTHS:
        ratios = [statistics.median(rates[depth][d]) / statistics.median(rates[None][d])
                  for d, _ in prompts]
        measured = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        predicted = predicted_speedup(profile, depth, cost)
        error = predicted / measured - 1
        errors.append(abs(error))
        print(f"{depth:>5} {measured:>8.2f}x {predicted:>9.2f}x {error:>+6.0%} "
              f"{textbook_speedup(alpha, depth, 0.0):>8.2f}x")
    print(f"\nmedian absolute error {statistics.median(errors):.0%} over depths {DEPTHS} "
          "(2 and 4 held out: predicted from the depth-8 profile)")
    print(f"load at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
