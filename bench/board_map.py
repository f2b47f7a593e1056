"""The speculation map's reads on a store: a cold board grouped by domain beside the default
one, and a group's acceptance per draft position alone.

    .venv/bin/python bench/board_map.py /tmp/map1m/store.duckdb [--repeats 3]
    .venv/bin/python bench/board_map.py /tmp/map1m/store.duckdb --generate 1000000

The store: any DuckDB store (copy it: the board's reads migrate it). ``--generate N``
makes one first: bench/query.py's generator (N submissions, 2N draft results), then every
draft result given rounds and per-position counts (depth 4 or 8, each position accepted
less often than the one before), the worst case for acceptance: every result from an
engine that reports them. Each repeat computes the default leaderboard cold
(``ReadService.cold_board``, the shipped cohort rules), then the same with ``domain`` in
its dimensions, then with each group's acceptance per position (the maintained standing's
voices, as ``acceptance=true`` reads it), then ``board.acceptance.group_acceptance`` for the
default dimensions on its own (each contributor its own voice), then for the page's speed
board of one chosen chip and target; wall and CPU (this process, DuckDB's threads
included).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import duckdb
from sqlalchemy import create_engine

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other bench scripts
import query  # noqa: E402
from specserver.board import acceptance, aggregate  # noqa: E402
from specserver.board.leaderboard import ReadService  # noqa: E402
from specserver.http.page.data import SPEED_DIMENSIONS  # noqa: E402
from specserver.store import queries  # noqa: E402
from specserver.store.migrations import migrate  # noqa: E402

# A machine and a target chosen on the page: one chip of bench/query.py's 24, its MTP target.
CHOSEN = queries.Filters.of({"chip": "Apple M2", "target": "qwen3.5:9b-mtp"})
# Every draft summary's rounds and per-position counts, from its id's hash (deterministic):
# 20-59 rounds, depth 4 (the first draft config) or 8, position i accepted by ~0.85^(i+1).
COUNTS_SQL = """
UPDATE summaries SET rounds = 20 + hash(submission_id) % 40,
       accepted_per_position = '[' || array_to_string(list_transform(
           range(CASE WHEN config_name IN ('spec_4', 'draft_qwen2.5_0.5b') THEN 4 ELSE 8 END),
           lambda p: CAST(floor((20 + hash(submission_id) % 40)
                           * pow(0.7 + 0.2 * (hash(submission_id || config_name) % 100) / 100.0,
                                 p + 1)) AS BIGINT)), ',') || ']'
WHERE role = 'draft'
"""


def generate(path: Path, size: int) -> None:
    """A store of ``size`` submissions whose draft results all have counts (docstring)."""
    path.unlink(missing_ok=True)
    engine = create_engine(f"duckdb:///{path}")
    migrate(engine)
    engine.dispose()
    query.generate(path, 0, size)
    with duckdb.connect(str(path)) as con:
        con.execute(COUNTS_SQL)
        con.execute("CHECKPOINT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--generate", type=int, metavar="N",
                        help="make the store first: N submissions, every draft with counts")
    args = parser.parse_args()
    if args.generate:
        started = time.perf_counter()
        generate(args.store, args.generate)
        print(f"generated {args.generate:,} submissions in {time.perf_counter() - started:.0f} s")
    engine = create_engine(f"duckdb:///{args.store}")
    reads = ReadService(engine, probation_days=7.0, cohort_window_hours=24.0,
                        graduations_per_day=2)
    plain = aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY)
    by_domain = aggregate.leaderboard_dimensions((*aggregate.DEFAULT_GROUP_BY, "domain"))
    for _ in range(args.repeats):
        for name, dims, accepted in (("default board", plain, False),
                                     ("board with domain", by_domain, False),
                                     ("board + acceptance", plain, True)):
            reads.clear_cache()
            wall, cpu = time.perf_counter(), time.process_time()
            board = reads.cold_board(queries.Filters(), dims, "speedup", accepted)
            print(f"{name:>20}: {len(board.groups)} groups, "
                  f"wall {time.perf_counter() - wall:.2f} s, cpu {time.process_time() - cpu:.2f} s")
        with engine.connect() as conn:
            wall, cpu = time.perf_counter(), time.process_time()
            found = acceptance.group_acceptance(conn, queries.Filters(), plain,
                                                aggregate.BOARD_VERDICTS)
            print(f"{'acceptance alone':>20}: {len(found)} groups with counts, "
                  f"wall {time.perf_counter() - wall:.2f} s, cpu {time.process_time() - cpu:.2f} s")
            # the page's speed board once a machine and a target are chosen
            wall, cpu = time.perf_counter(), time.process_time()
            found = acceptance.group_acceptance(conn, CHOSEN, SPEED_DIMENSIONS,
                                                aggregate.VIEW_VERDICTS["speedup"])
            print(f"{'one chip, acceptance':>20}: {len(found)} groups with counts, "
                  f"wall {time.perf_counter() - wall:.2f} s, cpu {time.process_time() - cpu:.2f} s")
    engine.dispose()


if __name__ == "__main__":
    main()
