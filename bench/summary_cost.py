"""CPU cost of a submission's summaries and verdicts, per interval method.

    .venv/bin/python bench/summary_cost.py [--submissions 30] [--rounds 5]

What the client pays before it shows a result and the server at ingest (both call
``summarize`` and ``submission_verdicts``): for llamacpp-draft submissions made by
``specschema.examples`` (6 configs, 5 drafts), with blocks in v2's design (13 blocks, the
block bootstrap) and in v3's (25 blocks, the t interval), and without blocks (the ratio of
medians over trials). The designs alternate round by round, so that each round compares
them under the same load; each figure is ``time.process_time`` per submission, the median
over the rounds (and the range). Submissions are made before timing; the caches that
depend only on the sample sizes (the bootstrap's draws) are warm after the first round,
as they are in a running server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specschema import Submission, submission_verdicts, summarize  # noqa: E402
from specschema.examples import example_submission  # noqa: E402
from specschema.protocol_files import all_protocols  # noqa: E402


def submissions(version: int, count: int, blocks: bool) -> list[Submission]:
    protocol = next(p for p in all_protocols() if (p.id, p.version) == ("llamacpp-draft", version))
    return [example_submission(protocol, seed=seed, engine_version="b1", schema_version=2,
                               runtime="ggml", counters_seen=True, blocks=blocks,
                               draft_speedups={"draft_qwen3_0.6b_n8": 2.0,
                                               "draft_qwen3_0.6b_n3": 1.6},
                               drift=0.2)
            for seed in range(count)]


def cpu_ms_per_submission(subs: list[Submission]) -> float:
    started = time.process_time()
    for sub in subs:
        summarize(sub)
        submission_verdicts(sub)
    return (time.process_time() - started) * 1000 / len(subs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submissions", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    designs = {
        "v2, blocks, block_bootstrap": submissions(2, args.submissions, True),
        "v3, blocks, block_t": submissions(3, args.submissions, True),
        "v3, no blocks (ratio of medians)": submissions(3, args.submissions, False),
    }
    figures: dict[str, list[float]] = {name: [] for name in designs}
    for _ in range(args.rounds + 1):  # the first round warms the caches and is not counted
        for name, subs in designs.items():
            figures[name].append(cpu_ms_per_submission(subs))
    for name, found in figures.items():
        counted = found[1:]
        print(f"{name}: {statistics.median(counted):.2f} CPU ms per submission "
              f"(range {min(counted):.2f}-{max(counted):.2f}, {args.rounds} rounds of "
              f"{args.submissions})")


if __name__ == "__main__":
    main()
