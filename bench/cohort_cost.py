"""What the board's Sybil rules (board/newkeys.py: cohorts, probation, graduation cap) cost
a cold leaderboard at 100,000 submissions: the CPU of ``ReadService.board`` from an empty
cache with the rules off and with the shipped ones, and the rules' own two steps (the
arrivals query, the pure ``standing``). The store is bench/query.py's generator (each key
from its own address range: the most cohorts to form).

    .venv/bin/python bench/cohort_cost.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine

from specserver.board import aggregate, newkeys
from specserver.board.leaderboard import ReadService
from specserver.store import queries
from specserver.store.migrations import migrate

sys.path.insert(0, str(Path(__file__).parent))
import query  # noqa: E402  (bench/query.py: the store generator)

SUBMISSIONS = 100_000
SHIPPED = {"probation_days": 7.0, "cohort_window_hours": 24.0, "graduations_per_day": 2}


def main() -> None:
    path = Path(tempfile.mkdtemp(prefix="specbench-cohorts-")) / "store.duckdb"
    engine = create_engine(f"duckdb:///{path}")
    migrate(engine)
    engine.dispose()
    query.generate(path, 0, SUBMISSIONS)
    engine = create_engine(f"duckdb:///{path}")
    dims = aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY)
    runs: tuple[tuple[str, dict[str, float]], ...] = (("rules off", {}),
                                                      ("shipped rules", SHIPPED))
    for label, settings in runs:
        reads = ReadService(engine, **settings)  # type: ignore[arg-type]
        cpu = []
        for _ in range(5):
            reads.clear_cache()
            started = time.process_time()
            reads.cold_board(queries.Filters(), dims, "speedup")
            cpu.append(time.process_time() - started)
        print(f"{label}: cold board CPU median {statistics.median(cpu) * 1000:.0f} ms over 5")
    with engine.connect() as conn:
        started = time.process_time()
        found = newkeys.arrivals(conn)
        queried = time.process_time()
        newkeys.standing(found, newkeys.newest_receipt(conn), newkeys.CohortRules.of(7, 24, 2))
        done = time.process_time()
    print(f"arrivals SQL {1000 * (queried - started):.0f} ms CPU ({len(found)} keys); "
          f"standing {1000 * (done - queried):.0f} ms CPU")


if __name__ == "__main__":
    main()
