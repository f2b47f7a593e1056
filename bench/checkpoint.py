"""DuckDB checkpoints of the ingest tables: how long a checkpoint blocks the writer.

    .venv/bin/python bench/checkpoint.py [--per-checkpoint 14000] [--rounds 8] [--batch 128]

A checkpoint runs inside the commit that crosses DuckDB's WAL threshold, and every writer
waits for it, so its duration is a latency spike for every submission in that batch. This
appends real ingest rows (distinct signed submissions, checked and turned into rows the
way the server does, fresh ids per round) into a ``Store``'s DuckDB file in group-commit
batches, with automatic checkpoints off, then runs ``CHECKPOINT`` every
``--per-checkpoint`` submissions and prints its wall and CPU time and the file size: once
with the store's settings (``store.DUCKDB_SETTINGS``: vacuum tasks off) and once with
DuckDB's default vacuum tasks, the setting the store had before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ingest import generate
from specserver.ingest.checks import check_submission
from specserver.ingest.rows import submission_rows
from specserver.store.database import Store
from specserver.store.tables import INGEST_TABLES, RowSet

DUCKDB_DEFAULT_VACUUM_TASKS = 100


def template_rows(count: int) -> list[RowSet]:
    now = datetime.now(UTC)
    rows = []
    for body in generate(count):
        checked = check_submission(body, now=now, max_age=timedelta(days=3650),
                                   max_future_skew=timedelta(minutes=5))
        rows.append(submission_rows(checked, now))
    return rows


def batch_of(templates: list[RowSet], start: int, size: int) -> RowSet:
    """``size`` submissions' rows; each a template's rows under a fresh submission id."""
    out = RowSet()
    for i in range(start, start + size):
        fresh = str(uuid.uuid4())
        for table, rows in templates[i % len(templates)].rows.items():
            out.rows[table].extend((fresh, *row[1:]) for row in rows)
    return out


def run(vacuum_tasks: int | None, templates: list[RowSet], args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as folder:
        path = Path(folder) / "bench.duckdb"
        # The store locks DuckDB's configuration once it is applied (store/database.py):
        # the bench's settings go in with the store's.
        settings = {"checkpoint_threshold": "'1TB'"}  # only ours below
        if vacuum_tasks is not None:
            settings["max_vacuum_tasks"] = str(vacuum_tasks)
        store = Store(f"duckdb:///{path}", duckdb_threads=1, duckdb_settings=settings)
        store.open()
        store.writer.stop()  # this bench writes on the writer's connection itself
        writer = store.writer
        conn = writer._connection()
        label = "store settings" if vacuum_tasks is None else f"max_vacuum_tasks={vacuum_tasks}"
        walls: list[float] = []
        done = 0
        for round_ in range(args.rounds):
            batches = max(1, args.per_checkpoint // args.batch)
            for _ in range(batches):
                rows = batch_of(templates, done, args.batch)
                done += args.batch
                with conn.begin():
                    for table in INGEST_TABLES:
                        writer.bulk_insert(conn, table, rows.rows[table.name])
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            conn.exec_driver_sql("CHECKPOINT")
            conn.commit()
            wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
            walls.append(wall)
            print(f"{label:22} round {round_}: {done:>7,} submissions, checkpoint "
                  f"{wall * 1000:7.0f} ms wall {cpu * 1000:7.0f} ms CPU, file "
                  f"{path.stat().st_size / 2**20:6.0f} MiB", flush=True)
        conn.close()
        store.close()
        print(f"{label:22} checkpoint median {statistics.median(walls) * 1000:.0f} ms, "
              f"max {max(walls) * 1000:.0f} ms\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-checkpoint", type=int, default=14_000,
                        help="submissions between checkpoints (~14,000 = 256 MB of WAL)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batch", type=int, default=128, help="submissions per commit")
    parser.add_argument("--templates", type=int, default=2000)
    args = parser.parse_args()
    templates = template_rows(args.templates)
    settings: list[Any] = [None, DUCKDB_DEFAULT_VACUUM_TASKS]
    for vacuum_tasks in settings:
        run(vacuum_tasks, templates, args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
