"""Calibration of the speedup's interval on the real llama-server under a changing load.

    .venv/bin/python bench/calibration.py [--runs 5] [--versions 2 3] [--num-predict 64]
                                          [--size bench] [--threads 1] [--save DIR]
    .venv/bin/python bench/calibration.py --analyse DIR [DIR ...]

Runs a cut-down llamacpp-draft (the baseline, the truncated draft ``draft_qwen3_0.6b_n8``
and the unrelated ``draft_qwen2.5_0.5b_n8``, ``--num-predict`` tokens) ``--runs`` times
through specsubmit's own runner and LlamaServerEngine, on the seeded tiny GGUF models of
tests/support/realengine (``--size bench``: the 311 MB 12-layer target and its 1-layer
truncation), while a CPU load (one busy process) switches on and off at random moments
(seeded; on 0.5-4 s, off 0.5-4 s). ``--versions`` picks the designs of those llamacpp-draft
versions: 1 (one block per config, baseline first, the interval over trials), 2 (bracketed,
blocks of 3: B D1 D2 B D2 D1 B) or 3 (bracketed twice, blocks of 2: 4 blocks per draft);
with several, their runs alternate (v2, v3, v2, v3, ...) so that they share the load.

Every run's result is read with each interval method that applies to it, on the same
trials: "trials" (ratio of medians, bootstrap over trials; the design of version 1),
"block_bootstrap" (version 2's method) and "block_t" (version 3's). Per run it prints the
two drafts' speedups with their 95 % CI, the baseline's block drift and the verdicts; then
per method the calibration figures:
- coverage: over every ordered pair of runs (i, j), i != j, and both drafts, how often run
  i's 95 % CI holds run j's point estimate (target >= 90 %). Even an exact 95 % CI covers
  another run's estimate less often than 95 % (both estimates vary: about 83 % for a
  normal interval with a known spread, about 89 % for t with 3 degrees of freedom);
- coverage of the others' median: how often run i's CI holds the median of the other runs'
  estimates (closer to the true value; what a 95 % CI is about);
- spread: max / min of the truncated draft's point estimates (target <= 1.25).
``--save DIR`` writes every run's submission to DIR/v<version>/; ``--analyse DIR...``
reads saved runs back (one folder per design) and prints the same figures.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import multiprocessing.synchronize
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

from specschema import Fingerprint, Submission, summarize_configs  # noqa: E402
from specschema.block_t import blocked_ratio_t  # noqa: E402
from specschema.blocks import baseline_drift, decode_rates, has_blocks, trial_blocks  # noqa: E402
from specschema.payload import parse_submission, submission_bytes  # noqa: E402
from specschema.protocol import Protocol  # noqa: E402
from specschema.protocol_files import all_protocols  # noqa: E402
from specschema.stats import median  # noqa: E402
from specsubmit.engines.llama_server.engine import LlamaServerEngine  # noqa: E402
from specsubmit.run.runner import RunSettings, run_protocol  # noqa: E402

CONFIGS = ("no_draft", "draft_qwen3_0.6b_n8", "draft_qwen2.5_0.5b_n8")
TRUNCATED, UNRELATED = CONFIGS[1], CONFIGS[2]
NAMES = {"qwen3:14b": "target", "qwen3:0.6b": "draft_truncated",
         "qwen2.5:0.5b": "draft_unrelated"}
METHODS = ("trials", "block_bootstrap", "block_t")

Estimate = tuple[float, float | None, float | None]


def bench_protocol(version: int, num_predict: int) -> Protocol:
    """That version's design on the three configs (version 1 as v2's, one block each)."""
    protocol = next(p for p in all_protocols()
                    if (p.id, p.version) == ("llamacpp-draft", max(version, 2)))
    update: dict[str, object] = {
        "configs": [protocol.config(name) for name in CONFIGS],
        "options": protocol.options.model_copy(update={"num_predict": num_predict}),
    }
    if version == 1:
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


def ramping_load(ramp_s: float, stop: multiprocessing.synchronize.Event) -> None:
    """A steady drift: busy for a share of every 0.1 s that grows from 0 to 1 over
    ``ramp_s`` seconds, then stays busy until ``stop``. The machine slows smoothly, with no
    step, which is what the bracketed design corrects and the stability rule must let pass."""
    began = time.monotonic()
    while not stop.is_set():
        share = min(1.0, (time.monotonic() - began) / ramp_s)
        _spin(time.monotonic() + 0.1 * share)
        if share < 1.0:
            time.sleep(0.1 * (1.0 - share))


def without_blocks(sub: Submission) -> Submission:
    """The submission as a client before blocks would have sent it (the old estimator)."""
    configs = [c.model_copy(update={"trials": [t.model_copy(update={"block": None})
                                               for t in c.trials]}) for c in sub.configs]
    return sub.model_copy(update={"configs": configs})


def methods_for(sub: Submission) -> tuple[str, ...]:
    """The methods that read this run: over trials always; over blocks when every config
    has two blocks or more (one block per config has no between-block spread)."""
    blocks = {t.block for t in sub.configs[1].trials}
    return METHODS if has_blocks(sub.configs[0].trials) and len(blocks) >= 2 else METHODS[:1]


def estimates(sub: Submission, method: str) -> dict[str, Estimate]:
    if method == "trials":
        summaries = summarize_configs(without_blocks(sub).configs)
    else:
        summaries = summarize_configs(sub.configs, interval=method)
    by_name = {s.name: s for s in summaries}
    return {name: (by_name[name].speedup_tps or 0.0, by_name[name].speedup_tps_ci_low,
                   by_name[name].speedup_tps_ci_high) for name in (TRUNCATED, UNRELATED)}


def describe(run: int, sub: Submission) -> None:
    drift = baseline_drift(sub.configs[0])
    verdicts = {c.name: c.speculation.observed for c in sub.configs[1:]}
    print(f"run {run + 1}: baseline drift {'-' if drift is None else f'{drift:.0%}'}; "
          f"verdicts {verdicts}", flush=True)
    if has_blocks(sub.configs[0].trials):
        base, draft = sub.configs[0], next(c for c in sub.configs if c.name == TRUNCATED)
        ratios = blocked_ratio_t(trial_blocks(draft.trials, decode_rates(draft.trials)),
                                 trial_blocks(base.trials, decode_rates(base.trials)))
        medians = [median(b.values) for b in trial_blocks(base.trials, decode_rates(base.trials))
                   if b.values]
        print(f"  baseline block medians {', '.join(f'{m:.1f}' for m in medians)} tok/s; "
              f"{TRUNCATED} block ratios {', '.join(f'{r:.2f}' for r in ratios.block_ratios)}")
    for method in methods_for(sub):
        found = estimates(sub, method)
        print(f"  {method:15s} " + "; ".join(
            f"{name} {r:.2f}x [{lo or 0:.2f}-{hi or 0:.2f}]" for name, (r, lo, hi)
            in found.items()), flush=True)


def calibration(results: list[dict[str, Estimate]]) -> str:
    covered = covered_median = total = 0
    for i, mine in enumerate(results):
        others = [other for j, other in enumerate(results) if j != i]
        for name in (TRUNCATED, UNRELATED):
            _, low, high = mine[name]
            points = sorted(other[name][0] for other in others)
            centre = (points[len(points) // 2] if len(points) % 2
                      else (points[len(points) // 2 - 1] + points[len(points) // 2]) / 2)
            inside = low is not None and high is not None
            covered_median += inside and low <= centre <= high  # type: ignore[operator]
            for point in points:
                total += 1
                covered += inside and low <= point <= high  # type: ignore[operator]
    pairs = len(results) * 2
    truncated = [r[TRUNCATED][0] for r in results]
    return (f"coverage {covered}/{total} = {covered / total:.0%} (target >= 90 %); "
            f"of the others' median {covered_median}/{pairs} = {covered_median / pairs:.0%}; "
            f"intervals overlapping {overlapping(results)}; "
            f"truncated draft {', '.join(f'{p:.2f}' for p in truncated)}: max/min "
            f"{max(truncated) / min(truncated):.3f} (target <= 1.25)")


def overlapping(results: list[dict[str, Estimate]]) -> str:
    """How many pairs of runs have 95 % intervals that overlap, per draft."""
    counts = []
    for name in (TRUNCATED, UNRELATED):
        spans = [(r[name][1], r[name][2]) for r in results]
        pairs = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:]]
        both = sum(None not in (*a, *b) and max(a[0], b[0]) <= min(a[1], b[1])  # type: ignore[type-var]
                   for a, b in pairs)
        counts.append(f"{name} {both}/{len(pairs)}")
    return ", ".join(counts)


def report(subs: list[Submission]) -> None:
    for run, sub in enumerate(subs):
        describe(run, sub)
    if len(subs) < 2:
        print("calibration needs two runs or more")
        return
    for method in methods_for(subs[0]):
        found = [estimates(s, method) for s in subs]
        print(f"{method}: {calibration(found)}")
        # The unstable rule's question: do runs whose baseline blocks disagree more read
        # estimates farther from the other runs'?
        rows = []
        for i, (sub, mine) in enumerate(zip(subs, found, strict=True)):
            drift = baseline_drift(sub.configs[0])
            others = sorted(f[TRUNCATED][0] for j, f in enumerate(found) if j != i)
            centre = others[len(others) // 2] if len(others) % 2 else (
                others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
            rows.append(f"{'-' if drift is None else f'{drift:.0%}'} -> "
                        f"{mine[TRUNCATED][0] / centre - 1:+.0%}")
        print(f"  baseline drift -> truncated estimate vs the others' median: {'; '.join(rows)}")
    dependence = load_dependence(subs)
    if dependence is not None:
        print(f"load dependence: {dependence}")


def load_dependence(subs: list[Submission]) -> str | None:
    """Whether the speedup itself moves with the machine's speed: over every truncated-draft
    block of every run, the correlation of its log block ratio with the log of the baseline
    rate it was divided by (negative: the draft helps more on a slower, busier machine)."""
    points: list[tuple[float, float]] = []
    for sub in subs:
        base, draft = sub.configs[0], next(c for c in sub.configs if c.name == TRUNCATED)
        if not has_blocks(base.trials):
            return None
        num = trial_blocks(draft.trials, decode_rates(draft.trials))
        ratios = blocked_ratio_t(num, trial_blocks(base.trials, decode_rates(base.trials)))
        for block, ratio in zip((b for b in num if b.values), ratios.block_ratios, strict=True):
            points.append((math.log(median(block.values) / ratio), math.log(ratio)))
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return (f"{len(points)} truncated-draft blocks: correlation of log block ratio with log "
            f"baseline rate {sxy / math.sqrt(sxx * syy):+.2f}, slope {sxy / sxx:+.2f} (ratio ~ "
            f"baseline^slope); baseline block medians {min(math.exp(x) for x in xs):.1f}-"
            f"{max(math.exp(x) for x in xs):.1f} tok/s")


def measure(args: argparse.Namespace) -> dict[int, list[Submission]]:
    binary = llama_server_binary()
    protocols = {v: bench_protocol(v, args.num_predict) for v in args.versions}
    for version, protocol in protocols.items():
        print(f"design of llamacpp-draft v{version}: {len(protocol.schedule())} trials per run, "
              f"{max(protocol.blocks()) + 1} blocks", flush=True)
    print(f"{args.num_predict} tokens, size {args.size}, threads {args.threads}; "
          f"load average before {os.getloadavg()}", flush=True)
    subs: dict[int, list[Submission]] = {v: [] for v in args.versions}
    with tempfile.TemporaryDirectory(prefix="calibration-") as tmp:
        files, models = Path(tmp) / "gguf", Path(tmp) / "models"
        specs = model_set_specs(args.size)
        written = {role: write_model(files / f"{role}.gguf", specs[role])
                   for role in set(NAMES.values())}
        for name, role in NAMES.items():
            add_model(models, name, written[role])
        for run, version in ((r, v) for r in range(args.runs) for v in args.versions):
            protocol = protocols[version]
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
            if args.save is not None:
                folder = args.save / f"v{version}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"run{run + 1}.json").write_bytes(submission_bytes(sub))
            print(f"v{version} ", end="")
            describe(run, sub)
            subs[version].append(sub)
    return subs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--versions", type=int, nargs="+", choices=[1, 2, 3], default=[2, 3])
    parser.add_argument("--num-predict", type=int, default=64)
    parser.add_argument("--size", choices=["bench", "tiny"], default="bench")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--no-load", action="store_true", help="no switching CPU load")
    parser.add_argument("--save", type=Path, help="write every run's submission here")
    parser.add_argument("--analyse", type=Path, nargs="+", metavar="DIR",
                        help="read saved runs instead of running")
    args = parser.parse_args()
    started = time.monotonic()
    if args.analyse:
        for folder in args.analyse:
            subs = [parse_submission(path.read_bytes())
                    for path in sorted(folder.glob("run*.json"))]
            print(f"--- {folder}: {len(subs)} saved runs")
            report(subs)
        return
    measured = measure(args)
    for version, subs in measured.items():
        print(f"--- calibration, design of v{version}")
        report(subs)
    print(f"{time.monotonic() - started:.0f} s; load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
