"""Runs to a budget under a switching load: ``specsubmit run --budget`` as a contributor
runs it, against the real llama-server, several times in a row.

    flock /tmp/specatlas-engine.lock .venv/bin/python bench/budget_runs.py \\
        [--runs 4] [--budget 10] [--protocol llamacpp-draft] [--configs A,B] \\
        [--threads 1] [--seed 0] [--no-load] --save DIR

Each run is the real console script (``specsubmit run --engine llama-server --no-submit
--json``) on the seeded ``bench`` models of tests/support/realengine (the 311 MB 12-layer
f16 target, its 1-layer truncation as ``qwen3:0.6b``, the identical copy as
``qwen3:1.7b``, the small unrelated draft as both qwen2.5 names), in an Ollama models
folder written once, while one busy process switches on and off at random moments
(``bench/calibration.py``'s load, seeded by ``--seed`` plus the run's number). Per run it
keeps the result (``runN.json``), the stderr with each line's time (``stderr-runN.txt``)
and the driver's record (``meta-runN.json``: times, the 1-minute load average every 10 s,
the command, the exit code). It prints per run: wall time, load, the plan's first line and
when it was printed, the rounds run, the stability verdict, and each draft's verdict and
estimate with its 95 % within-run interval; then how far apart the runs' estimates are
(max / min per draft, over the runs that are not ``unstable``).

What it answers (the budget's done-when): is the plan printed before the first trial,
does every run end within the budget + 20 %, how many runs reach a verdict other than
``unstable``, and do their estimates agree within 1.15x.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.support.realengine.build import llama_server_binary  # noqa: E402
from tests.support.realengine.fixtures import RUN_NAMES  # noqa: E402
from tests.support.realengine.ollama_store import add_model  # noqa: E402
from tests.support.realengine.tiny_gguf import write_model_set  # noqa: E402

from calibration import ramping_load, switching_load  # type: ignore[import-not-found]  # noqa: E402
from specschema import summarize  # noqa: E402
from specschema.blocks import timed  # noqa: E402
from specschema.payload import parse_submission  # noqa: E402
from specschema.stability import baseline_stability  # noqa: E402

SCRIPT = Path(sys.executable).with_name("specsubmit")


def models_folder(directory: Path) -> Path:
    roles = write_model_set(directory / "gguf", size="bench").by_role()
    folder = directory / "models"
    for name, role in RUN_NAMES.items():
        add_model(folder, name, roles[role])
    return folder


def one_run(run: int, args: argparse.Namespace, models: Path, home: Path) -> dict[str, object]:
    command = [str(SCRIPT), "run", "--engine", "llama-server", "--protocol", args.protocol,
               "--no-submit", "--json", "--llama-threads",
               str(args.threads), "--ollama-models", str(models), "--llama-server",
               str(llama_server_binary())]
    if args.budget is not None:
        command += ["--budget", str(args.budget)]
    if args.configs:
        command += ["--configs", args.configs]
    env = {**os.environ, "SPECSUBMIT_HOME": str(home), "COLUMNS": "160"}
    stop = multiprocessing.Event()
    # busy processes switching on and off (calibration.py's load), each with its own seed,
    # or, with a ramp, busy for a growing share of the time (a steady drift)
    busy = 0 if args.no_load else getattr(args, "load_processes", 1)
    ramp_s: float | None = getattr(args, "ramp_s", None)
    loads_on = [multiprocessing.Process(target=ramping_load, args=(ramp_s, stop))
                if ramp_s else
                multiprocessing.Process(target=switching_load,
                                        args=(args.seed + run + 1000 * k, stop))
                for k in range(busy)]
    for process in loads_on:
        process.start()
    loads: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(10):
            loads.append(round(os.getloadavg()[0], 2))

    sampler = threading.Thread(target=sample, daemon=True)
    began, start_utc = time.monotonic(), datetime.now(UTC)
    sampler.start()
    lines: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, stdin=subprocess.DEVNULL) as proc:
        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(f"{time.monotonic() - began:8.1f}  {line}")

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert proc.stdout is not None
        stdout = proc.stdout.read()
        code = proc.wait()
        reader.join(10)
    wall = time.monotonic() - began
    done.set()
    stop.set()
    for process in loads_on:
        process.join(10)
    save: Path = args.save
    (save / f"stderr-run{run}.txt").write_text("".join(lines))
    if stdout.strip():
        (save / f"run{run}.json").write_text(stdout)
    meta: dict[str, object] = {
        "run": run, "start_utc": f"{start_utc:%H:%M:%S}",
        "end_utc": f"{datetime.now(UTC):%H:%M:%S}",
        "wall_s": round(wall, 1), "rc": code, "load_1m_every_10s": loads,
        "load_min": min(loads, default=None), "load_max": max(loads, default=None),
        "load_mean": round(sum(loads) / len(loads), 2) if loads else None,
        "command": command, "switching_load": not args.no_load and not ramp_s,
        "ramp_s": ramp_s, "load_processes": busy,
        "seed": args.seed + run}
    (save / f"meta-run{run}.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def describe(run: int, meta: dict[str, object], save: Path, budget_min: float) -> dict[str, float]:
    """One line per run; returns each draft's estimate when the run is not unstable."""
    stderr = (save / f"stderr-run{run}.txt").read_text().splitlines()
    plan = next((line for line in stderr if "plan: " in line), "(no plan printed)")
    wall = float(meta["wall_s"])  # type: ignore[arg-type]
    within = "yes" if wall <= budget_min * 60 * 1.2 else "no"
    print(f"run {run}: rc {meta['rc']}, {wall / 60:.1f} min (within budget + 20 %: {within}), "
          f"load {meta['load_min']}-{meta['load_max']} (mean {meta['load_mean']})")
    print(f"  {plan.strip()}")
    last = [line for line in stderr if "budget of" in line or "error" in line.lower()]
    for line in last[-2:]:
        print(f"  {line.strip()}")
    path = save / f"run{run}.json"
    if not path.exists():
        print("  no result")
        return {}
    sub = parse_submission(path.read_bytes())
    found_stability = baseline_stability(sub.configs[0], timed(sub.configs))
    stable = ("no blocks" if found_stability is None else
              f"{'unstable' if found_stability.unstable else 'stable'} "
              f"({found_stability.rule}, drift {found_stability.drift or 0.0:.0%}"
              + ("" if found_stability.worst is None else
                 f", worst block {found_stability.worst.residual:+.0%} off its line")
              + ")")
    rounds = sub.protocol.parameters.get("rounds", "the protocol's")
    stopped = sub.protocol.parameters.get("stopped", "none")
    print(f"  rounds: {rounds}; stopped after the first round: {stopped}; stability: {stable}")
    found: dict[str, float] = {}
    for summary in summarize(sub):
        if summary.name == sub.configs[0].name or summary.speedup_tps is None:
            continue
        low, high = summary.speedup_tps_ci_low, summary.speedup_tps_ci_high
        print(f"  {summary.name}: {summary.observed} {summary.speedup_tps:.2f}x "
              f"[{low if low is None else f'{low:.2f}'}-{high if high is None else f'{high:.2f}'}]")
        if summary.observed != "unstable":
            found[summary.name] = summary.speedup_tps
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--protocol", default="llamacpp-draft")
    parser.add_argument("--configs", default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-load", action="store_true")
    parser.add_argument("--save", type=Path, required=True)
    parser.add_argument("--analyse", action="store_true", help="read saved runs only")
    args = parser.parse_args()
    args.save.mkdir(parents=True, exist_ok=True)
    metas: dict[int, dict[str, object]] = {}
    if args.analyse:
        for path in sorted(args.save.glob("meta-run*.json")):
            meta = json.loads(path.read_text())
            metas[int(meta["run"])] = meta
    else:
        with tempfile.TemporaryDirectory(prefix="budget-runs-") as tmp:
            models = models_folder(Path(tmp))
            for run in range(1, args.runs + 1):
                metas[run] = one_run(run, args, models, Path(tmp) / f"home{run}")
    estimates: dict[str, list[float]] = {}
    for run, meta in sorted(metas.items()):
        for name, value in describe(run, meta, args.save, args.budget).items():
            estimates.setdefault(name, []).append(value)
    for name, values in estimates.items():
        print(f"{name}: {len(values)} runs not unstable, "
              f"max / min {max(values) / min(values):.3f}" if len(values) > 1 else
              f"{name}: {len(values)} run not unstable")


if __name__ == "__main__":
    main()
