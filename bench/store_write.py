"""The store's write path alone: group-commit writers on DuckDB and on PostgreSQL.

    .venv/bin/python bench/store_write.py [--submissions 6000] [--batch 256]

HTTP, signature checks and validation are done before the clock starts (bench/ingest.py
and bench/ingest_replicas.py measure the whole path); then the checked submissions are
queued into real ``Store`` writers as fast as they take them, and the run reports
submissions committed per second, the commits it took and the CPU per submission (the
writer threads; rows are built beforehand, as the request handlers do, and the CPU that
takes is reported on its own line):

- one writer on an embedded DuckDB file (native appender);
- one writer on PostgreSQL (staging COPY + INSERT ... ON CONFLICT, COPY of the children);
- two writers (two replicas' worth) on the same PostgreSQL schema, each fed half, in
  parallel threads of this process.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from ingest import generate
from specserver.ingest.checks import Checked, check_submission
from specserver.ingest.rows import submission_rows
from specserver.store.database import Store
from specserver.store.writes import WriteRequest


def requests(checked: list[Checked]) -> list[WriteRequest]:
    """Rows built beforehand (the request handlers' share of the work)."""
    now = datetime.now(UTC)
    return [WriteRequest(c.submission_id, c.body_sha256, now, submission_rows(c, now), Future())
            for c in checked]


def rows_cpu_us(checked: list[Checked], passes: int = 5) -> float:
    """CPU to build the rows of one submission, min over ``passes`` passes."""
    now = datetime.now(UTC)
    best = float("inf")
    for _ in range(passes):
        cpu0 = time.process_time()
        for c in checked:
            submission_rows(c, now)
        best = min(best, time.process_time() - cpu0)
    return best / len(checked) * 1e6


def feed(stores: list[Store], checked: list[Checked]) -> tuple[float, float, int]:
    """Queue every submission (store i gets every len(stores)-th); (seconds, CPU s, commits)."""
    parts = [requests(checked[i::len(stores)]) for i in range(len(stores))]
    cpu0, wall0 = time.process_time(), time.perf_counter()

    def push(i: int) -> None:
        for request in parts[i]:
            stores[i].writer.submit(request)
        for request in parts[i]:
            assert request.future.result(300).status == "created"

    threads = [threading.Thread(target=push, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - wall0, time.process_time() - cpu0, sum(
        s.writer.batches for s in stores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--submissions", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=256, help="group_commit_max")
    parser.add_argument("--window-ms", type=float, default=4.0, help="group commit window")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--duckdb-only", action="store_true", help="skip the PostgreSQL runs")
    args = parser.parse_args()
    bodies = generate(args.submissions, templates=128, keys=200)
    now = datetime.now(UTC)
    checked = [check_submission(b, now=now, max_age=timedelta(days=30),
                                max_future_skew=timedelta(minutes=5)) for b in bodies]
    print(f"{len(checked):,} checked submissions ready; batch <= {args.batch}, "
          f"window {args.window_ms:g} ms")
    print(f"submission_rows: {rows_cpu_us(checked):.1f} us per submission (min of 5 passes)")
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = None if args.duckdb_only else psycopg.connect(args.postgres, autocommit=True)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-store-") as folder:
            runs = [("DuckDB file, 1 writer", [f"duckdb:///{Path(folder) / 's.duckdb'}"])]
            for n in (1, 2) if admin is not None else ():
                name = f"{schema}_{n}"
                admin.execute(f'CREATE SCHEMA "{name}"')
                url = (args.postgres.replace("postgresql://", "postgresql+psycopg://", 1)
                       + f"?options=-csearch_path%3D{name}")
                runs.append((f"PostgreSQL, {n} writer{'s' if n > 1 else ''}", [url] * n))
            for label, urls in runs:
                stores = [Store(u, group_commit_s=args.window_ms / 1000,
                                group_commit_max=args.batch) for u in urls]
                for s in stores:
                    s.open()
                try:
                    wall, cpu, commits = feed(stores, checked)
                finally:
                    for s in stores:
                        s.close()
                rows.append((label, len(checked) / wall, commits, cpu / len(checked) * 1000))
    finally:
        if admin is not None:
            for n in (1, 2):
                admin.execute(f'DROP SCHEMA IF EXISTS "{schema}_{n}" CASCADE')
            admin.close()
    print(f"\nPython {sys.version.split()[0]}")
    print(f"{'run':28} {'committed/s':>12} {'commits':>8} {'writer CPU ms/sub':>18}")
    for label, rate, commits, cpu_ms in rows:
        print(f"{label:28} {rate:12,.0f} {commits:8,} {cpu_ms:18.3f}")


if __name__ == "__main__":
    main()
