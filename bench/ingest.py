"""Ingest throughput: a load generator (this process) against a real `specserver serve`.

    .venv/bin/python bench/ingest.py [--duration 60] [--connections 64,192] [--warmup 3]
    .venv/bin/python bench/ingest.py --blocked ...   # llama-server llamacpp-draft v2, blocks
    .venv/bin/python bench/ingest.py --blocked --rounds ...   # with /metrics' rounds too
    .venv/bin/python bench/ingest.py --stored-only --rate 50 --connections 4 --duration 30

Pre-generates distinct, valid, signed submissions (example submissions over many seeds,
each with its own submission id and signature): by default hardnumbers-m2 v1 (3 configs x
5 trials, no blocks); with ``--blocked``, what a llama-server client sends for
llamacpp-draft (wire v2, 6 configs, 39 trials with their blocks and per-trial counters
from the engine's API), whose summary the server computes over blocks (the block
interval: most of such a submission's CPU); ``--rounds`` adds what current clients read
from llama-server's /metrics to every trial's counters (rounds and per-position counts,
which the store keeps per trial and per config). Then, in the same run, drives the server
twice over N keep-alive HTTP/1.1 connections on loopback: first with storage switched off
(SPECSERVER_STORE_ENABLED=false: the verify + validate ceiling), then with storage on (an
embedded DuckDB file in a temporary folder). Prints accepted/s (201s), p50/p99 latency,
the load generator's own CPU use and the server's CPU use.

The HTTP client is a minimal one on asyncio streams (uvloop when installed) so that the
generator costs little CPU on a 2-core machine; it is not a general HTTP client.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import itertools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import httpx
import nacl.signing

from specschema.capability import submission_verdicts
from specschema.envelope import PAYLOAD_TYPE, key_id_of, pae
from specschema.examples import example_submission
from specschema.payload import parse_submission, submission_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support
from tests.support.ports import free_port  # noqa: E402

SPECSERVER = str(Path(sys.executable).with_name("specserver"))


# --- pre-generated submissions ----------------------------------------------------------


def hardnumbers_template(seed: int) -> dict[str, Any]:
    """A hardnumbers-m2 v1 submission (no blocks, no counters) as wire JSON."""
    data: dict[str, Any] = json.loads(submission_bytes(
        example_submission("hardnumbers-m2", seed=seed)))
    return data


# llama.cpp refuses the qwen2.5 drafts for a qwen3 target (the protocol's description): a
# real client records them refused, with no trial.
REFUSED_DRAFTS = ("draft_qwen2.5_0.5b_n8", "draft_qwen2.5_1.5b_n8")
REFUSAL = "llama.cpp: the draft vocabulary differs from the target's (tokens 151665-151668)"


# Per trial of 240 drafted and 180 accepted (the example's counters): rounds and the
# rounds whose first i + 1 tokens were accepted, within the client's rules.
ROUNDS = {"rounds": 80, "accepted_per_position": [70, 60, 50]}


def blocked_template(seed: int, rounds: bool = False) -> dict[str, Any]:
    """A llamacpp-draft v2 submission as a llama-server client sends it: every trial in its
    block, counters per trial from llama-server's own API, a mild drift, the truncated
    draft ~2x, the qwen2.5 drafts refused (tests/server/store/test_blocks_store.py builds
    the same but for the refusals)."""
    rng = random.Random(seed)
    sub = example_submission(
        "llamacpp-draft", seed=seed, engine_version="b1", schema_version=2, runtime="ggml",
        counters_seen=True, blocks=True, drift=rng.uniform(0.0, 0.15),
        draft_speedups={"draft_qwen3_0.6b_n8": rng.uniform(1.8, 2.6),
                        "draft_qwen3_0.6b_n3": rng.uniform(1.4, 2.0)})
    data: dict[str, Any] = json.loads(submission_bytes(sub))
    data["engine"].update(name="llama-server", build="0.5.0-dev (build 1, commit 0c1e570)")
    for config in data["configs"]:
        speculation = config["speculation"]
        for trial in config["trials"]:
            if trial.get("counters"):
                trial["counters"]["source"] = "engine_api"
                if rounds:
                    trial["counters"].update(ROUNDS)
        if speculation["counters_source"]:
            speculation["counters_source"] = "engine_api"
        if config["name"] in REFUSED_DRAFTS:  # never started: no trials, no counters
            config["trials"] = []
            speculation.update(refusal=REFUSAL, drafted_tokens=None, accepted_tokens=None,
                               counters_source=None, outputs_match_baseline=None)
    verdicts = submission_verdicts(parse_submission(json.dumps(data).encode()))
    for config, verdict in zip(data["configs"], verdicts, strict=True):
        config["speculation"]["observed"] = verdict
    return data


def generate(count: int, templates: int = 256, keys: int = 500,
             blocked: bool = False, seed: int = 7, rounds: bool = False) -> list[bytes]:
    """``count`` distinct signed envelopes: templates vary the numbers, ids are fresh
    (drawn from ``seed``: another seed for another run on the same store)."""
    rng = random.Random(seed)
    template = blocked_template if blocked else hardnumbers_template
    bases = [blocked_template(i, rounds) if blocked else template(i)
             for i in range(templates)]
    signers = [nacl.signing.SigningKey(hashlib.sha256(b"bench-%d" % i).digest())
               for i in range(keys)]
    public = [(key_id_of(bytes(k.verify_key)),
               base64.b64encode(bytes(k.verify_key)).decode()) for k in signers]
    out: list[bytes] = []
    for i in range(count):
        data = bases[i % templates]
        data["submission_id"] = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        payload = json.dumps(data, separators=(",", ":")).encode()
        k = i % keys
        sig = signers[k].sign(pae(PAYLOAD_TYPE, payload)).signature
        out.append(json.dumps({
            "payloadType": PAYLOAD_TYPE,
            "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": public[k][0], "publicKey": public[k][1],
                            "sig": base64.b64encode(sig).decode()}],
        }, separators=(",", ":")).encode())
    return out


# --- the server -------------------------------------------------------------------------


@dataclass
class Server:
    store_enabled: bool
    folder: Path
    check_workers: int | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    # Settings over the bench's (rate limits off): bench/check_flood.py turns them on.
    settings: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        env = {**os.environ, "SPECSERVER_RATE_KEY_PER_MINUTE": "0",
               "SPECSERVER_RATE_ADDR_PER_MINUTE": "0",
               "SPECSERVER_STORE_ENABLED": "true" if self.store_enabled else "false",
               # its log's key and snapshots in its folder, never in the user's data folder
               "SPECSERVER_LOG_KEY_FILE": str(self.folder / "log-key"),
               "SPECSERVER_SNAPSHOT_DIR": str(self.folder / "snapshots"), **self.settings}
        if self.check_workers is not None:
            env["SPECSERVER_CHECK_WORKERS"] = str(self.check_workers)
        self.proc = subprocess.Popen(
            [SPECSERVER, "serve", "--port", str(self.port),
             "--database", str(self.folder / "bench.duckdb")],
            env=env, stdout=subprocess.DEVNULL, stderr=open(self.folder / "server.log", "ab"),  # noqa: SIM115
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU seconds of (the server process, its check worker processes)."""
        assert self.proc is not None
        stats = _proc_stats()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _cpu) in stats.items():
            children.setdefault(ppid, []).append(pid)
        descendants, todo = [], list(children.get(self.proc.pid, []))
        while todo:
            pid = todo.pop()
            descendants.append(pid)
            todo.extend(children.get(pid, []))
        main = stats.get(self.proc.pid, (0, 0.0))[1]
        return main, sum(stats[pid][1] for pid in descendants)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


def _proc_stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user + system CPU seconds) of every process (Linux /proc)."""
    out: dict[int, tuple[int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


# --- the load ---------------------------------------------------------------------------


@dataclass
class Tally:
    statuses: dict[int, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # of 201s, in seconds


async def _connection(port: int, bodies: Iterator[bytes], until: float, tally: Tally,
                      measure_from: float, step: float | None = None, offset: float = 0.0
                      ) -> None:
    """POSTs one after another on one keep-alive connection: as fast as the answers come,
    or one every ``step`` seconds (from ``offset``; a late answer is caught up after)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = b"POST /v1/submissions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    due = time.perf_counter() + offset
    try:
        while time.perf_counter() < until:
            if step is not None:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                due += step
            body = next(bodies)
            started = time.perf_counter()
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            header = await reader.readuntil(b"\r\n\r\n")
            status = int(header[9:12])
            length = 0
            for line in header.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            finished = time.perf_counter()
            if started >= measure_from:
                tally.statuses[status] = tally.statuses.get(status, 0) + 1
                if status == 201:
                    tally.latencies.append(finished - started)
    finally:
        writer.close()


async def drive(port: int, bodies: list[bytes], connections: int, warmup: float,
                duration: float, rate: float | None = None) -> Tally:
    """``rate``: submissions per second in all, spread evenly over the connections (as
    bench/board_live.py posts); None: each connection as fast as its answers come."""
    tally = Tally()
    source = itertools.cycle(bodies)
    start = time.perf_counter()
    measure_from = start + warmup
    until = measure_from + duration
    step = connections / rate if rate else None
    await asyncio.gather(*(
        _connection(port, source, until, tally, measure_from, step, i / rate if rate else 0.0)
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
    client_cpu: float  # share of one core
    server_cpu: float  # share of one core: the server process and its check workers
    worker_cpu: float  # share of one core: the check workers alone
    mean_batch: float | None = None  # submissions per writer commit (stored runs)


def run(label: str, store_enabled: bool, bodies: list[bytes], args: argparse.Namespace,
        connections: int) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as folder:
        server = Server(store_enabled, Path(folder), args.check_workers)
        server.start()
        try:
            main0, workers0 = server.cpu_seconds()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            tally = asyncio.run(drive(server.port, bodies, connections, args.warmup,
                                      args.duration, args.rate))
            wall = time.perf_counter() - wall0
            client_cpu = (time.process_time() - cpu0) / wall
            main1, workers1 = server.cpu_seconds()
            worker_cpu = (workers1 - workers0) / wall
            server_cpu = (main1 - main0) / wall + worker_cpu
        finally:
            server.stop()
        batch = mean_batch(Path(folder) / "bench.duckdb") if store_enabled else None
    lat = sorted(tally.latencies) or [float("nan")]
    return Result(
        label=label,
        accepted_per_s=tally.statuses.get(201, 0) / args.duration,
        p50_ms=statistics.median(lat) * 1000,
        p99_ms=lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
        statuses=dict(sorted(tally.statuses.items())),
        client_cpu=client_cpu,
        server_cpu=server_cpu,
        worker_cpu=worker_cpu,
        mean_batch=batch,
    )


def mean_batch(database: Path) -> float | None:
    """Submissions stored per writer commit over the whole run (warm-up included), from
    the store's change log (one ``seq`` per committing transaction): a commit has a fixed
    CPU cost (one appender flush per table, ~5-8 ms here), so small batches cost more per
    submission."""
    try:
        with duckdb.connect(str(database), read_only=True) as conn:
            found = conn.execute(
                "SELECT (SELECT count(*) FROM submissions), "
                "(SELECT count(DISTINCT seq) FROM board_changes WHERE submissions > 0)"
            ).fetchone()
    except duckdb.Error:  # no change log (an older store): not reported
        return None
    if found is None or not found[1]:
        return None
    return float(found[0]) / float(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds first")
    parser.add_argument("--connections", default="64,192",
                        help="concurrent connections; a comma-separated list runs each in turn")
    parser.add_argument("--max-rate", type=float, default=None,
                        help="submissions/s to pre-generate for (pool = rate x time; past it "
                             "the pool repeats and repeats answer 200, not counted); "
                             "default 3000, or 200 with --blocked")
    parser.add_argument("--rate", type=float, default=None,
                        help="submissions per second in all, spread over the connections "
                             "(default: as fast as the server answers); e.g. --rate 50 "
                             "--connections 4 --stored-only: the writer at a low steady rate")
    parser.add_argument("--blocked", action="store_true",
                        help="send llama-server llamacpp-draft v2 submissions with blocks "
                             "(the summary over blocks) instead of hardnumbers-m2 v1")
    parser.add_argument("--rounds", action="store_true",
                        help="with --blocked: every trial's counters carry rounds and "
                             "per-position counts too (llama-server's /metrics)")
    parser.add_argument("--check-workers", type=int, default=None,
                        help="SPECSERVER_CHECK_WORKERS for the server (default: serve's, one "
                             "per core; 0 = checks in the server process)")
    parser.add_argument("--stored-only", action="store_true",
                        help="only the DuckDB run (A/B of the write path), --repeat times")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args()
    try:
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:  # the stdlib loop works, at a higher CPU cost
        pass
    max_rate = args.max_rate if args.max_rate is not None else (
        1.1 * args.rate if args.rate else 200.0 if args.blocked else 3000.0)
    count = int(max_rate * (args.duration + args.warmup))
    started = time.perf_counter()
    bodies = generate(count, blocked=args.blocked, rounds=args.rounds)
    kind = ("llamacpp-draft v2 with blocks (llama-server)" if args.blocked
            else "hardnumbers-m2 v1")
    print(f"pre-generated {len(bodies):,} distinct signed {kind} submissions "
          f"({statistics.mean(len(b) for b in bodies[:100]) / 1024:.1f} KiB each) "
          f"in {time.perf_counter() - started:.1f} s")
    for connections in (int(n) for n in args.connections.split(",")):
        if args.stored_only:
            stored_only(bodies, args, connections)
        else:
            ceiling_and_stored(bodies, args, connections)


def stored_only(bodies: list[bytes], args: argparse.Namespace, connections: int) -> None:
    """A/B runs of the write path: no ceiling, no verdict."""
    for _ in range(args.repeat):
        r = run("DuckDB file, group commit", True, bodies, args, connections)
        load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
        print(f"{connections} connections, load average {load}, "
              f"stored: {r.accepted_per_s:,.0f}/s p50 "
              f"{r.p50_ms:.0f} ms p99 {r.p99_ms:.0f} ms server CPU {r.server_cpu:.0%} "
              f"(workers {r.worker_cpu:.0%}) {per_submission_ms(r):.2f} CPU ms/sub "
              f"{r.statuses}{batch_note(r)}{pool_warning(r)}")


def per_submission_ms(r: Result) -> float:
    """Server CPU (the server process and its check workers) per accepted submission."""
    return r.server_cpu / r.accepted_per_s * 1000 if r.accepted_per_s else float("nan")


def batch_note(r: Result) -> str:
    return "" if r.mean_batch is None else f"  {r.mean_batch:.0f} per commit"


def pool_warning(r: Result) -> str:
    """Past the pre-generated pool, repeats answer 200 (stored already) and do not count."""
    return ("  WARNING: the pool ran out (200s); raise --max-rate"
            if r.statuses.get(200) else "")


def ceiling_and_stored(bodies: list[bytes], args: argparse.Namespace, connections: int) -> None:
    results = [
        run("no storage (verify + validate ceiling)", False, bodies, args, connections),
        run("DuckDB file, group commit", True, bodies, args, connections),
    ]
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"\n{connections} connections, {args.duration:g} s measured after "
          f"{args.warmup:g} s warm-up, loopback, {os.cpu_count()} cores, load average {load}")
    print(f"{'run':40} {'accepted/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'client CPU':>11} "
          f"{'server CPU':>11} {'(workers)':>10} {'CPU ms/sub':>11}  statuses")
    for r in results:
        per_sub = per_submission_ms(r)
        print(f"{r.label:40} {r.accepted_per_s:11,.0f} {r.p50_ms:8.1f} {r.p99_ms:8.1f} "
              f"{r.client_cpu:10.0%} {r.server_cpu:11.0%} {r.worker_cpu:10.0%} {per_sub:11.2f}"
              f"  {r.statuses}{batch_note(r)}{pool_warning(r)}")
    ceiling, stored = results
    share = stored.accepted_per_s / ceiling.accepted_per_s if ceiling.accepted_per_s else 0.0
    # On a shared machine the two runs may get different CPU shares; per server CPU-second
    # the comparison does not depend on that.
    per_cpu = [r.accepted_per_s / r.server_cpu if r.server_cpu else 0.0 for r in results]
    cpu_share = per_cpu[1] / per_cpu[0] if per_cpu[0] else 0.0
    print(f"\nstored / ceiling: {share:.0%} of accepted/s; {cpu_share:.0%} per server "
          f"CPU-second ({per_cpu[1]:,.0f} vs {per_cpu[0]:,.0f} accepted per CPU-second)")
    met = stored.accepted_per_s >= 1000 and stored.p99_ms <= 300 and share >= 0.5
    print(f"target (>= 1,000/s, p99 <= 300 ms, >= 50% of ceiling): {'met' if met else 'NOT met'}"
          f" at {connections} connections")
    print(f"server CPU per stored submission: {per_submission_ms(stored):.2f} ms, "
          f"{per_submission_ms(stored) - per_submission_ms(ceiling):+.2f} ms over the ceiling "
          f"(target <= 1.2 ms at 192 connections, hardnumbers-m2)")
    if args.json:
        print(json.dumps([{**r.__dict__, "connections": connections} for r in results]))


if __name__ == "__main__":
    main()
