"""Ingest throughput of the two deployments in one run: one DuckDB server vs replicas on
PostgreSQL.

    .venv/bin/python bench/ingest_replicas.py [--duration 30] [--connections 64] [--replicas 2]

Uses bench/ingest.py's pre-generated distinct signed submissions and its minimal HTTP/1.1
load generator (N keep-alive connections on loopback), then drives, one after the other:

1. one `specserver serve` on an embedded DuckDB file (in-process rate limiter);
2. ``--replicas`` `specserver serve` processes on one PostgreSQL (a private schema in
   ``--postgres``, dropped afterwards) with the Redis rate limiter (``--redis``), the
   connections spread evenly over the replicas (what a round-robin balancer does).

Rate limits are ON with limits too high to trigger, so each run pays for its limiter
(in-process vs a Redis round trip per bucket). Prints accepted/s (201s), p50/p99 latency
of the 201s, the servers' CPU and the whole machine's CPU busy share.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

from ingest import SPECSERVER, Tally, _connection, free_port, generate

HIGH_LIMIT = {"SPECSERVER_RATE_KEY_PER_MINUTE": "100000000",
              "SPECSERVER_RATE_KEY_BURST": "100000000",
              "SPECSERVER_RATE_ADDR_PER_MINUTE": "100000000",
              "SPECSERVER_RATE_ADDR_BURST": "100000000"}


@dataclass
class Proc:
    database: str
    log: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECSERVER_")}
        env.update(HIGH_LIMIT)
        env.update(self.env)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [SPECSERVER, "serve", "--port", str(self.port), "--database", self.database],
                env=env, stdout=subprocess.DEVNULL, stderr=log)

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not start")

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)


def machine_busy() -> tuple[float, float]:
    """(busy jiffies, total jiffies) from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))


async def drive(ports: list[int], bodies: list[bytes], connections: int, warmup: float,
                duration: float) -> Tally:
    tally = Tally()
    source = itertools.cycle(bodies)
    measure_from = time.perf_counter() + warmup
    until = measure_from + duration
    await asyncio.gather(*(
        _connection(ports[i % len(ports)], source, until, tally, measure_from)
        for i in range(connections)
    ))
    return tally


@dataclass
class Result:
    label: str
    accepted_per_s: float
    p50_ms: float
    p99_ms: float
    statuses: dict[int, int]
    server_cpu: float  # cores, all server processes together
    machine_busy: float  # share of all cores


def measure(label: str, servers: list[Proc], bodies: list[bytes],
            args: argparse.Namespace) -> Result:
    for s in servers:
        s.start()
    try:
        for s in servers:
            s.wait_healthy()
        cpu0 = sum(s.cpu_seconds() for s in servers)
        busy0, total0 = machine_busy()
        wall0 = time.perf_counter()
        tally = asyncio.run(drive([s.port for s in servers], bodies, args.connections,
                                  args.warmup, args.duration))
        wall = time.perf_counter() - wall0
        server_cpu = (sum(s.cpu_seconds() for s in servers) - cpu0) / wall
        busy1, total1 = machine_busy()
    finally:
        for s in servers:
            s.stop()
    lat = sorted(tally.latencies) or [float("nan")]
    return Result(
        label=label,
        accepted_per_s=tally.statuses.get(201, 0) / args.duration,
        p50_ms=statistics.median(lat) * 1000,
        p99_ms=lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
        statuses=dict(sorted(tally.statuses.items())),
        server_cpu=server_cpu,
        machine_busy=(busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--max-rate", type=float, default=2500.0,
                        help="submissions/s to pre-generate for (pool = rate x time)")
    args = parser.parse_args()
    try:
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    count = int(args.max_rate * (args.duration + args.warmup))
    started = time.perf_counter()
    bodies = generate(count)
    print(f"pre-generated {len(bodies):,} distinct signed submissions in "
          f"{time.perf_counter() - started:.1f} s")
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(args.postgres, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    pg_url = (args.postgres.replace("postgresql://", "postgresql+psycopg://", 1)
              + f"?options=-csearch_path%3D{schema}")
    print(f"\n{args.connections} connections, {args.duration:g} s measured after "
          f"{args.warmup:g} s warm-up, loopback, {os.cpu_count()} cores, Python "
          f"{sys.version.split()[0]}")
    print(f"{'run':36} {'accepted/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'server CPU':>11} "
          f"{'machine busy':>13}  statuses", flush=True)

    def show(r: Result) -> None:
        print(f"{r.label:36} {r.accepted_per_s:11,.0f} {r.p50_ms:8.1f} {r.p99_ms:8.1f} "
              f"{r.server_cpu:10.2f}c {r.machine_busy:12.0%}  {r.statuses}", flush=True)

    try:
        with tempfile.TemporaryDirectory(prefix="bench-replicas-") as folder:
            tmp = Path(folder)
            duck = [Proc(str(tmp / "bench.duckdb"), tmp / "duckdb.log", {})]
            show(measure("1 server, DuckDB file", duck, bodies, args))
            replicas = [Proc(pg_url, tmp / f"pg-{i}.log", {"SPECSERVER_REDIS_URL": args.redis})
                        for i in range(args.replicas)]
            show(measure(f"{args.replicas} replicas, PostgreSQL + Redis", replicas, bodies,
                         args))
    finally:
        with psycopg.connect(args.postgres, autocommit=True) as admin:
            stored = admin.execute(f'SELECT count(*) FROM "{schema}".submissions').fetchone()
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    print(f"\nrows in PostgreSQL after the replica run: {stored[0] if stored else 0:,}")


if __name__ == "__main__":
    main()
