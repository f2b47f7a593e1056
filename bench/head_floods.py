"""One address against everybody's connections: unfinished heads and endless headers.

    .venv/bin/python bench/head_floods.py [--heads 2000] [--caps 300,2000] [--seconds 30]
                                          [--flooders 8] [--flood-seconds 20]

Against a real `specserver serve` (embedded DuckDB on a fresh store, default settings but
for ``SPECSERVER_MAX_CONNECTIONS``), the two attacks of the review, at its scale
(tests/reliability/headfloods.py does the attacking):

1. for each cap in ``--caps``: an attacker process on 127.0.0.1 keeps ``--heads``
   unfinished request heads open for ``--seconds`` and replaces each the server closes
   at once; from 2 s in, ``GET /healthz`` from 127.0.0.2 on a new connection every
   0.25 s (3 s timeout). Prints the share answered 200 (target >= 95 %), their p50/p99,
   and how many connections the attacker held. The review: 0 of 28 answered at cap 300,
   1 of 27 at 2,000.
2. ``--flooders`` connections on 127.0.0.1 send header lines without end for
   ``--flood-seconds``, reconnecting when closed; the server's resident memory before,
   at its peak (sampled every 0.2 s) and 3 s after. Target: within 100 MiB of where it
   started. The review: 236 -> 1,116 MiB, 503 MiB after.

Timings depend on the machine and its load: the load average is printed with each run;
record both in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.headfloods import (  # noqa: E402
    Sampler,
    endless_headers,
    hold_heads,
    open_fds,
    probe_for,
    raise_own_fd_limit,
    resident_mib,
)
from tests.reliability.servers import ServerProcess  # noqa: E402

PROBE_START_S = 2.0


def _load() -> str:
    return ", ".join(f"{v:.1f}" for v in os.getloadavg())


def _attacker(port: int, count: int, seconds: float, out: Connection) -> None:
    raise_own_fd_limit(count + 256)
    out.send(hold_heads(port, count, seconds))


def _server(folder: Path, **env: str) -> ServerProcess:
    server = ServerProcess(str(folder / "store.duckdb"), folder,
                           env={"SPECSERVER_CHECK_WORKERS": "1", **env})
    server.start()
    return server


def heads(cap: int, count: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="head-floods-") as folder:
        server = _server(Path(folder), SPECSERVER_MAX_CONNECTIONS=str(cap))
        receive, send = multiprocessing.Pipe(duplex=False)
        attacker = multiprocessing.Process(target=_attacker,
                                           args=(server.port, count, seconds, send))
        assert server.proc is not None
        pid = server.proc.pid
        try:
            load_before = _load()
            fds_before = open_fds(pid)
            with Sampler(lambda: open_fds(pid), 0.1) as fds:
                attacker.start()
                time.sleep(PROBE_START_S)
                probes = probe_for(server.port, seconds - PROBE_START_S - 1, 0.25)
            result = receive.recv()
            attacker.join(30)
        finally:
            if attacker.is_alive():
                attacker.kill()
            server.stop()
    answered = sorted(p * 1000 for p in probes if p is not None)
    share = len(answered) / len(probes) if probes else 0.0
    p99 = answered[min(len(answered) - 1, int(len(answered) * 0.99))] if answered else 0.0
    # What the server held (its descriptors beyond those before the attack), from the
    # probes' start: a connection refused at once still has its descriptor for a moment.
    held = [n - fds_before for n in fds.samples[int(PROBE_START_S * 10):]] or [0]
    print(f"cap {cap:,}, {count:,} unfinished heads from 127.0.0.1 for {seconds:g} s: "
          f"/healthz from 127.0.0.2 answered {len(answered)} of {len(probes)} "
          f"({share:.0%}; target >= 95 %), p50 "
          f"{statistics.median(answered) if answered else 0:.1f} ms, p99 {p99:.1f} ms; "
          f"the server held {statistics.median(held):,.0f} connections (median; max "
          f"{max(held):,}) from {PROBE_START_S:g} s on; the attacker opened "
          f"{result.opened:,}, {result.closed:,} closed by the server "
          f"{dict(sorted(result.answers.items()))}, {result.refused:,} connects failed; "
          f"load average before {load_before}, after {_load()}", flush=True)


def flood(connections: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="head-floods-") as folder:
        server = _server(Path(folder))
        assert server.proc is not None
        pid = server.proc.pid
        try:
            load_before = _load()
            probe_for(server.port, 1.0, 0.05)  # warm: the first requests allocate
            before = resident_mib(pid)
            samples: list[float] = []
            stop = threading.Event()

            def sample() -> None:
                while not stop.wait(0.2):
                    samples.append(resident_mib(pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            result = endless_headers(server.port, connections, seconds)
            stop.set()
            sampler.join()
            time.sleep(3)
            after = resident_mib(pid)
            healthy = probe_for(server.port, 0.5, 0.1)
        finally:
            server.stop()
    peak = max(samples, default=before)
    print(f"{connections} connections sending endless header lines for {seconds:g} s: "
          f"{result.bytes_sent / 2**20:,.0f} MiB handed to the kernel over "
          f"{result.connections:,} "
          f"connections {dict(sorted(result.answers.items()))}; server RSS {before:.0f} -> "
          f"peak {peak:.0f} -> {after:.0f} MiB 3 s after (peak - start {peak - before:+.0f} "
          f"MiB; target within 100 MiB); /healthz after: "
          f"{sum(p is not None for p in healthy)} of {len(healthy)}; load average before "
          f"{load_before}, after {_load()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", type=int, default=2000)
    parser.add_argument("--caps", default="300,2000",
                        help="SPECSERVER_MAX_CONNECTIONS of each run, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--flooders", type=int, default=8)
    parser.add_argument("--flood-seconds", type=float, default=20.0)
    parser.add_argument("--only", choices=["heads", "flood"], default=None)
    args = parser.parse_args()
    raise_own_fd_limit(args.heads + 512)
    if args.only != "flood":
        for cap in (int(c) for c in args.caps.split(",")):
            heads(cap, args.heads, args.seconds)
    if args.only != "heads":
        flood(args.flooders, args.flood_seconds)


if __name__ == "__main__":
    main()
