"""The tiny-model A/B on a real llama-server: speedup and acceptance per draft, and the
client's overhead per trial against the engine's own timings.

    .venv/bin/python bench/engine_ab.py [--size bench|tiny] [--trials 3] [--num-predict 128]
                                        [--threads 1] [--protocol llamacpp-draft]

Builds (or finds cached) llama-server from the pinned sdist (tests/support/realengine),
writes seeded GGUF models (``--size bench``: the 311 MB 12-layer f16 target, its 1-layer
truncation, an unrelated model with the same vocabulary), lays them out as an Ollama models
folder under the protocol's names (qwen3:14b target, qwen3:0.6b truncated, qwen3:1.7b an
identical copy, qwen2.5:0.5b and qwen2.5:1.5b unrelated) and runs the protocol through
specsubmit's own runner and LlamaServerEngine, with fewer tokens and trials (so the
result's protocol identity is not the shipped one: this is a measurement, not a
submission).

Overhead per trial = the client's wall time for the streamed /completion minus the engine's
prompt_ms + predicted_ms: HTTP, SSE parsing and the runner, everything the engine does not
count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.realengine.build import llama_server_binary  # noqa: E402
from tests.support.realengine.ollama_store import add_model  # noqa: E402
from tests.support.realengine.tiny_gguf import model_set_specs, write_model  # noqa: E402

from specschema import Fingerprint, get_protocol  # noqa: E402
from specsubmit.engines.llama_server.engine import LlamaServerEngine  # noqa: E402
from specsubmit.run.runner import RunSettings, run_protocol  # noqa: E402

NAMES = {"qwen3:14b": "target", "qwen3:0.6b": "draft_truncated",
         "qwen3:1.7b": "draft_identical", "qwen2.5:0.5b": "draft_unrelated",
         "qwen2.5:1.5b": "draft_unrelated"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=["bench", "tiny"], default="bench")
    parser.add_argument("--protocol", default="llamacpp-draft")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--num-predict", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    binary = llama_server_binary()
    protocol = get_protocol(args.protocol)
    protocol = protocol.model_copy(update={
        "options": protocol.options.model_copy(update={"num_predict": args.num_predict}),
        "trials_per_config": args.trials,
        # one block per config: this bench measures speed, bench/calibration.py the blocks
        "order": "blocked", "block_trials": None, "warmup_each_block": False})
    with tempfile.TemporaryDirectory(prefix="engine-ab-") as tmp:
        files, models = Path(tmp) / "gguf", Path(tmp) / "models"
        specs = model_set_specs(args.size)
        written = {role: write_model(files / f"{role}.gguf", specs["target" if role ==
                                                                     "draft_identical" else role])
                   for role in set(NAMES.values())}
        for name, role in NAMES.items():
            add_model(models, name, written[role])
        settings = RunSettings(protocol=protocol, assume_yes=True)
        started = time.monotonic()
        with LlamaServerEngine(settings, binary=binary, models_dir=models,
                               threads=args.threads) as engine:
            outcome = run_protocol(engine, settings, fingerprint=Fingerprint())
            cpu = dict(engine.cpu_seconds)
        elapsed = time.monotonic() - started
    sub = outcome.submission
    base = sub.configs[0]

    def tps(trial: object) -> float:
        return trial.eval_count / trial.eval_duration_ns * 1e9  # type: ignore[attr-defined]

    base_median = statistics.median(tps(t) for t in base.trials)
    base_best = max(tps(t) for t in base.trials)
    print(f"llama-server {sub.engine.version} ({sub.engine.build}); size {args.size}, "
          f"{args.num_predict} tokens, {args.trials} trials + {protocol.warmups_per_config} "
          f"warm-up per config, --threads {args.threads}; {elapsed:.0f} s in all")
    print(f"{'config':24} {'accepted/drafted':>18} {'tok/s med':>10} {'best':>8} "
          f"{'x med':>6} {'x best':>6} {'CPU s':>7} {'same text':>9}")
    for config in sub.configs:
        speeds = [tps(t) for t in config.trials]
        s = config.speculation
        counted = (f"{s.accepted_tokens}/{s.drafted_tokens} "
                   f"({100 * (s.accepted_tokens or 0) / s.drafted_tokens:.0f}%)"
                   if s.drafted_tokens else "-")
        same = {t.output_sha256 for t in config.trials} == {t.output_sha256 for t in base.trials}
        used = cpu.get(config.name)
        print(f"{config.name:24} {counted:>18} {statistics.median(speeds):10.1f} "
              f"{max(speeds):8.1f} {statistics.median(speeds) / base_median:6.2f} "
              f"{max(speeds) / base_best:6.2f} {used if used is not None else float('nan'):7.2f} "
              f"{'yes' if same else 'NO':>9}")
    overheads = [(t.wall_s - t.total_duration_ns / 1e9) * 1e3
                 for c in sub.configs for t in c.trials]
    shares = [(t.wall_s - t.total_duration_ns / 1e9) / t.wall_s * 100
              for c in sub.configs for t in c.trials]
    overheads.sort()
    print(f"client overhead per trial (wall - prompt_ms - predicted_ms), {len(overheads)} "
          f"trials: median {statistics.median(overheads):.2f} ms, p90 "
          f"{overheads[int(0.9 * (len(overheads) - 1))]:.2f} ms, max {overheads[-1]:.2f} ms; "
          f"median {statistics.median(shares):.2f} % of the trial's wall time")


if __name__ == "__main__":
    main()
