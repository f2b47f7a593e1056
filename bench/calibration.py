"""Calibration of the speedup's interval on the real llama-server under a changing load.

    .venv/bin/python bench/calibration.py [--runs 3] [--order bracketed|blocked]
                                          [--num-predict 64] [--size bench] [--threads 1]

Runs a cut-down llamacpp-draft (the baseline, the truncated draft ``draft_qwen3_0.6b_n8``
and the unrelated ``draft_qwen2.5_0.5b_n8``; 6 trials per draft, ``--num-predict`` tokens)
``--runs`` times through specsubmit's own runner and LlamaServerEngine, on the seeded tiny
GGUF models of tests/support/realengine (``--size bench``: the 311 MB 12-layer target and
its 1-layer truncation), while a CPU load (one busy process) switches on and off at random
moments (seeded; on 0.5-4 s, off 0.5-4 s). ``--order bracketed`` is the shipped v2 design
(blocks of 3: B D1 D2 B D2 D1 B, the interval over blocks); ``--order blocked`` is v1's (one
block per config, baseline first, the interval over trials, computed as before blocks).

Prints per run the truncated and unrelated drafts' speedup with its 95 % CI, the baseline's
block drift and the verdicts; then the calibration figures:
- coverage: over every ordered pair of runs (i, j), i != j, and both drafts, how often run
  i's 95 % CI holds run j's point estimate (target >= 90 %);
- spread: max / min of the truncated draft's point estimates (target <= 1.25).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.realengine.build import llama_server_binary  # noqa: E402
from tests.support.realengine.ollama_store import add_model  # noqa: E402
from tests.support.realengine.tiny_gguf import model_set_specs, write_model  # noqa: E402

from specschema import Fingerprint, Submission, get_protocol, summarize  # noqa: E402
from specschema.blocks import baseline_drift  # noqa: E402
from specschema.protocol import Protocol  # noqa: E402
from specsubmit.engines.llama_server.engine import LlamaServerEngine  # noqa: E402
from specsubmit.run.runner import RunSettings, run_protocol  # noqa: E402

CONFIGS = ("no_draft", "draft_qwen3_0.6b_n8", "draft_qwen2.5_0.5b_n8")
TRUNCATED, UNRELATED = CONFIGS[1], CONFIGS[2]
NAMES = {"qwen3:14b": "target", "qwen3:0.6b": "draft_truncated",
         "qwen2.5:0.5b": "draft_unrelated"}


def bench_protocol(order: str, num_predict: int) -> Protocol:
    protocol = get_protocol("llamacpp-draft")
    update: dict[str, object] = {
        "configs": [protocol.config(name) for name in CONFIGS],
        "options": protocol.options.model_copy(update={"num_predict": num_predict}),
        "trials_per_config": 6,
    }
    if order == "blocked":
        update.update(order="blocked", block_trials=None, warmup_each_block=False)
    return protocol.model_copy(update=update)


def _spin(stop_at: float) -> None:  # pragma: no cover - the load process
    while time.monotonic() < stop_at:
        pass


def switching_load(seed: int, stop: multiprocessing.synchronize.Event) -> None:
    """On and off at random moments until ``stop``: one busy core while on."""
    rng = random.Random(seed)
    while not stop.is_set():
        busy = multiprocessing.Process(target=_spin, args=(time.monotonic() + rng.uniform(0.5, 4),))
        busy.start()
        busy.join()
        stop.wait(rng.uniform(0.5, 4))


def without_blocks(sub: Submission) -> Submission:
    """The submission as a client before blocks would have sent it (the old estimator)."""
    configs = [c.model_copy(update={"trials": [t.model_copy(update={"block": None})
                                               for t in c.trials]}) for c in sub.configs]
    return sub.model_copy(update={"configs": configs})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--order", choices=["bracketed", "blocked"], default="bracketed")
    parser.add_argument("--num-predict", type=int, default=64)
    parser.add_argument("--size", choices=["bench", "tiny"], default="bench")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--no-load", action="store_true", help="no switching CPU load")
    args = parser.parse_args()

    binary = llama_server_binary()
    protocol = bench_protocol(args.order, args.num_predict)
    print(f"order {args.order}, {len(protocol.schedule())} trials per run, "
          f"{max(protocol.blocks()) + 1} blocks, {args.num_predict} tokens, size {args.size}, "
          f"threads {args.threads}; load average before {os.getloadavg()}")
    results: list[dict[str, tuple[float, float | None, float | None]]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="calibration-") as tmp:
        files, models = Path(tmp) / "gguf", Path(tmp) / "models"
        specs = model_set_specs(args.size)
        written = {role: write_model(files / f"{role}.gguf", specs[role])
                   for role in set(NAMES.values())}
        for name, role in NAMES.items():
            add_model(models, name, written[role])
        for run in range(args.runs):
            stop = multiprocessing.Event()
            load = multiprocessing.Process(target=switching_load, args=(args.seed + run, stop))
            if not args.no_load:
                load.start()
            try:
                settings = RunSettings(protocol=protocol, assume_yes=True)
                with LlamaServerEngine(settings, binary=binary, models_dir=models,
                                       threads=args.threads) as engine:
                    outcome = run_protocol(engine, settings, fingerprint=Fingerprint())
            finally:
                stop.set()
                if not args.no_load:
                    load.join()
            sub = outcome.submission
            assert sub.complete, sub.note
            drift = baseline_drift(sub.configs[0])
            verdicts = {c.name: c.speculation.observed for c in sub.configs[1:]}
            measured = sub if args.order == "bracketed" else without_blocks(sub)
            by_name = {s.name: s for s in summarize(measured)}
            found = {name: (by_name[name].speedup_tps or 0.0, by_name[name].speedup_tps_ci_low,
                            by_name[name].speedup_tps_ci_high) for name in (TRUNCATED, UNRELATED)}
            results.append(found)
            shown = "; ".join(f"{name} {r:.2f}x [{lo or 0:.2f}-{hi or 0:.2f}] "
                              f"wall {by_name[name].speedup_wall or 0:.2f}x"
                              for name, (r, lo, hi) in found.items())
            print(f"run {run + 1}: {shown}; baseline drift "
                  f"{'-' if drift is None else f'{drift:.0%}'}; verdicts {verdicts}", flush=True)
    covered = total = 0
    for i, mine in enumerate(results):
        for j, other in enumerate(results):
            if i == j:
                continue
            for name in (TRUNCATED, UNRELATED):
                _, low, high = mine[name]
                total += 1
                covered += low is not None and high is not None and low <= other[name][0] <= high
    points = [r[TRUNCATED][0] for r in results]
    print(f"coverage: {covered}/{total} = {covered / total:.0%} (target >= 90 %)")
    print(f"truncated draft estimates {', '.join(f'{p:.2f}' for p in points)}: max/min "
          f"{max(points) / min(points):.3f} (target <= 1.25)")
    print(f"{time.monotonic() - started:.0f} s; load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
