"""What deciding which chips are on the speedup board costs (``board.chips.on_board``), on
an existing store: once with the known-chip table as shipped, and once as a refresh without
a decision since sees it (the chips found corroborated before counted as known, the board
maintained by change's shortcut, ``incremental.Maintainer._chips_on_board``).

    .venv/bin/python bench/chips_cost.py --database /path/to/store.duckdb [--repeat 7]

Prints the store's submissions and the rows of unlisted chips, then CPU and wall
milliseconds (median of ``--repeat``) for each case.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Collection

from sqlalchemy import Connection, func, select

from specserver.board import chips
from specserver.ingest import known_chips
from specserver.store import tables
from specserver.store.database import make_engine


def _timed(conn: Connection, listed: Collection[str], repeat: int
           ) -> tuple[tuple[str, ...], float, float]:
    cpu, wall = [], []
    found: tuple[str, ...] = ()
    for _ in range(repeat):
        started, used = time.perf_counter(), time.process_time()
        found = chips.on_board(conn, listed, 3)
        cpu.append(time.process_time() - used)
        wall.append(time.perf_counter() - started)
    return found, statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", required=True, help="a DuckDB store file")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    listed = frozenset(c["name"] for c in known_chips())
    sub = tables.submissions
    with make_engine(f"duckdb:///{args.database}").connect() as conn:
        total = conn.execute(select(func.count()).select_from(sub)).scalar()
        unlisted = conn.execute(select(func.count()).select_from(sub).where(
            sub.c.chip.not_in(sorted(listed)))).scalar()
        print(f"{total:,} submissions, {unlisted:,} on unlisted chips")  # noqa: T201
        found, cpu, wall = _timed(conn, listed, args.repeat)
        print(f"the shipped table ({len(listed)} chips): {len(found) - len(listed)} "  # noqa: T201
              f"corroborated; CPU {cpu:.1f} ms, wall {wall:.1f} ms")
        _, cpu, wall = _timed(conn, frozenset(found), args.repeat)
        print(f"a refresh with no decision since: CPU {cpu:.1f} ms, wall {wall:.1f} ms")  # noqa: T201


if __name__ == "__main__":
    main()
