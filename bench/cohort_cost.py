"""What the board's Sybil rules (board/newkeys.py: cohorts, probation, graduation cap) cost
a cold leaderboard at 100,000 submissions: the CPU of ``ReadService.board`` from an empty
cache with the rules off and with the shipped ones, and the rules' own two steps (the
arrivals query, the pure ``standing``). The store is bench/query.py's generator (each key
from its own address range: the most cohorts to form).

    .venv/bin/python bench/cohort_cost.py
"""

import statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "bench")
import query as q
from sqlalchemy import create_engine
from specserver.board import aggregate, newkeys
from specserver.board.leaderboard import ReadService
from specserver.store import queries
from specserver.store.migrations import migrate
path = Path(tempfile.mkdtemp()) / "store.duckdb"
engine = create_engine(f"duckdb:///{path}")
migrate(engine); engine.dispose()
q.generate(path, 0, 100_000)
engine = create_engine(f"duckdb:///{path}")
dims = aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY)
for label, kw in (("rules off", {}), ("shipped rules", dict(probation_days=7.0, cohort_window_hours=24.0, graduations_per_day=2))):
    reads = ReadService(engine, **kw)
    cpu = []
    for _ in range(5):
        reads.clear_cache()
        c0 = time.process_time()
        reads.board(queries.Filters(), dims, "speedup")
        cpu.append(time.process_time() - c0)
    print(f"{label}: cold board CPU median {statistics.median(cpu)*1000:.0f} ms over 5")
with engine.connect() as conn:
    c0 = time.process_time(); found = newkeys.arrivals(conn); c1 = time.process_time()
    held = newkeys.standing(found, newkeys.newest_receipt(conn), newkeys.CohortRules.of(7, 24, 2)); c2 = time.process_time()
print(f"arrivals SQL {1000*(c1-c0):.0f} ms CPU ({len(found)} keys); standing {1000*(c2-c1):.0f} ms CPU")
