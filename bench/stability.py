"""The stability rule and the within-run interval, calibrated in simulation.

    .venv/bin/python bench/stability.py [--runs 2000] [--seed 1] [--reference-rounds 100]
    .venv/bin/python bench/stability.py --real bench/data/calibration-2026-12-04
    .venv/bin/python bench/stability.py --cost

Simulates runs of the current llamacpp-draft protocol's shape (its real schedule: the
baseline and the three drafts llama.cpp runs, two bracketed rounds in blocks of 2 trials,
17 blocks, 34 trials; each block after its own engine start and warm-up), with trial times
from the rates (200 tokens), per-block noise (an engine start) and per-trial noise, and a
1-minute load average as the kernel computes it (exponentially damped, 60 s). The drafts'
true speedups are 1.6x, 1.9x and 1.3x on a quiet machine; under extra load the speedup
itself shifts (``--load-shift`` per busy process: a draft pays more for a busy CPU than the
target alone). Scenarios:

- ``quiet``: nothing changes;
- ``drift``: the machine slows steadily, by 30-60 % over the run (thermal, a battery);
- ``switching``: one busy process switching on and off every 0.5-4 s (bench/calibration.py's
  load): fast against a block, so it averages out;
- ``between``: a constant extra load per run (0-3 busy processes), drawn per run;
- ``step``: the load steps up or down by 1-3 busy processes once, in the middle 80 % of the
  run: what a bracketed design cannot correct.

Per scenario it prints how often each rule calls a run ``unstable`` (the older block-drift
rule, max / min > 1.5, the off-line rule of ``specschema.stability``, and its ``load way``
variant, whose load-aided bound also asks the block to depart the way its load moved:
slower where the load rose), and the coverage
of the 95 % ``block_t`` interval with the baseline interpolated by run position (before)
and by time with the shared baseline blocks counted (now, as ``summary`` computes it for a
run with times): against the run's own truth (its trials' average speedup: what a
within-run interval is about) and against a long reference measurement (``--reference-rounds``
bracketed rounds on a quiet machine: what a reader wants). For the reference, "a correct
interval" is the run's estimate -/+ 1.96 times the estimate's true spread under that run's
conditions (found by simulating the same conditions again): what no within-run interval can
beat when the load changes the speedup between runs.

``--real DIR``: the saved real-engine runs under DIR (bench/calibration.py --save) judged by
both rules; a run made before trials carried times is placed in time by its wall times
back to back (engine starts and warm-ups left out), and without loads only the off-line
rule's load-free bound applies.

``--cost``: CPU time of ``summarize`` + ``submission_verdicts`` (what ingest runs per
submission) on one llamacpp-draft v3 example with blocks, with and without trial times.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specschema import get_protocol, summarize, summarize_configs  # noqa: E402
from specschema.block_ratios import Block, block_drift  # noqa: E402
from specschema.block_t import blocked_ratio_t  # noqa: E402
from specschema.blocks import block_loads, decode_rates, timed, trial_blocks  # noqa: E402
from specschema.payload import parse_submission, submission_bytes  # noqa: E402
from specschema.stability import (  # noqa: E402
    MAX_BASELINE_DRIFT,
    Bounds,
    OffLine,
    judge,
    off_line_blocks,
)
from specschema.stats import median  # noqa: E402

DRAFTS = {"draft_qwen3_0.6b_n3": 1.6, "draft_qwen3_0.6b_n8": 1.9, "draft_qwen3_1.7b_n8": 1.3}
PROTOCOL = get_protocol("llamacpp-draft").for_run({"configs": ",".join(DRAFTS)})
BASE_TPS = 25.0  # the target's decode rate on a quiet machine
TOKENS = 200
START_S = 4.0  # an engine start, and a warm-up of a few tokens
ENGINE_LOAD = 2.0  # the engine's own threads in the load average
SCENARIOS = ("quiet", "drift", "switching", "between", "step")


@dataclass(frozen=True)
class Conditions:
    """What the machine does during one run: speed factor and extra load over time."""

    speed: Callable[[float], float]
    load: Callable[[float], float]


@dataclass(frozen=True)
class Noise:
    block: float = 0.04  # an engine start's own speed (log sd)
    trial: float = 0.02
    load_shift: float = 0.06  # the speedup's fall per extra busy process


def conditions(scenario: str, rng: random.Random, length_s: float) -> Conditions:
    if scenario == "quiet":
        return Conditions(lambda t: 1.0, lambda t: 0.0)
    if scenario == "drift":
        fall = rng.uniform(0.3, 0.6)
        return Conditions(lambda t: 1.0 - fall * min(t / length_s, 1.0), lambda t: 0.0)
    if scenario == "switching":
        edges, t, on = [], 0.0, rng.random() < 0.5
        while t < length_s * 1.5:
            t += rng.uniform(0.5, 4.0)
            edges.append(t)

        def busy(t: float) -> float:
            flips = sum(1 for e in edges if e <= t)
            return 1.0 if (flips % 2 == 0) == on else 0.0
        return Conditions(lambda t: 1.0 / (1.0 + 0.3 * busy(t)), busy)
    if scenario == "between":
        steady = float(rng.randint(0, 3))
        return Conditions(lambda t: 1.0 / (1.0 + 0.3 * steady), lambda t: steady)
    if scenario == "step":
        at = rng.uniform(0.1, 0.9) * length_s
        before, after = (0.0, float(rng.randint(1, 3)))
        if rng.random() < 0.5:
            before, after = after, before

        def extra(t: float) -> float:
            return after if t >= at else before
        return Conditions(lambda t: 1.0 / (1.0 + 0.3 * extra(t)), extra)
    raise ValueError(scenario)


@dataclass
class Run:
    """One simulated run's blocks: per config, (centre by time, centre by position,
    rates) per block, the baseline's block loads, and each draft's own true speedup."""

    blocks: dict[str, list[tuple[float, float, list[float]]]]
    loads: list[float]
    truth: dict[str, float]


def simulate(cond: Conditions, rng: random.Random, noise: Noise, rounds: int = 2) -> Run:
    protocol = PROTOCOL.model_copy(update={"trials_per_config": 4 * rounds})
    schedule, numbers = protocol.schedule(), protocol.blocks()
    t, load_avg = 0.0, ENGINE_LOAD + cond.load(0.0)
    blocks: dict[str, list[tuple[float, float, list[float]]]] = {n: [] for n in
                                                                  ["no_draft", *DRAFTS]}
    times: list[float] = []
    positions: list[int] = []
    rates: list[float] = []
    loads: list[float] = []
    shifts: dict[str, list[float]] = {n: [] for n in DRAFTS}
    current, block_noise = -1, 0.0

    def close(name: str) -> None:
        if rates:
            blocks[name].append((sum(times) / len(times), sum(positions) / len(positions),
                                 list(rates)))
            if name == "no_draft":
                loads.append(sum(load_samples) / len(load_samples))

    load_samples: list[float] = []
    name = schedule[0][0]
    for position, ((name_now, _), number) in enumerate(zip(schedule, numbers, strict=True)):
        if number != current:
            if current >= 0:
                close(name)
            times, positions, rates, load_samples = [], [], [], []
            current, name = number, name_now
            block_noise = rng.gauss(0.0, noise.block)
            t += START_S
        extra = cond.load(t)
        speedup = DRAFTS.get(name, 1.0)
        if name in DRAFTS:
            speedup *= max(0.2, 1.0 - noise.load_shift * extra)
            shifts[name].append(speedup)
        rate = BASE_TPS * cond.speed(t) * speedup * math.exp(block_noise
                                                             + rng.gauss(0.0, noise.trial))
        duration = TOKENS / rate + 0.5
        times.append(t + duration / 2.0)
        positions.append(position)
        rates.append(rate)
        t += duration
        # the kernel's 1-minute load: damped towards the runnable processes
        load_avg += (ENGINE_LOAD + cond.load(t) - load_avg) * (1.0 - math.exp(-duration / 60.0))
        load_samples.append(load_avg + rng.gauss(0.0, 0.05))
    close(name)
    truth = {n: math.exp(statistics.fmean(math.log(v) for v in s)) for n, s in shifts.items()}
    return Run(blocks, loads, truth)


def run_length(rng: random.Random, noise: Noise) -> float:
    run = simulate(Conditions(lambda t: 1.0, lambda t: 0.0), rng, noise)
    return max(c for blocks in run.blocks.values() for c, _, _ in blocks)


def estimates(run: Run, by_time: bool) -> dict[str, tuple[float, float | None, float | None]]:
    def place(block: tuple[float, float, list[float]]) -> Block:
        return Block(block[0] if by_time else block[1], tuple(block[2]))

    base = [place(b) for b in run.blocks["no_draft"]]
    out = {}
    for name in DRAFTS:
        own = [place(b) for b in run.blocks[name]]
        found = blocked_ratio_t(own, base, shared_baseline=by_time)
        out[name] = (found.ratio, found.ci_low, found.ci_high)
    return out


def breaks_load_way(block: OffLine, bounds: Bounds) -> bool:
    """The off-line rule with its load-aided bound asking the departure to go the load's
    way (slower where the load rose, faster where it fell): the variant the shipped rule
    is compared with (``--real`` and the ``load way`` column)."""
    if not block.breaks(bounds):
        return False
    return (abs(block.residual) > bounds.off_line
            or (block.load_change or 0.0) * block.residual < 0)


def rules(run: Run, bounds: Bounds) -> tuple[bool, bool, bool]:
    """The older block-drift rule, the shipped off-line rule, and its load-way variant."""
    base = run.blocks["no_draft"]
    medians = [median(b[2]) for b in base]
    drift = block_drift(medians)
    old = drift is not None and drift > MAX_BASELINE_DRIFT
    blocks = off_line_blocks([b[0] for b in base], medians, run.loads)
    unstable, _ = judge(blocks, bounds)
    return old, unstable, any(breaks_load_way(b, bounds) for b in blocks)


def covers(found: tuple[float, float | None, float | None], value: float) -> bool:
    _, low, high = found
    return low is not None and high is not None and low <= value <= high


def reference(rng: random.Random, noise: Noise, rounds: int) -> dict[str, float]:
    """A long measurement on a quiet machine: ``rounds`` bracketed rounds."""
    run = simulate(Conditions(lambda t: 1.0, lambda t: 0.0), rng, noise, rounds)
    return {name: found[0] for name, found in estimates(run, by_time=True).items()}


def real(folders: list[Path]) -> None:
    """The saved real runs, by both rules (see the module docstring)."""
    import json

    print(f"{'run':<48} {'drift':>6} {'old':>9} {'off line':>9} {'off-line':>9} "
          f"{'load way':>9} {'draft':>8}")
    for path in sorted(p for folder in folders for p in folder.rglob("run*.json")):
        timed_sub = sub = parse_submission(path.read_bytes())
        if not timed(sub.configs):  # made before times: the wall times back to back
            data = json.loads(submission_bytes(sub))
            trials = sorted((t for c in data["configs"] for t in c["trials"]),
                            key=lambda t: t["position"])
            clock = 0.0
            for trial in trials:
                trial["started_s"] = round(clock, 3)
                clock += trial["wall_s"]
            timed_sub = parse_submission(json.dumps(data).encode())
        base = timed_sub.configs[0]
        kept = [(b, load) for b, load in zip(
            trial_blocks(base.trials, decode_rates(base.trials), True),
            block_loads(base.trials), strict=True) if b.values]
        medians = [median(b.values) for b, _ in kept]
        drift = block_drift(medians) or 0.0
        blocks = off_line_blocks([b.centre for b, _ in kept], medians,
                                 [load for _, load in kept])
        flagged, worst = judge(blocks)
        load_way = any(breaks_load_way(b, Bounds()) for b in blocks)
        loads = [load for _, load in kept if load is not None]
        seen = f" load {min(loads):.1f}-{max(loads):.1f}" if loads else ""
        moved = ("" if worst is None or worst.load_change is None
                 else f" (its load {worst.load_change:+.1f})")
        # block_t, as the shipped protocols (a cut-down bench protocol is not shipped)
        draft = next((s for s in summarize_configs(timed_sub.configs, interval="block_t")
                      if s.role == "draft"), None)
        print(f"{str(path.relative_to(folders[0].parent)):<48} {drift:>6.0%} "
              f"{'unstable' if drift > MAX_BASELINE_DRIFT else 'stable':>9} "
              f"{(worst.residual if worst else 0.0):>+9.0%} "
              f"{'unstable' if flagged else 'stable':>9} "
              f"{'unstable' if load_way else 'stable':>9} "
              f"{(draft.speedup_tps or 0.0) if draft else 0.0:>7.2f}x{moved}{seen}")


def cost(rounds: int = 3, calls: int = 300) -> None:
    """The summary and verdicts of one submission, untimed and timed (module docstring)."""
    import json
    import time
    from datetime import UTC, datetime

    from specschema import submission_verdicts
    from specschema.examples import example_submission

    protocol = get_protocol("llamacpp-draft")
    plain = example_submission(protocol, seed=5, engine_version="b1", schema_version=2,
                               runtime="ggml", counters_seen=True, blocks=True, drift=0.3,
                               created_at=datetime(2026, 12, 1, tzinfo=UTC),
                               draft_speedups={"draft_qwen3_0.6b_n8": 2.0})
    data = json.loads(submission_bytes(plain))
    clock = 0.0
    for trial in sorted((t for c in data["configs"] for t in c["trials"]),
                        key=lambda t: t["position"]):
        trial["started_s"], trial["load_1m"] = round(clock, 3), 1.0
        clock += trial["wall_s"]
    timed_run = parse_submission(json.dumps(data).encode())
    for round_ in range(rounds):
        for name, sub in (("without times", plain), ("with times", timed_run)):
            began = time.process_time()
            for _ in range(calls):
                summarize(sub)
                submission_verdicts(sub)
            spent = (time.process_time() - began) / calls * 1000
            print(f"round {round_ + 1}: {name:<14} {spent:.3f} CPU ms per submission")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, nargs="+", default=None)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reference-rounds", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=60,
                        help="runs under the same conditions, for the correct interval")
    parser.add_argument("--load-shift", type=float, default=Noise.load_shift)
    parser.add_argument("--block-noise", type=float, default=Noise.block)
    parser.add_argument("--cost", action="store_true")
    args = parser.parse_args()
    if args.cost:
        cost()
        return
    if args.real:
        real(args.real)
        return
    noise = Noise(block=args.block_noise, load_shift=args.load_shift)
    rng = random.Random(args.seed)
    length = run_length(rng, noise)
    ref = reference(rng, noise, args.reference_rounds)
    print(f"protocol {PROTOCOL.id} v{PROTOCOL.version}, 17 blocks, {len(PROTOCOL.schedule())} "
          f"trials, ~{length / 60:.1f} min quiet; noise: block {noise.block}, trial "
          f"{noise.trial}, speedup -{noise.load_shift:.0%} per busy process; "
          f"reference ({args.reference_rounds} quiet rounds): "
          + ", ".join(f"{ref[n]:.3f}x" for n in DRAFTS))
    print(f"{'scenario':<10} {'runs':>5} {'old rule':>9} {'off-line':>9} {'load way':>9} "
          f"{'cover own: pos':>15} {'time':>6} {'cover ref: time':>16} {'stable only':>12} "
          f"{'correct':>8}")
    bounds = Bounds()
    for scenario in SCENARIOS:
        old = new = load_way = 0
        own_pos = own_time = ref_time = ref_stable = stable_cells = cells = 0
        correct = correct_cells = 0
        for index in range(args.runs):
            cond = conditions(scenario, rng, length)
            run = simulate(cond, rng, noise)
            flagged_old, flagged, flagged_load_way = rules(run, bounds)
            old += flagged_old
            new += flagged
            load_way += flagged_load_way
            by_pos, by_time = estimates(run, False), estimates(run, True)
            for name in DRAFTS:
                cells += 1
                own_pos += covers(by_pos[name], run.truth[name])
                own_time += covers(by_time[name], run.truth[name])
                ref_time += covers(by_time[name], ref[name])
                if not flagged:
                    stable_cells += 1
                    ref_stable += covers(by_time[name], ref[name])
            if index < args.runs // 20:  # the correct interval: the same conditions again
                again = [estimates(simulate(cond, rng, noise), True)
                         for _ in range(args.replicas)]
                for name in DRAFTS:
                    spread = statistics.stdev(math.log(e[name][0]) for e in again)
                    centre = math.log(by_time[name][0])
                    correct_cells += 1
                    correct += abs(centre - math.log(ref[name])) <= 1.96 * spread
        print(f"{scenario:<10} {args.runs:>5} {old / args.runs:>9.1%} {new / args.runs:>9.1%} "
              f"{load_way / args.runs:>9.1%} "
              f"{own_pos / cells:>15.1%} {own_time / cells:>6.1%} {ref_time / cells:>16.1%} "
              f"{(ref_stable / stable_cells if stable_cells else float('nan')):>12.1%} "
              f"{correct / max(correct_cells, 1):>8.1%}")


if __name__ == "__main__":
    main()
