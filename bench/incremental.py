"""The board maintained by change against the full computation, at a given store size.

Builds a DuckDB store with bench/query.py's generator (every key its own address range:
the most cohorts the Sybil rules must form), then, with the shipped Sybil rules:

- the cold full computation of the default leaderboard (``board.incremental``'s rebuild);
- ``--rounds`` times, alternated: ``--batch`` submissions stored (copies of stored ones
  under new ids, from new keys or from the stored ones' keys, in turn; one by default,
  about a second of steady ingest with 50) and logged as the writer logs them, then the
  read that follows, maintained by change and computed in full, CPU ms (all threads) and
  wall;
- what logging costs the writer: ``store.changes.mark`` in a transaction, per batch of
  1, 16 and 128 submissions, CPU ms per batch and per submission.

    .venv/bin/python bench/incremental.py --size 100000
    .venv/bin/python bench/incremental.py --size 1000000 --rounds 5 --keep /tmp/store1m
    .venv/bin/python bench/incremental.py --size 1000000 --rounds 4 --batch 50 --keep /tmp/store1m
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from sqlalchemy import Connection, create_engine, text

from specserver.board import aggregate, incremental, newkeys
from specserver.store import changes, id_digest, queries
from specserver.store.migrations import migrate

sys.path.insert(0, str(Path(__file__).parent))
import query  # noqa: E402  (bench/query.py: the store generator)

RULES = newkeys.CohortRules.of(7.0, 24.0, 2)  # the shipped defaults
DIMS = tuple(aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY))
RUN = int(time.time()) % 0x10000


def timed(fn: object) -> tuple[float, float, object]:
    started, cpu = time.perf_counter(), time.process_time()
    result = fn()  # type: ignore[operator]
    return (time.process_time() - cpu) * 1000, (time.perf_counter() - started) * 1000, result


def store_one(conn: Connection, n: int, new_key: bool) -> None:
    """A copy of a stored submission under a new id (and maybe a new key), logged."""
    sid = f"ffffffff-{RUN:04x}-4000-8000-{n:012x}"  # RUN: a kept store is used again
    source = conn.execute(text("SELECT submission_id, key_id FROM submissions "
                               "WHERE submission_id LIKE '0%' LIMIT 1 OFFSET :n"),
                          {"n": n * 7919 % 1000}).one()
    key = f"{RUN:04x}{n:060x}" if new_key else source.key_id
    copy = {"sid": sid, "digest": id_digest(sid), "src": source.submission_id}
    conn.execute(text(
        "INSERT INTO submissions SELECT * REPLACE (:sid AS submission_id, :key AS key_id, "
        "now()::TIMESTAMP AS received_at, :digest AS id_digest) FROM submissions "
        "WHERE submission_id = :src"), {**copy, "key": key})
    conn.execute(text(
        "INSERT INTO summaries SELECT * REPLACE (:sid AS submission_id, :digest AS id_digest) "
        "FROM summaries WHERE submission_id = :src"), copy)
    changes.mark(conn, Counter({key: 1}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--keep", help="a folder to build the store in (reused if there)")
    parser.add_argument("--batch", type=int, default=1,
                        help="submissions stored before each read (in one transaction)")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="specbench-inc-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"store-{args.size}.duckdb"
    fresh = not path.exists()
    engine = create_engine(f"duckdb:///{path}")
    migrate(engine)
    engine.dispose()
    if fresh:
        started = time.perf_counter()
        query.generate(path, 0, args.size)
        print(f"generated {args.size:,} submissions in {time.perf_counter() - started:.0f} s")
    engine = create_engine(f"duckdb:///{path}")
    maintainer = incremental.Maintainer(RULES, aggregate.DEFAULT_MIN_CONTRIBUTORS)

    def maintained() -> incremental.Computed:
        with incremental.snapshot(engine) as conn:
            return maintainer.board(conn, queries.Filters(), DIMS, "speedup")

    def full() -> incremental.Computed:
        with incremental.snapshot(engine) as conn:
            return incremental.compute(conn, queries.Filters(), DIMS, "speedup", RULES,
                                       aggregate.DEFAULT_MIN_CONTRIBUTORS)

    cpu, wall, board = timed(maintained)
    print(f"size {args.size:,}: cold build (full, maintainer's first read) "
          f"{cpu:.0f} ms CPU, {wall:.0f} ms wall, {len(board.groups)} groups")  # type: ignore[attr-defined]
    # A new key's rows sit only in the newest row group (DuckDB skips the others by their
    # min/max); a stored key's are spread over the table: both are shown.
    rows: dict[str, list[tuple[float, float]]] = {}
    for n in range(args.rounds):
        for name, read in (("maintained", maintained), ("full", full))[::1 if n % 2 else -1]:
            new_key = n % 2 == 0
            with engine.begin() as conn:
                for i in range(args.batch):
                    store_one(conn, (2 * n + (name == "full")) * args.batch + i,
                              new_key=new_key)
            if name == "full":
                maintained()  # keep the maintainer following the log (not timed)
            cpu, wall, _ = timed(read)
            label = (f"{name}, {'new' if new_key else 'stored'} "
                     f"key{'s' if args.batch > 1 else ''}")
            rows.setdefault(label, []).append((cpu, wall))
    with incremental.snapshot(engine) as conn:
        assert maintainer.board(conn, queries.Filters(), DIMS, "speedup") == \
            incremental.compute(conn, queries.Filters(), DIMS, "speedup", RULES,
                                aggregate.DEFAULT_MIN_CONTRIBUTORS)
    for name, values in rows.items():
        print(f"  read after {args.batch} stored submission(s), {name:>23}: "
              f"{statistics.median(c for c, _ in values):8.1f} ms CPU "
              f"{statistics.median(w for _, w in values):8.1f} ms wall "
              f"(median of {len(values)})")
    print(f"  maintainer: {maintainer.rebuilds} rebuild(s), {maintainer.refreshes} refreshes")
    for batch in (1, 16, 128):
        costs = []
        for attempt in range(20):
            with engine.connect() as conn, conn.begin() as transaction:
                stored = Counter({f"{attempt:032x}{i:032x}": 1 for i in range(batch)})
                started = time.process_time()
                changes.mark(conn, stored)
                costs.append((time.process_time() - started) * 1000)
                transaction.rollback()
        cost = statistics.median(costs)
        print(f"  logging a batch of {batch:>3}: {cost:.3f} ms CPU "
              f"({cost / batch:.4f} ms per submission)")
    engine.dispose()


if __name__ == "__main__":
    main()
