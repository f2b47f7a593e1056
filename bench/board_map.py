"""The speculation map's reads on a store: a cold board grouped by domain beside the default
one, and a group's acceptance per draft position alone.

    .venv/bin/python bench/board_map.py /tmp/map1m/store.duckdb [--repeats 3]

The store: any DuckDB store (bench/query.py's generator makes a 1M one; copy it, as the
board's reads migrate it). Each repeat computes the default leaderboard cold
(``ReadService.cold_board``, the shipped cohort rules), then the same with ``domain`` in
its dimensions, then ``board.acceptance.group_acceptance`` for the default dimensions on
its own; wall and CPU (this process, DuckDB's threads included).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sqlalchemy import create_engine

from specserver.board import acceptance, aggregate
from specserver.board.leaderboard import ReadService
from specserver.store import queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    engine = create_engine(f"duckdb:///{args.store}")
    reads = ReadService(engine, probation_days=7.0, cohort_window_hours=24.0,
                        graduations_per_day=2)
    plain = aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY)
    by_domain = aggregate.leaderboard_dimensions((*aggregate.DEFAULT_GROUP_BY, "domain"))
    for _ in range(args.repeats):
        for name, dims in (("default board", plain), ("board with domain", by_domain)):
            reads.clear_cache()
            wall, cpu = time.perf_counter(), time.process_time()
            board = reads.cold_board(queries.Filters(), dims, "speedup")
            print(f"{name:>20}: {len(board.groups)} groups, "
                  f"wall {time.perf_counter() - wall:.2f} s, cpu {time.process_time() - cpu:.2f} s")
        with engine.connect() as conn:
            wall, cpu = time.perf_counter(), time.process_time()
            found = acceptance.group_acceptance(conn, queries.Filters(), plain,
                                                aggregate.BOARD_VERDICTS)
            print(f"{'acceptance alone':>20}: {len(found)} groups with counts, "
                  f"wall {time.perf_counter() - wall:.2f} s, cpu {time.process_time() - cpu:.2f} s")
    engine.dispose()


if __name__ == "__main__":
    main()
