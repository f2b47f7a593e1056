"""What the check queue adds to a POST's CPU in the server process: ``in_turn`` with the
queue against without it (the gate's two paths), around a check that costs nothing, one
address, never waiting (the honest path at low load). Process CPU per call, best of rounds.

    .venv/bin/python bench/check_queue_cost.py [--calls 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from specserver.http.submissions import in_turn
from specserver.ratelimit import CheckQueue, Schedule


async def _check(body: bytes) -> tuple[bytes, float]:
    return body, 0.0005


async def _per_call(queue: CheckQueue | None, calls: int) -> float:
    started = time.process_time()
    for _ in range(calls):
        await in_turn(queue, "127.0.0.1", _check, b"body")
    return (time.process_time() - started) / calls


async def _main(calls: int, rounds: int) -> None:
    without, with_queue = [], []
    for _ in range(rounds):  # alternated
        without.append(await _per_call(None, calls))
        with_queue.append(await _per_call(CheckQueue(Schedule(slots=2)), calls))
    print(f"in_turn without the queue {min(without) * 1e6:.2f} us, with it "  # noqa: T201
          f"{min(with_queue) * 1e6:.2f} us a call (best of {rounds} x {calls:,})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(_main(args.calls, args.rounds))


if __name__ == "__main__":
    main()
