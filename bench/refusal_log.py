"""What logging a refused envelope costs the server: a POST whose signature verifies and
which a consistency rule then refuses (422) is an entry of the transparency log, written
through the store's writer in a transaction of its own before the answer.

In this process, the app on a fresh store (DuckDB file, or ``--store URL``), rate limits
off: rounds of ``--posts`` distinct refused POSTs, alternating the server as it is (the
refusal logged) with the same server whose ``Store.log_refusal`` answers without writing,
so that the two differ by the log's write alone. ``--together N`` sends them N at a time
(refusals that queue while the writer is busy are logged in one transaction; the arm
"logged alone" logs each in a job of its own, as before that). Prints per
arm the median over rounds of the process's CPU ms (every thread: the writer's too) and
wall ms per refused POST.

    .venv/bin/python bench/refusal_log.py [--posts 200] [--rounds 4] [--together 1]
                                          [--store URL | --postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support
from tests.support.postgres import private_schema_url  # noqa: E402
from tests.support.served import Served, settings_for  # noqa: E402
from tests.support.signed import payload_dict, sign_dict  # noqa: E402

from specserver.store import LogReceipt, Store  # noqa: E402
from specserver.store.logentries import log_refused  # noqa: E402


def refused_bodies(count: int, offset: int) -> list[bytes]:
    """Signed by a valid key, each refused by a consistency rule (a config's trials cut)."""
    bodies = []
    for i in range(count):
        data = payload_dict(seed=offset + i)
        data["configs"][1]["trials"] = data["configs"][1]["trials"][:1]
        bodies.append(sign_dict(data, key_seed=offset + i))
    return bodies


async def _unlogged(self: Store, envelope_sha256: str) -> LogReceipt:
    return LogReceipt(0, b"\x00" * 32)


async def _alone(self: Store, envelope_sha256: str) -> LogReceipt:
    """Each refusal a writer job of its own (before ``RefusalLog`` gathered them)."""
    return (await self.awrite(lambda conn: log_refused(conn, [envelope_sha256])))[0]


def one_round(served: Served, bodies: list[bytes], together: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(0, len(bodies), together):
        chunk = bodies[start:start + together]
        answers = served.post_many(chunk) if together > 1 else [served.post(chunk[0])]
        assert all(a.status_code == 422 for a in answers), answers[0].text
    return ((time.process_time() - cpu) * 1e3 / len(bodies),
            (time.perf_counter() - wall) * 1e3 / len(bodies))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--together", type=int, default=1, help="POSTs sent at once")
    parser.add_argument("--store", default=None, help="a database URL (default: a DuckDB file)")
    parser.add_argument("--postgres", action="store_true",
                        help="a fresh schema of the test PostgreSQL, dropped afterwards")
    args = parser.parse_args()
    original = Store.log_refusal
    arms: dict[str, Any] = {"logged": original, "logged alone": _alone,
                            "not logged": _unlogged}
    results: dict[str, list[tuple[float, float]]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        overrides: dict[str, Any] = {"log_key_file": str(Path(tmp) / "log-key")}
        if args.postgres:
            overrides["database_url"] = stack.enter_context(private_schema_url())
        elif args.store:
            overrides["database_url"] = args.store
        with Served(settings_for(Path(tmp), **overrides)) as served:
            served.post(refused_bodies(1, 10**6)[0])  # warm: imports, the first transaction
            for round_no in range(args.rounds):
                order = list(arms) if round_no % 2 == 0 else list(reversed(arms))
                for offset, arm in enumerate(order):
                    bodies = refused_bodies(args.posts, 10_000 * round_no + 1000 * offset)
                    Store.log_refusal = arms[arm]  # type: ignore[method-assign]
                    try:
                        results[arm].append(one_round(served, bodies, args.together))
                    finally:
                        Store.log_refusal = original  # type: ignore[method-assign]
            entries = served.counts()["log_entries"]
    print(f"{args.posts} refused POSTs ({args.together} at a time) x {args.rounds} rounds "
          "per arm, alternated; "
          f"log entries written: {entries}")
    for arm, rounds in results.items():
        cpu = statistics.median(r[0] for r in rounds)
        wall = statistics.median(r[1] for r in rounds)
        print(f"  {arm:12s} CPU {cpu:6.2f} ms / refused POST   wall {wall:6.2f} ms   "
              f"(rounds CPU: {', '.join(f'{r[0]:.2f}' for r in rounds)})")


if __name__ == "__main__":
    main()
