"""What an audit costs: `specserver audit` against a real server holding N submissions.

    .venv/bin/python bench/audit.py [--submissions 2000] [--hidden 20]

Builds an embedded DuckDB store in a temporary folder through a real uvicorn server
(bench/ingest.py's signed hardnumbers-m2 envelopes, POSTed one by one), hides some,
writes a signed snapshot, then audits it from the outside over HTTP and prints: the wall
time, the requests the auditor made (by kind), and the CPU of this process during the
audit (the server and the auditor share it: they run in one process here). Then the
cost of one ``/log/index`` bundle of 256 entries served, which the auditor reads once per
bundle.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.liveserver import serve  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

from ingest import generate  # noqa: E402
from specserver.audit import PublicSource, audit  # noqa: E402
from specserver.http.app import create_app  # noqa: E402
from specserver.settings import ServerSettings  # noqa: E402

TOKEN = "bench"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--submissions", type=int, default=2000)
    parser.add_argument("--hidden", type=int, default=20)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    port = free_port()
    settings = ServerSettings(
        database_url=str(folder / "store.duckdb"), public_base_url=f"http://127.0.0.1:{port}",
        log_key_file=str(folder / "log-key"), snapshot_dir=str(folder / "snapshots"),
        admin_token=TOKEN, rate_key_per_minute=0, rate_addr_per_minute=0,
        rate_reject_per_minute=0, log_checkpoint_s=0.001)
    bodies = generate(args.submissions)
    with serve(create_app(settings), port) as url, httpx.Client(base_url=url) as client:
        started = time.monotonic()
        ids = []
        for body in bodies:
            answer = client.post("/v1/submissions", content=body)
            assert answer.status_code == 201, answer.text
            ids.append(answer.json()["submission_id"])
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for submission_id in ids[:args.hidden]:
            client.post("/admin/v1/hide", headers=auth,
                        json={"submission_id": submission_id, "reason": "bench"})
        client.post("/admin/v1/snapshot", headers=auth, timeout=300)
        print(f"store: {len(ids)} submissions, {args.hidden} hidden, a snapshot "
              f"({time.monotonic() - started:.1f} s to build)")

        kinds: Counter[str] = Counter()

        def count(request: httpx.Request) -> None:
            parts = request.url.path.split("/")
            kinds["/".join(parts[:3])] += 1

        source = PublicSource(httpx.Client(base_url=url, timeout=60,
                                           event_hooks={"request": [count]}), url)
        cpu, wall = time.process_time(), time.monotonic()
        report = audit(source)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        source.close()
        print(report.summary())
        print(f"audit: {wall:.1f} s wall, {cpu:.1f} s CPU (server and auditor, one process), "
              f"{sum(kinds.values())} requests; load {os.getloadavg()[0]:.1f}")
        print("  requests: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
        print(f"  per logged submission: {1000 * wall / len(ids):.2f} ms wall, "
              f"{1000 * cpu / len(ids):.2f} ms CPU")

        times = []
        for _ in range(5):
            cpu = time.process_time()
            assert client.get("/log/index/000").status_code == 200
            times.append(time.process_time() - cpu)
        print(f"/log/index/000 (256 entries, {args.hidden} of them hides): "
              f"{1000 * min(times):.1f}-{1000 * max(times):.1f} ms CPU")


if __name__ == "__main__":
    main()
