"""The leaderboard page's refresh cost on a large store: CPU per recomputation of its data.

    .venv/bin/python bench/page_cost.py --source /tmp/b1m.orig.duckdb --work /tmp/page.duckdb \\
        [--rounds 75] [--per-round 50] [--interval 1]

Copies ``--source`` to ``--work`` (the source is only read), serves the copy in process
(``create_app``: the page's data computed by the refresher, as in ``specserver serve``; reads
wait for the recomputation they ask for), reads ``GET /`` once (the cold computation), then
each round posts ``--per-round`` signed submissions (all at once, as ingest at that rate
per ``--interval`` would between two recomputations), reads ``GET /`` again and measures
the process's CPU (every thread, DuckDB's included) of that read: the page's recomputation
and its rendering. The page's parts are timed by wrapping what the page calls, whichever
of them the code under test has: the boards (``ReadService.compute_board``), the filter
menus (``queries.distinct_values`` per menu, or ``queries.most_common_values`` for all) and
the recent list (``queries.list_submissions``, or ``queries.recent_submissions``).

Run it with another tree's code first on PYTHONPATH for a before/after comparison.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other bench scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support

from tests.support.inprocess import InProcessClient  # noqa: E402

import ingest  # noqa: E402
from specserver.board import ReadService  # noqa: E402
from specserver.http import create_app  # noqa: E402
from specserver.settings import ServerSettings  # noqa: E402
from specserver.store import queries  # noqa: E402

PARTS = {"distinct_values": "menus", "most_common_values": "menus",
         "list_submissions": "recent", "recent_submissions": "recent"}


class Timer:
    """CPU seconds of the whole process spent inside wrapped calls, by part."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu[part] += time.process_time() - started
                self.calls[part] += 1
        return timed

    def reset(self) -> None:
        self.cpu.clear()
        self.calls.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, type=Path, help="a store (only read)")
    parser.add_argument("--work", required=True, type=Path, help="the copy served (replaced)")
    parser.add_argument("--rounds", type=int, default=75)
    parser.add_argument("--per-round", type=int, default=50)
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds from one round's start to the next's")
    args = parser.parse_args()
    if args.work.resolve() == args.source.resolve():
        raise SystemExit("--work must not be the source: the served copy is written to")
    for leftover in (args.work, args.work.with_name(args.work.name + ".wal")):
        leftover.unlink(missing_ok=True)
    started = time.perf_counter()
    shutil.copyfile(args.source, args.work)
    print(f"copied {args.source} in {time.perf_counter() - started:.1f} s")
    bodies = iter(ingest.generate(args.rounds * args.per_round, keys=max(500, args.per_round),
                                  seed=time.time_ns()))

    timer = Timer()
    for name, part in PARTS.items():
        if hasattr(queries, name):
            setattr(queries, name, timer.wrap(part, getattr(queries, name)))
    settings = ServerSettings(database_url=f"duckdb:///{args.work}", check_workers=0,
                              rate_key_per_minute=0, rate_addr_per_minute=0,
                              read_wait_s=60.0)
    app = create_app(settings)
    reads: ReadService = app.state.reads
    reads.compute_board = timer.wrap("boards", reads.compute_board)  # type: ignore[method-assign]
    rounds: list[dict[str, float]] = []
    with InProcessClient(app) as client:
        cpu = time.process_time()
        first = client.get("/")
        assert first.status_code == 200, first.text[:200]
        print(f"first computation of GET /: {time.process_time() - cpu:.1f} s CPU "
              f"({', '.join(f'{k} {v:.2f}' for k, v in sorted(timer.cpu.items()))})")
        for _ in range(args.rounds):
            due = time.perf_counter() + args.interval
            posted = client.post_all("/v1/submissions",
                                     [next(bodies) for _ in range(args.per_round)])
            assert all(r.status_code == 201 for r in posted), {r.status_code for r in posted}
            timer.reset()
            cpu = time.process_time()
            page = client.get("/")
            total = time.process_time() - cpu
            assert page.status_code == 200 and page.headers.get("board-current") == "true"
            rounds.append({"total": total, **timer.cpu,
                           **{f"{k} calls": float(v) for k, v in timer.calls.items()}})
            time.sleep(max(0.0, due - time.perf_counter()))
    args.work.unlink(missing_ok=True)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"\n{args.rounds} rounds of {args.per_round} submissions then GET / "
          f"(every {args.interval:g} s), {os.cpu_count()} cores, load average {load}")
    for part in ("total", "boards", "menus", "recent"):
        values = [r.get(part, 0.0) * 1000 for r in rounds]
        calls = sum(r.get(f"{part} calls", 0.0) for r in rounds)
        note = "" if part == "total" else f"  ({calls:.0f} calls in {len(rounds)} rounds)"
        print(f"{part:7} CPU per recomputation: mean {statistics.mean(values):7.1f} ms  "
              f"median {statistics.median(values):7.1f}  max {max(values):7.1f}{note}")


if __name__ == "__main__":
    main()
