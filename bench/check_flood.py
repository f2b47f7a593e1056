"""50 addresses sending the costliest kind of POST at the rate their buckets allow, against a
real `specserver serve` with its default limits, beside one honest contributor.

    .venv/bin/python bench/check_flood.py [--duration 60] [--senders 50] [--ms-per-token 10,0]
        [--kind "llamacpp-draft v2, wire v2, blocks"]

Each sender is its own loopback address (127.0.1.N: Linux routes all of 127/8 to lo), sends
one kind of bench/check_cost.py (``--kind``, the costliest it finds to check: a map protocol
sent as wire v1 before that bootstrap was made cheaper, a llamacpp-draft v2 result with
blocks after), and waits what Retry-After says on a 429, as a patient attacker would.
Beside them one honest contributor (127.0.0.1) sends a hardnumbers-m2 result every second
and a monitor (127.0.0.2) asks /healthz every half second. Prints per setting of
SPECSERVER_RATE_CHECK_MS_PER_TOKEN (0: one token a POST, as before; ``--addr-burst``:
SPECSERVER_RATE_ADDR_BURST): the senders' answers, the server's CPU (its process and check
workers) as cores, and the honest POSTs' and /healthz's latency (p50, p99, max) and answers.

``--tree DIR`` (repeatable) runs the flood once per tree against a server whose packages
come from that tree (``PYTHONPATH=DIR/server:DIR/schema``; ``.``: the installed checkout),
all with the same bodies, so that two commits can be alternated without signing the bodies
again. ``--py-spy PREFIX`` records the server process of every run with py-spy (sampled
stacks of every thread, idle ones included, at ``--py-spy-rate`` a second) into
``PREFIX-<run>.txt`` (collapsed stacks; ``--py-spy-run N``: only run N); such a run is not
a clean figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, bench
from bench.check_cost import KINDS, _fresh, hardnumbers_template  # noqa: E402
from bench.ingest import Server  # noqa: E402

from specserver.settings import ServerSettings  # noqa: E402

# Requests that start this long after the flood did are also reported apart: the senders'
# bursts are spent by then, and what is left is what their refill allows.
STEADY_AFTER_S = 20.0


@dataclass
class Tally:
    statuses: dict[int, int] = field(default_factory=dict)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (started, seconds)
    start: float = field(default_factory=time.perf_counter)

    def add(self, status: int, seconds: float) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.latencies.append((time.perf_counter() - seconds - self.start, seconds))

    @staticmethod
    def _spread(values: list[float]) -> str:
        lat = sorted(values) or [float("nan")]
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        return (f"p50 {statistics.median(lat) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms, max "
                f"{lat[-1] * 1e3:.0f} ms")

    def words(self) -> str:
        steady = [s for at, s in self.latencies if at >= STEADY_AFTER_S]
        slowest = sorted(self.latencies, key=lambda x: -x[1])[:3]
        return (f"{self._spread([s for _, s in self.latencies])} (after {STEADY_AFTER_S:g} s: "
                f"{self._spread(steady)}, {len(steady)}), answers "
                f"{dict(sorted(self.statuses.items()))}, slowest at "
                + ", ".join(f"{at:.0f} s: {s * 1e3:.0f} ms" for at, s in slowest))


async def _request(port: int, source: str, method: str, path: str, body: bytes = b""
                   ) -> tuple[int, float, float | None]:
    """One request on its own connection from ``source``: (status, seconds, Retry-After)."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                     .encode() + body)
        header = await reader.readuntil(b"\r\n\r\n")
        await reader.read()
    finally:
        writer.close()
    retry = None
    for line in header.split(b"\r\n"):
        if line[:12].lower() == b"retry-after:":
            retry = float(line[12:])
    return int(header[9:12]), time.perf_counter() - started, retry


async def _sender(port: int, source: str, bodies: list[bytes], until: float,
                  tally: Tally) -> None:
    at = 0
    while time.perf_counter() < until:
        try:
            status, seconds, retry = await _request(port, source, "POST", "/v1/submissions",
                                                    bodies[at % len(bodies)])
        except OSError:
            await asyncio.sleep(0.5)
            continue
        at += 1
        tally.add(status, seconds)
        if retry is not None:
            await asyncio.sleep(min(retry, max(0.0, until - time.perf_counter())))


async def _every(port: int, source: str, step: float, until: float, tally: Tally,
                 method: str, path: str, bodies: list[bytes] | None = None) -> None:
    due, at = time.perf_counter(), 0
    while time.perf_counter() < until:
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        due += step
        body = bodies[at % len(bodies)] if bodies else b""
        at += 1
        try:
            status, seconds, _ = await _request(port, source, method, path, body)
        except OSError:
            status, seconds = 0, step
        tally.add(status, seconds)


async def flood(port: int, senders: list[list[bytes]], honest: list[bytes], duration: float
                ) -> tuple[Tally, Tally, Tally]:
    until = time.perf_counter() + duration
    attack, posts, health = Tally(), Tally(), Tally()
    await asyncio.gather(
        *(_sender(port, f"127.0.1.{i + 1}", bodies, until, attack)
          for i, bodies in enumerate(senders)),
        _every(port, "127.0.0.1", 1.0, until, posts, "POST", "/v1/submissions", honest),
        _every(port, "127.0.0.2", 0.5, until, health, "GET", "/healthz"))
    return attack, posts, health


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--senders", type=int, default=50)
    parser.add_argument("--bodies", type=int, default=20, help="distinct bodies per sender")
    parser.add_argument("--ms-per-token", default="2,0")
    parser.add_argument("--addr-burst", type=int, default=None,
                        help="SPECSERVER_RATE_ADDR_BURST (the server's default: unset)")
    parser.add_argument("--kind", default="ollama-map v1, wire v1",
                        choices=[k for k, (_, probe) in KINDS.items() if not probe],
                        help="what the senders send (bench/check_cost.py's kinds)")
    parser.add_argument("--tree", action="append", default=None,
                        help="a run against the server from this tree (repeatable; '.': the "
                        "installed checkout, the default)")
    parser.add_argument("--py-spy", default=None, metavar="PREFIX",
                        help="record each run's server process with py-spy into PREFIX-N.txt")
    parser.add_argument("--py-spy-rate", type=int, default=50)
    parser.add_argument("--py-spy-run", type=int, action="append", default=None,
                        help="record only this run (1 = the first; repeatable)")
    args = parser.parse_args()
    costly = KINDS[args.kind][0]
    senders = [[costly(5000 + 100 * i + j) for j in range(args.bodies)]
               for i in range(args.senders)]
    honest = [_fresh(hardnumbers_template(900 + j), 900 + j) for j in range(200)]
    print(f"{args.senders} senders x {args.bodies} bodies of {args.kind}, "  # noqa: T201
          f"{args.duration:g} s per run; load before: {os.getloadavg()[0]:.1f}")
    runs = [(float(v), tree) for v in args.ms_per_token.split(",")
            for tree in (args.tree or ["."])]
    for run, (ms_per_token, tree) in enumerate(runs, 1):
        load_before = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="bench-flood-") as folder:
            # the shipped rate limits (bench/ingest.py's Server turns them off)
            shipped = ServerSettings()
            limits = {"SPECSERVER_RATE_KEY_PER_MINUTE": repr(shipped.rate_key_per_minute),
                      "SPECSERVER_RATE_ADDR_PER_MINUTE": repr(shipped.rate_addr_per_minute),
                      "SPECSERVER_RATE_CHECK_MS_PER_TOKEN": repr(ms_per_token)}
            if args.addr_burst is not None:
                limits["SPECSERVER_RATE_ADDR_BURST"] = str(args.addr_burst)
            if tree != ".":
                root = Path(tree).resolve()
                limits["PYTHONPATH"] = f"{root / 'server'}:{root / 'schema'}"
            server = Server(True, Path(folder), settings=limits)
            server.start()
            spy = None
            try:
                if args.py_spy is not None and run in (args.py_spy_run or [run]):
                    assert server.proc is not None
                    spy = subprocess.Popen(  # noqa: S603 - the bench's own tool
                        [str(Path(sys.executable).with_name("py-spy")), "record", "--pid",
                         str(server.proc.pid), "--duration", f"{args.duration:.0f}", "--rate",
                         str(args.py_spy_rate), "--idle", "--threads", "--format", "raw",
                         "--output", f"{args.py_spy}-{run}.txt"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                main0, workers0 = server.cpu_seconds()
                wall0, own0 = time.perf_counter(), time.process_time()
                attack, posts, health = asyncio.run(flood(server.port, senders, honest,
                                                          args.duration))
                wall = time.perf_counter() - wall0
                own = (time.process_time() - own0) / wall
                main1, workers1 = server.cpu_seconds()
            finally:
                if spy is not None:
                    spy.wait(30)
                server.stop()
        cores = (main1 - main0 + workers1 - workers0) / wall
        print(f"run {run}, tree {tree}, load before {load_before:.1f}, "  # noqa: T201
              f"ms per token {ms_per_token:g}, address burst {args.addr_burst or 'default'}:"
              f" senders {dict(sorted(attack.statuses.items()))}"  # noqa: T201
              f" ({attack.statuses.get(201, 0) / wall:.1f} stored/s), server CPU "
              f"{cores:.2f} cores (server process {(main1 - main0) / wall:.2f}, check workers "
              f"{(workers1 - workers0) / wall:.2f}; the bench's own client {own:.2f}); "
              f"honest POST {posts.words()}; "
              f"/healthz {health.words()}; load after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
