"""llama-server's decode rate per --threads setting, on a quiet and on a loaded machine
(the choice behind specsubmit's default --llama-threads).

    .venv/bin/python bench/llama_threads.py [--size tiny|bench] [--requests 3]
                                            [--num-predict 96] [--hogs N]

For each condition (as found, then with N busy-loop processes, one per logical CPU by
default, as another program's load would be) and each setting (llama-server's own default:
no flag; 1; logical CPUs - 1; physical cores; specsubmit's default), it starts the pinned
llama-server (tests/support/realengine) twice, without and with the 1-layer truncated
draft, sends a warm-up and ``--requests`` greedy /completion requests and prints the median
decode rate (the engine's ``predicted_n / predicted_ms``). Prints the 1-minute load average
before each condition: other sessions on a shared machine load it too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.realengine.build import llama_server_binary  # noqa: E402
from tests.support.realengine.tiny_gguf import model_set_specs, write_model  # noqa: E402

from specsubmit.engines.llama_server import process  # noqa: E402
from specsubmit.engines.llama_server.api import LlamaServerApi  # noqa: E402
from specsubmit.engines.llama_server.threads import default_threads, physical_cores  # noqa: E402

HOG = "while True:\n    pass\n"


def _start(binary: Path, model: Path, draft: Path | None, threads: int | None,
           log: Path) -> tuple[subprocess.Popen[bytes], LlamaServerApi]:
    port = process.free_port()
    args = [str(binary), "--model", str(model), "--host", process.HOST, "--port", str(port),
            "--parallel", "1", "--poll", "0", "--no-warmup", "--ctx-size", "1024"]
    if threads is not None:
        args += ["--threads", str(threads), "--threads-batch", str(threads)]
    if draft is not None:
        args += ["--spec-type", "draft-simple", "--spec-draft-model", str(draft),
                 "--spec-draft-n-max", "8"]
    proc = process.spawn(args, log, process.clean_env(None))
    api = LlamaServerApi(f"http://{process.HOST}:{port}", timeout_s=600)
    if not process.wait_until(api.healthy, proc, 300):
        process.stop(proc)
        raise SystemExit(f"llama-server did not start: {process.log_tail(log)[-3:]}")
    return proc, api


def _rate(binary: Path, model: Path, draft: Path | None, threads: int | None, requests: int,
          num_predict: int, log: Path) -> float:
    proc, api = _start(binary, model, draft, threads, log)
    body = {"prompt": "the speculative decoding benchmark", "n_predict": num_predict,
            "temperature": 0, "top_k": 1, "seed": 1, "ignore_eos": True,
            "cache_prompt": False, "stream": True}
    try:
        api.completion(body)  # warm-up
        rates = []
        for _ in range(requests):
            gen = api.completion(body)
            rates.append(gen.eval_count / gen.eval_duration_ns * 1e9)
        return statistics.median(rates)
    finally:
        api.close()
        process.stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=["bench", "tiny"], default="tiny")
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--num-predict", type=int, default=96)
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    binary = llama_server_binary()
    logical = os.cpu_count() or 1
    settings: dict[str, int | None] = {
        "llama.cpp default (no flag)": None, "1": 1, f"logical-1 ({max(1, logical - 1)})":
        max(1, logical - 1), f"physical ({physical_cores()})": physical_cores(),
    }
    with tempfile.TemporaryDirectory(prefix="llama-threads-") as tmp:
        specs = model_set_specs(args.size)
        target = write_model(Path(tmp) / "target.gguf", specs["target"])
        draft = write_model(Path(tmp) / "draft.gguf", specs["draft_truncated"])
        print(f"llama-server threads bench: size {args.size}, {args.num_predict} tokens, "
              f"{args.requests} requests + 1 warm-up per start, {logical} logical CPUs, "
              f"{physical_cores()} physical cores")
        for condition, hogs in (("as found", 0), (f"{args.hogs} CPU hogs", args.hogs)):
            started = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
            try:
                time.sleep(2 if hogs else 0)
                chosen = default_threads()
                merged: dict[int | None, list[str]] = {}
                for name, threads in {**settings, f"specsubmit default ({chosen})": chosen
                                      }.items():
                    merged.setdefault(threads, []).append(name)
                # One measurement per distinct flag (on 2 cores "1" is also "logical-1").
                rows = {" = ".join(names): threads for threads, names in merged.items()}
                load = os.getloadavg()[0]
                print(f"\n{condition}: load average {load:.1f} (1 min)")
                print(f"{'--threads':48} {'no draft tok/s':>15} {'draft tok/s':>12}")
                for name, threads in rows.items():
                    plain = _rate(binary, target, None, threads, args.requests,
                                  args.num_predict, Path(tmp) / "plain.log")
                    drafted = _rate(binary, target, draft, threads, args.requests,
                                    args.num_predict, Path(tmp) / "draft.log")
                    print(f"{name:48} {plain:15.1f} {drafted:12.1f}", flush=True)
            finally:
                for hog in started:
                    hog.kill()
                    hog.wait()


if __name__ == "__main__":
    main()
