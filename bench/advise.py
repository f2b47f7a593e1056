"""The advisor's validation bench on the real engine: Gemma 3 270M (PyPI,
tests/support/realengine/gemma.py) on the pinned llama-server; "machines" stood in by
thread counts and CPU sets (``MACHINES``: m1-m3 differ in speed, m4 and m5 in what a
batch costs beside a step, so in their speedups too); candidates prompt lookup
(ngram-simple, lookup 3) at depths 3, 5 and 8 and the truncated first-6-blocks draft
(draft-simple) at depth 3; llamacpp-map's six prompts as six kinds of work. Every block
checks that its candidate drafted.

    .venv/bin/python bench/advise.py [--num-predict 48] [--machines m1,m2,m3]
        [--repeats 1] [--probe-rounds R] [--probe-twice] [--no-draft]
        [--candidates ngram3,draft3]
    .venv/bin/python bench/advise.py --analyse bench/data/advise-<stamp>.json [--board]

The finer run the fourth analysis asks for (BENCHMARKS.md), on a machine nothing else
loads (m2's two threads on two busy cores measure the load, not the machine):

    flock /tmp/specatlas-engine.lock .venv/bin/python bench/advise.py --machines m1,m3 \
        --num-predict 96 --repeats 2 --probe-rounds 5 --probe-twice

Machines whose speedups differ (the baselines that borrow other machines' speedups are
only put to the test there):

    flock /tmp/specatlas-engine.lock .venv/bin/python bench/advise.py \
        --machines m1,m2,m4,m5 --num-predict 96 --repeats 2 --probe-rounds 5 --probe-twice

The finer run's time was estimated before it ran: the default run took 47-50 min for three machines
at 48 tokens (decode 6-7 min on m1, 3.5-5.5 on m3, 23-27 on m2; the rest, ~4 min a
machine, starts, prompts and probes); twice the tokens twice a block is up to four times
the decode (less where an answer ends before 96 tokens), so ~25 min on m1 and 15-22 on
m3, with ~5-6 min a machine besides (each prompt processed twice as often, two probes of
five rounds): about 50-60 min, at those runs' load of 3-10. Measured on a quiet
machine of the faster kind (2026-12-07): m1 and m3 26 min, m2 alone 8 min.

Per machine, one llama-server start per block, blocks bracketed: baseline, the
candidates ascending, baseline, the candidates descending, baseline; each block the six
prompts once, or ``--repeats`` times (all six, then all six again: each row records its
``repeat``; the analysis takes a block's median per prompt, the product's rule for a
block's trials), decode tok/s from the engine's timings, the speculative counters from
/metrics around each request. Then the machine's probe (``specsubmit probe``'s
``measure_rounds``: one speculative round checking k tokens, and a plain step; its default
rounds and time budget, or exactly ``--probe-rounds`` rounds with no budget; also the
version-1 prefill curve on the same start, for comparison, its k = 1 taken from the plain
steps: its own decoding runs on a server that speculates here), saved as ``probe``. With
``--probe-twice`` the same rounds probe is taken before the blocks too, saved as
``probe_before`` (no prefill curve): the analysis pools each size's samples of the two
(the blocks ran between them, so neither alone saw their load; each size's cost is then
the median of both probes' samples) and prints how far the two disagree. Then the draft
model's plain step (its cost per drafted token on that machine) and its prefill of k
tokens (three rounds of the probe's sizes; the engine passes each checked batch through
the draft as such a prefill), saved as ``draft_probe``. ``--candidates`` runs some of the
candidates only (a draft-model run in a third of the time: ``ngram3,draft3``). Everything
is written to bench/data/advise-<stamp>.json; ``bench/advise_analysis.py`` (run at the end, or with
--analyse) predicts held-out depths, machines and kinds of work and ``advise_report``
prints the errors against the three baselines, then ``bench/advise_noise.py`` how far two
measurements of one cell fall apart and what the crowd's acceptance adds to the error.
Prints figures; asserts nothing. The load is printed and recorded at every block and probe.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.support.realengine import build, gemma  # noqa: E402

import advise_analysis  # noqa: E402
import advise_batch  # noqa: E402
import advise_units  # noqa: E402
from advise_noise import report  # noqa: E402
from advise_report import analyse  # noqa: E402
from specschema import get_protocol  # noqa: E402
from specsubmit.engines.base import RunListener  # noqa: E402
from specsubmit.engines.llama_server.api import LlamaServerApi  # noqa: E402
from specsubmit.engines.llama_server.metrics import parse_spec_metrics  # noqa: E402
from specsubmit.engines.llama_server.probe import (  # noqa: E402
    ROUND_SIZES,
    measure,
    measure_rounds,
    verification_args,
)

# name -> (threads, batch threads, CPUs): one core alone, both cores, two threads crowded
# on one core; then two machines whose speedups differ, not only their speed (the engine
# decodes one token with --threads and any larger batch, a round's check included, with
# --threads-batch): m4 checks a round on two cores but decodes on one (a machine whose
# batches are cheap beside its step, as a GPU's), m5 the other way round.
MACHINES = {"m1": (1, 1, "0"), "m2": (2, 2, "0,1"), "m3": (2, 2, "1"),
            "m4": (1, 2, "0,1"), "m5": (2, 1, "0,1")}
# llama-server's --poll for every start: 0, the threads sleep between passes (``--poll``
# changes it for a run, to see whether waking them is what a draft's pass pays for).
POLL = 0
# ngram-simple drops a draft shorter than its lookup (3 here): depth 2 would never draft.
NGRAM_DEPTHS = (3, 5, 8)
DRAFT_DEPTH = 3


def candidates(draft: Path | None) -> dict[str, list[str]]:
    found = {f"ngram{d}": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                           "--spec-ngram-simple-size-m", str(d), "--spec-draft-p-min", "0.0",
                           "--spec-draft-n-min", "0"] for d in NGRAM_DEPTHS}
    if draft is not None:
        found[f"draft{DRAFT_DEPTH}"] = ["--spec-type", "draft-simple", "--spec-draft-model",
                                        str(draft), "--spec-draft-n-max",
                                        str(DRAFT_DEPTH), "--spec-draft-p-min", "0.0",
                                        "--spec-draft-n-min", "0"]
    return found


def start(binary: Path, model: Path, port: int, machine: str, extra: list[str]
          ) -> tuple[subprocess.Popen[bytes], LlamaServerApi]:
    threads, batch, cpus = MACHINES[machine]
    proc = subprocess.Popen(
        ["taskset", "-c", cpus, str(binary), "--model", str(model), "--host", "127.0.0.1",
         "--port", str(port), "--parallel", "1", "--poll", str(POLL), "--no-warmup", "--threads",
         str(threads), "--threads-batch", str(batch), "--ctx-size", "4096", "--metrics",
         *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = LlamaServerApi(f"http://127.0.0.1:{port}", timeout_s=600)
    for _ in range(1200):
        if api.healthy():
            return proc, api
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("llama-server did not start")


def stop(proc: subprocess.Popen[bytes], api: LlamaServerApi) -> None:
    api.close()
    proc.terminate()
    proc.wait()


def run_block(api: LlamaServerApi, prompts: list[tuple[str, str]], num_predict: int,
              repeats: int = 1) -> list[dict[str, object]]:
    templated = {text: api.apply_template(text) or text for _, text in prompts}
    api.completion({"prompt": templated[prompts[0][1]], "n_predict": 8, "temperature": 0.0,
                    "cache_prompt": False, "stream": True})  # warm-up
    rows: list[dict[str, object]] = []
    # every prompt, then every prompt again: a repeat sees the block's load a while later
    for repeat, (domain, text) in ((r, p) for r in range(repeats) for p in prompts):
        before = parse_spec_metrics(api.metrics_text() or "")
        gen = api.completion({
            "prompt": templated[text], "n_predict": num_predict, "temperature": 0.0,
            "seed": 42, "top_k": 40, "top_p": 0.9, "repeat_penalty": 1.0, "min_p": 0.0,
            "cache_prompt": False, "stream": True})
        after = parse_spec_metrics(api.metrics_text() or "")
        counts = (after.since(before) if after is not None and before is not None
                  else after)
        rows.append({"domain": domain, "repeat": repeat, "tokens": gen.eval_count,
                     "seconds": gen.eval_duration_ns / 1e9,
                     "drafted": gen.draft_n or 0, "accepted": gen.draft_accepted or 0,
                     "rounds": counts.rounds if counts else 0,
                     "per_position": list(counts.per_position) if counts else []})
    return rows


def plain_steps(api: LlamaServerApi, text: str, times: int = 3) -> list[float]:
    out = []
    for _ in range(times):
        gen = api.completion({"prompt": text, "n_predict": 32, "temperature": 0.0,
                              "cache_prompt": False, "stream": True, "ignore_eos": True})
        out.append(gen.eval_duration_ns / 1e9 / gen.eval_count)
    return out


def probe_machine(binary: Path, model: Path, port: int, machine: str, text: str,
                  rounds: int | None, prefill: bool) -> dict[str, object]:
    """The machine's rounds probe on its own start: ``measure_rounds``'s default rounds and
    budget, or exactly ``rounds`` (no budget: the finer run wants every size that often);
    with ``prefill``, the version-1 prefill curve on the same start after it."""
    load = os.getloadavg()[0]
    out: dict[str, object] = {}
    proc, api = start(binary, model, port, machine, ["--swa-full", *verification_args(
        max(ROUND_SIZES))])
    try:
        began = time.monotonic()
        context, found, steps = (
            measure_rounds(api, text, RunListener()) if rounds is None
            else measure_rounds(api, text, RunListener(), rounds=rounds, budget_s=math.inf))
        probe_s = time.monotonic() - began
        if prefill:
            _, curve, decoded = measure(api, text, RunListener(), sizes=ROUND_SIZES, rounds=2)
            out = {"prefill": {str(k): v for k, v in curve.items()}, "decoded": decoded}
    finally:
        stop(proc, api)
    size = 9 if 9 in found else max(found)  # a 9-token round: what depth 8 pays
    print(f"{machine} probe: {probe_s:.0f} s, step {statistics.median(steps) * 1000:.1f} ms, "
          f"round of {size} {statistics.median(found[size]) * 1000:.1f} ms, "
          f"load {load:.1f}", flush=True)
    return {"context": context, "seconds": probe_s, "load": load,
            "rounds": {str(k): v for k, v in found.items()}, "steps": steps} | out


def measure_machine(machine: str, binary: Path, model: Path, draft: Path | None,
                    prompts: list[tuple[str, str]], num_predict: int, port: int,
                    repeats: int = 1, probe_rounds: int | None = None,
                    probe_twice: bool = False, only: list[str] | None = None
                    ) -> dict[str, object]:
    menu = {k: v for k, v in candidates(draft).items() if only is None or k in only}
    names = list(menu)
    order = [None, *names, None, *reversed(names), None]
    text = "\n\n".join(t for _, t in prompts) * 4
    threads, batch, cpus = MACHINES[machine]
    found: dict[str, object] = {"threads": threads, "threads_batch": batch, "cpus": cpus}
    if probe_twice:
        port += 1
        found["probe_before"] = probe_machine(binary, model, port, machine, text,
                                              probe_rounds, prefill=False)
    blocks: list[dict[str, object]] = []
    for index, name in enumerate(order):
        port += 1
        load = os.getloadavg()[0]
        proc, api = start(binary, model, port, machine, [] if name is None else menu[name])
        try:
            rows = run_block(api, prompts, num_predict, repeats)
        finally:
            stop(proc, api)
        if name is not None and not any(r["drafted"] for r in rows):
            raise SystemExit(f"{machine}: {name} drafted nothing: its flags are wrong")
        blocks.append({"config": name or "baseline", "load": load, "rows": rows})
        rate = sum(r["tokens"] for r in rows) / sum(r["seconds"] for r in rows)  # type: ignore[misc]
        print(f"{machine} block {index + 1}/{len(order)} {name or 'baseline':>9}: "
              f"{rate:6.1f} tok/s, load {load:.1f}", flush=True)
    port += 1
    probe = probe_machine(binary, model, port, machine, text, probe_rounds, prefill=True)
    draft_steps: list[float] = []
    if draft is not None and any(n.startswith("draft") for n in names):
        port += 1
        proc, api = start(binary, draft, port, machine, [])
        try:
            draft_steps = plain_steps(api, prompts[0][1])
        finally:
            stop(proc, api)
        # the draft's prefill curve: the engine passes each checked batch through the
        # draft as a prefill, its last token's output only (server-context.cpp, "always
        # re-evaluate"). Its rounds probe, what the crowd's draft cost units hold, cannot
        # run on this draft: the truncated model's output never repeats the context, so
        # the probe's lookup finds nothing to draft.
        port += 1
        # --swa-full: the context stays cached, so that each prefill is of k tokens only
        proc, api = start(binary, draft, port, machine, ["--swa-full"])
        try:
            _, curve, decoded = measure(api, text, RunListener(), sizes=ROUND_SIZES,
                                        rounds=3)
        finally:
            stop(proc, api)
        found["draft_probe"] = {"prefill": {str(k): v for k, v in curve.items()},
                                "decoded": decoded}
    return found | {"blocks": blocks, "probe": probe, "draft_steps": draft_steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--num-predict", type=int, default=48)
    parser.add_argument("--machines", default=None,
                        help=f"of {','.join(MACHINES)} (a run: m1,m2,m3; --analyse: every "
                        "machine the file has)")
    parser.add_argument("--no-draft", action="store_true")
    parser.add_argument("--candidates", default=None,
                        help="of ngram3,ngram5,ngram8,draft3 (default: all)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="each prompt this many times in every block")
    parser.add_argument("--probe-rounds", type=int, default=None,
                        help="exactly this many probe rounds, no time budget (default: the "
                        "probe's own rounds and budget)")
    parser.add_argument("--probe-twice", action="store_true",
                        help="probe each machine before its blocks too (probe_before)")
    parser.add_argument("--poll", type=int, default=0,
                        help="llama-server's --poll (0-100) for every start (default 0)")
    parser.add_argument("--analyse", type=Path, help="only analyse this saved run")
    parser.add_argument("--whole-drafts", action="store_true",
                        help="take every round as drafting its whole depth (the model "
                        "before short drafts were counted)")
    parser.add_argument("--batch-prefill", action="store_true",
                        help="price a draft model's pass over the checked batch at its "
                        "probed prefill, not as one more drafting pass (a variant, not the "
                        "product's model)")
    parser.add_argument("--units", action="store_true",
                        help="held-out machines and kinds of work take the known cells as "
                        "the product's contributor units (their median acceptance, a "
                        "bootstrap of them), not their pooled rounds")
    parser.add_argument("--board", action="store_true",
                        help="measured speedups as the board estimates them (each block "
                        "over the baseline at its place), not mean rate over mean rate")
    args = parser.parse_args()
    if args.repeats < 1 or (args.probe_rounds is not None and args.probe_rounds < 1):
        parser.error("--repeats and --probe-rounds take a count of one or more")
    known = [f"ngram{d}" for d in NGRAM_DEPTHS] + [f"draft{DRAFT_DEPTH}"]
    unknown = sorted(set((args.candidates or "").split(",")) - set(known) - {""})
    if unknown:
        parser.error(f"--candidates: unknown {', '.join(unknown)} (known: {','.join(known)})")
    advise_analysis.SHORT_DRAFTS = not args.whole_drafts
    advise_batch.BATCH_PREFILL = args.batch_prefill
    advise_units.UNITS = args.units
    global POLL
    POLL = args.poll
    if args.analyse is not None:
        saved = json.loads(args.analyse.read_text())
        # --machines: analyse these machines' data only (as if the others had not run)
        if args.machines is not None:
            chosen = args.machines.split(",")
            saved["machines"] = {m: v for m, v in saved["machines"].items() if m in chosen}
        report(saved, *analyse(saved, args.board))
        return
    binary, model = build.llama_server_binary(), gemma.gemma_gguf()
    draft = None if args.no_draft else gemma.first6_gguf()
    protocol = get_protocol("llamacpp-map")
    prompts = [(p.domain, p.text) for p in protocol.prompts or ()]
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    data: dict[str, object] = {
        "started": stamp, "load_start": os.getloadavg(), "num_predict": args.num_predict,
        "repeats": args.repeats, "probe_rounds": args.probe_rounds,
        "probe_twice": args.probe_twice, "candidates": args.candidates, "poll": args.poll,
        "target_bytes": model.stat().st_size,
        "draft_bytes": draft.stat().st_size if draft is not None else None, "machines": {}}
    print(f"load at start: {os.getloadavg()}", flush=True)
    machines: dict[str, object] = {}
    for offset, machine in enumerate((args.machines or "m1,m2,m3").split(",")):
        machines[machine] = measure_machine(machine, binary, model, draft, prompts,
                                            args.num_predict, 18400 + 100 * offset,
                                            args.repeats, args.probe_rounds,
                                            args.probe_twice,
                                            args.candidates.split(",")
                                            if args.candidates else None)
        data["machines"] = machines
        out = ROOT / "bench" / "data" / f"advise-{stamp}.json"
        out.write_text(json.dumps(data, indent=1))
    data["load_end"] = os.getloadavg()
    out.write_text(json.dumps(data, indent=1))
    print(f"saved {out.relative_to(ROOT)}; load at end: {os.getloadavg()}", flush=True)
    report(data, *analyse(data, args.board))


if __name__ == "__main__":
    main()
