"""Steady ingest while reading: is the board fast and fresh on a large store?

    .venv/bin/python bench/board_live.py --folder /tmp/board-1m --size 1000000 \\
        [--rate 50] [--duration 60] [--reads-per-s 10] [--ingest-only 15]

Against a real ``specserver serve`` on ``<folder>/bench.duckdb`` (generated once with
``bench/query.py``'s generator when absent, then reused: each run adds the submissions it
posts), this process posts ``--rate`` signed submissions per second for ``--duration``
seconds over keep-alive connections while two readers sample ``GET /v1/leaderboard`` and
``GET /`` (each ``--reads-per-s``). It prints:

- the server's first computation of each board (the cold start a restart costs);
- read latency p50/p99 per path, and how many reads served a board behind the store;
- the freshness lag of marked submissions (one every 5 s): from its 201 to the first read
  whose board was read from the store after it (``Board-As-Of`` later than the 201: a
  snapshot read after the commit holds it; the 201 comes after the commit);
- the server's CPU per stored submission (server process and check workers), first with
  ingest alone for ``--ingest-only`` seconds (no reads: no recomputation), then under reads
  (recomputations included).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other bench scripts
from sqlalchemy import create_engine  # noqa: E402

import ingest  # noqa: E402
import query  # noqa: E402
from specserver.store.migrations import migrate  # noqa: E402

MARK_EVERY_S = 5.0
POST_CONNECTIONS = 4


@dataclass
class Reads:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    behind: dict[str, int] = field(default_factory=dict)  # Board-Current: false
    statuses: dict[int, int] = field(default_factory=dict)
    # (when the read returned, its board's Board-As-Of), for the freshness lag
    seen: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class Posts:
    statuses: dict[int, int] = field(default_factory=dict)
    marked: list[float] = field(default_factory=list)  # time.time() of marked 201s


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes,
                   body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    writer.write(head + (b"Content-Length: %d\r\n\r\n" % len(body) if body else b"\r\n") + body)
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    content = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0][9:12]), headers, content


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


async def post_loop(port: int, bodies: itertools.cycle[bytes], rate: float, until: float,
                    posts: Posts, marking: bool) -> None:
    """``rate`` POSTs per second in all, spread over ``POST_CONNECTIONS`` connections."""
    head = (b"POST /v1/submissions HTTP/1.1\r\nHost: bench\r\n"
            b"Content-Type: application/json\r\n")
    next_mark = [time.perf_counter() + 1.0]

    async def one(offset: float) -> None:
        reader, writer = await _connect(port)
        step = POST_CONNECTIONS / rate
        due = time.perf_counter() + offset
        try:
            while due < until:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                due += step
                status, _, _ = await _request(reader, writer, head, next(bodies))
                posts.statuses[status] = posts.statuses.get(status, 0) + 1
                if marking and status == 201 and time.perf_counter() >= next_mark[0]:
                    posts.marked.append(time.time())
                    next_mark[0] += MARK_EVERY_S
        finally:
            writer.close()

    await asyncio.gather(*(one(i / rate) for i in range(POST_CONNECTIONS)))


async def read_loop(port: int, path: str, per_s: float, until: float, reads: Reads) -> None:
    reader, writer = await _connect(port)
    head = f"GET {path} HTTP/1.1\r\nHost: bench\r\n".encode()
    due = time.perf_counter()
    try:
        while due < until:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            due += 1.0 / per_s
            started = time.perf_counter()
            status, headers, _ = await _request(reader, writer, head)
            done = time.perf_counter()
            reads.statuses[status] = reads.statuses.get(status, 0) + 1
            reads.latencies.setdefault(path, []).append(done - started)
            if headers.get("board-current") == "false":
                reads.behind[path] = reads.behind.get(path, 0) + 1
            as_of = headers.get("board-as-of")
            if as_of:
                reads.seen.append((time.time(),
                                   datetime.fromisoformat(as_of.replace("Z", "+00:00"))
                                   .timestamp()))
    finally:
        writer.close()


def freshness_lags(marked: list[float], seen: list[tuple[float, float]]) -> list[float]:
    """Per marked 201: seconds until a read returned a board read from the store after it."""
    lags = []
    for at in marked:
        shown = [returned for returned, as_of in seen if as_of > at and returned >= at]
        if shown:
            lags.append(min(shown) - at)
    return lags


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def ensure_store(folder: Path, size: int) -> Path:
    path = folder / "bench.duckdb"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        engine = create_engine(f"duckdb:///{path}")
        migrate(engine)
        engine.dispose()
        query.generate(path, 0, size)
        print(f"generated {size:,} submissions in {time.perf_counter() - started:.0f} s")
    return path


def server_cpu(server: ingest.Server) -> float:
    main, workers = server.cpu_seconds()
    return main + workers


def server_rss_mib(server: ingest.Server) -> float:
    """The server process's resident memory (its check workers apart), from /proc."""
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True, type=Path,
                        help="holds bench.duckdb (generated when absent, reused after)")
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=50.0, help="submissions per second")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--reads-per-s", type=float, default=10.0, help="per path")
    parser.add_argument("--ingest-only", type=float, default=15.0,
                        help="seconds of ingest without reads first (0: none)")
    parser.add_argument("--check-workers", type=int, default=None)
    parser.add_argument("--max-stale-s", type=float, default=0.0,
                        help="SPECSERVER_READ_MAX_STALE_S for the server")
    parser.add_argument("--refresh-s", type=float, default=None,
                        help="SPECSERVER_BOARD_REFRESH_S for the server (default: its own)")
    args = parser.parse_args()
    ensure_store(args.folder, args.size)
    count = int(args.rate * (args.duration + args.ingest_only + 5))
    # New submission ids on every run: the store keeps those of the runs before.
    bodies = itertools.cycle(ingest.generate(count, keys=max(500, count // 5),
                                             seed=time.time_ns()))
    os.environ.update({"SPECSERVER_READ_WAIT_S": "0",
                       "SPECSERVER_READ_MAX_STALE_S": str(args.max_stale_s)})
    if args.refresh_s is not None:
        os.environ["SPECSERVER_BOARD_REFRESH_S"] = str(args.refresh_s)
    server = ingest.Server(True, args.folder, args.check_workers)
    server.start()
    port = server.port
    try:
        import httpx

        print(f"server resident memory before any board: {server_rss_mib(server):.0f} MiB")
        for target in ("/v1/leaderboard", "/"):  # the first computation of each board
            cpu, started = server_cpu(server), time.perf_counter()
            response = httpx.get(f"http://127.0.0.1:{port}{target}", timeout=900)
            assert response.status_code == 200, response.text[:200]
            print(f"first computation of GET {target}: {time.perf_counter() - started:.1f} s "
                  f"wall, server CPU {server_cpu(server) - cpu:.1f} s, resident memory "
                  f"{server_rss_mib(server):.0f} MiB")

        posts = Posts()
        if args.ingest_only > 0:
            cpu = server_cpu(server)
            until = time.perf_counter() + args.ingest_only
            asyncio.run(post_loop(port, bodies, args.rate, until, posts, marking=False))
            stored = posts.statuses.get(201, 0)
            print(f"ingest alone, {args.ingest_only:g} s at {args.rate:g}/s: {stored} stored, "
                  f"server CPU {(server_cpu(server) - cpu) / max(stored, 1) * 1000:.2f} ms "
                  f"per submission {dict(sorted(posts.statuses.items()))}")

        posts, reads = Posts(), Reads()
        cpu, wall = server_cpu(server), time.perf_counter()
        until = wall + args.duration

        async def together() -> None:
            await asyncio.gather(
                post_loop(port, bodies, args.rate, until, posts, marking=True),
                read_loop(port, "/v1/leaderboard", args.reads_per_s, until + 10, reads),
                read_loop(port, "/", args.reads_per_s, until + 10, reads))

        asyncio.run(together())
        spent = server_cpu(server) - cpu
        rss = server_rss_mib(server)
    finally:
        server.stop()
    stored = posts.statuses.get(201, 0)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"\n{args.duration:g} s at {args.rate:g} submissions/s with reads, "
          f"{os.cpu_count()} cores, load average {load}: {stored} stored "
          f"{dict(sorted(posts.statuses.items()))}, reads {dict(sorted(reads.statuses.items()))}")
    for target, times in reads.latencies.items():
        print(f"GET {target:<16} p50 {percentile(times, 0.5) * 1000:7.1f} ms  p99 "
              f"{percentile(times, 0.99) * 1000:7.1f} ms  max {max(times) * 1000:7.1f} ms  "
              f"({len(times)} reads, {reads.behind.get(target, 0)} while a newer board was "
              "being computed)")
    lags = freshness_lags(posts.marked, reads.seen)
    if lags:
        print(f"freshness lag of {len(lags)} of {len(posts.marked)} marked submissions: "
              f"median {statistics.median(lags):.2f} s, max {max(lags):.2f} s")
    else:
        print(f"freshness lag: none of {len(posts.marked)} marked submissions shown")
    print(f"server resident memory at the end: {rss:.0f} MiB")
    print(f"server CPU with reads: {spent / max(stored, 1) * 1000:.2f} ms per stored "
          f"submission (recomputations and reads included), {spent / args.duration:.0%} of "
          "a core")


if __name__ == "__main__":
    main()
