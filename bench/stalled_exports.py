"""Soak: steady ingest with and without 30 stalled exports.

    .venv/bin/python bench/stalled_exports.py [--duration 60] [--stalled 30] [--connections 64]

Two runs against a real `specserver serve` (default settings, embedded DuckDB), each on a
fresh store whose export is ~11 MB of CSV (tests/reliability/stalling.py ``big_store``), so
an export outlasts the kernel's socket buffers:

1. ingest alone: bench/ingest.py's load generator over ``--connections`` keep-alive
   connections for ``--duration`` seconds;
2. the same ingest while ``--stalled`` attackers ask for ``GET /v1/export`` and never read
   (4 KiB receive buffers). An attacker whose export is refused (503) or dropped by the
   server asks again a second later, ignoring Retry-After, so the server is under the
   attack for the whole run.

Throughout both, a separate process probes ``GET /healthz`` every 20 ms on its own
keep-alive connection; the attackers run in a process of their own too, so that neither
takes the load generator's GIL. Prints ingest accepted/s of each run and their ratio, and the
/healthz p50/p99/max of each. Targets: ingest with the stalls >= 90 % of the
run without, /healthz p99 <= 100 ms. Timings depend on the machine and its load: record
them in BENCHMARKS.md with the load average printed here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.stalling import big_store, stall  # noqa: E402

from ingest import Server, drive, generate  # noqa: E402

PROBE_EVERY_S = 0.02


# --- the /healthz probe, in its own process (no GIL shared with the load generator) -------


def probe(port: int, duration: float) -> None:
    """Print a JSON list of /healthz latencies in ms (``None``: no answer within 5 s)."""
    request = b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n"
    latencies: list[float | None] = []
    sock: socket.socket | None = None
    until = time.perf_counter() + duration
    while time.perf_counter() < until:
        started = time.perf_counter()
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(request)
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"}"):
                chunk = sock.recv(4096)
                if not chunk:
                    raise ConnectionError("closed")
                data += chunk
            latencies.append((time.perf_counter() - started) * 1000)
        except OSError:
            latencies.append(None)
            if sock is not None:
                sock.close()
            sock = None
        time.sleep(max(0.0, PROBE_EVERY_S - (time.perf_counter() - started)))
    print(json.dumps(latencies))


# --- the attackers ---------------------------------------------------------------------


@dataclass
class Attack:
    port: int
    count: int
    answers: dict[str, int] = field(default_factory=dict)  # status line -> how many
    dropped: int = 0  # stalled exports the server closed
    counted: set[int] = field(default_factory=set)  # sockets whose 200 is counted

    def report(self) -> dict[str, Any]:
        return {"answers": self.answers, "dropped": self.dropped}

    def run(self, duration: float) -> None:
        socks = [self._open() for _ in range(self.count)]
        until = time.monotonic() + duration
        while time.monotonic() < until:
            time.sleep(1.0)
            for i, sock in enumerate(socks):
                state = self._state(sock)
                if state == "stalled":
                    continue
                if state == "dropped":
                    self.dropped += 1
                self.counted.discard(sock.fileno())
                sock.close()
                socks[i] = self._open()
        for sock in socks:
            sock.close()

    def _open(self) -> socket.socket:
        sock = stall(self.port)
        sock.setblocking(False)
        return sock

    def _state(self, sock: socket.socket) -> str:
        """Look at the answer without reading it (MSG_PEEK): a 200 stays stalled."""
        poller = select.poll()  # POLLRDHUP: the server closed, even with data unread
        poller.register(sock, select.POLLIN | select.POLLRDHUP)
        events = dict(poller.poll(0)).get(sock.fileno(), 0)
        if events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR):
            return "dropped"
        if not events:
            return "stalled"
        try:
            head = sock.recv(32, socket.MSG_PEEK)
        except OSError:
            return "dropped"
        if not head:
            return "dropped"
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        if line.startswith("HTTP/1.1 200"):
            if sock.fileno() not in self.counted:
                self.answers[line] = self.answers.get(line, 0) + 1
                self.counted.add(sock.fileno())
            return "stalled"
        self.answers[line] = self.answers.get(line, 0) + 1
        return "refused"


# --- one run ---------------------------------------------------------------------------


@dataclass
class Outcome:
    label: str
    accepted_per_s: float
    statuses: dict[int, int]
    health_p50_ms: float
    health_p99_ms: float
    health_max_ms: float
    health_failed: int
    server_cpu: float  # share of one core: the server process and its children
    load_cpu: float  # share of one core: this process, the load generator
    attack: dict[str, Any] | None  # Attack.report()


def _percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(len(values) * share))] if values else float("nan")


def run(label: str, bodies: list[bytes], args: argparse.Namespace, stalled: int) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="bench-stalled-") as folder:
        big_store(Path(folder) / "bench.duckdb", copies=args.copies)
        server = Server(True, Path(folder), args.check_workers)
        server.start()
        attacker: subprocess.Popen[bytes] | None = None
        try:
            if stalled:
                attacker = subprocess.Popen(
                    [sys.executable, __file__, "--attack", str(server.port), "--stalled",
                     str(stalled), "--duration", str(args.duration + args.warmup + 2.0)],
                    stdout=subprocess.PIPE)
                time.sleep(2.0)  # the attack is in place before the measurement starts
            prober = subprocess.Popen(
                [sys.executable, __file__, "--probe", str(server.port),
                 "--duration", str(args.duration + args.warmup)],
                stdout=subprocess.PIPE)
            cpu0, wall0 = sum(server.cpu_seconds()), time.perf_counter()
            load0 = time.process_time()
            tally = asyncio.run(drive(server.port, bodies, args.connections, args.warmup,
                                      args.duration))
            wall = time.perf_counter() - wall0
            server_cpu = (sum(server.cpu_seconds()) - cpu0) / wall
            load_cpu = (time.process_time() - load0) / wall
            out, _ = prober.communicate(timeout=60)
            attack = (json.loads(attacker.communicate(timeout=60)[0])
                      if attacker is not None else None)
        finally:
            if attacker is not None and attacker.poll() is None:
                attacker.kill()
            server.stop()
    probes: list[float | None] = json.loads(out)
    answered = sorted(p for p in probes if p is not None)
    return Outcome(
        label=label,
        accepted_per_s=tally.statuses.get(201, 0) / args.duration,
        statuses=dict(sorted(tally.statuses.items())),
        health_p50_ms=statistics.median(answered) if answered else float("nan"),
        health_p99_ms=_percentile(answered, 0.99),
        health_max_ms=answered[-1] if answered else float("nan"),
        health_failed=len(probes) - len(answered),
        server_cpu=server_cpu,
        load_cpu=load_cpu,
        attack=attack,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds first")
    parser.add_argument("--connections", type=int, default=64, help="ingest connections")
    parser.add_argument("--stalled", type=int, default=30, help="stalled export clients")
    parser.add_argument("--copies", type=int, default=1000,
                        help="summary rows per stored one in the seeded store (export size)")
    parser.add_argument("--max-rate", type=float, default=1200.0,
                        help="submissions/s to pre-generate for (repeats answer 200)")
    parser.add_argument("--check-workers", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=1,
                        help="pairs of runs (alone, attacked), alternating: the machine's "
                             "other load varies between runs")
    parser.add_argument("--probe", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--attack", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe, args.duration)
        return
    if args.attack:
        attack = Attack(args.attack, args.stalled)
        attack.run(args.duration)
        print(json.dumps(attack.report()))
        return
    bodies = generate(int(args.max_rate * (args.duration + args.warmup)))
    print(f"pre-generated {len(bodies):,} signed submissions; load average "
          + ", ".join(f"{v:.1f}" for v in os.getloadavg()))
    for _ in range(args.repeat):
        results = [run("ingest alone", bodies, args, 0),
                   run(f"ingest + {args.stalled} stalled exports", bodies, args, args.stalled)]
        for r in results:
            print(f"{r.label}: {r.accepted_per_s:,.0f} accepted/s {r.statuses}; server CPU "
                  f"{r.server_cpu:.0%}, load generator {r.load_cpu:.0%}; /healthz p50 "
                  f"{r.health_p50_ms:.1f} ms p99 "
                  f"{r.health_p99_ms:.1f} ms max {r.health_max_ms:.1f} ms, "
                  f"{r.health_failed} unanswered")
            if r.attack is not None:
                # A dropped stall is seen here only after its unsent bytes: the server
                # aborts its end, and the kernel sends the FIN behind them.
                print(f"  attack: {r.attack['answers']} answers, {r.attack['dropped']} "
                      "closes seen by the attackers")
        alone, attacked = results
        ratio = attacked.accepted_per_s / alone.accepted_per_s if alone.accepted_per_s else 0.0
        print(f"ingest with stalls / without: {ratio:.0%} (target >= 90 %); /healthz p99 "
              f"under attack {attacked.health_p99_ms:.1f} ms (target <= 100 ms); load average "
              + ", ".join(f"{v:.1f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
