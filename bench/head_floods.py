"""One address against everybody's connections: unfinished heads and endless headers.

    .venv/bin/python bench/head_floods.py [--heads 2000] [--caps 300,2000] [--seconds 30]
                                          [--flooders 8] [--flood-seconds 20]
                                          [--nginx deploy|image-default]

Against a real `specserver serve` (embedded DuckDB on a fresh store, default settings but
for ``SPECSERVER_MAX_CONNECTIONS``), the two attacks of the review, at its scale
(tests/reliability/headfloods.py does the attacking):

1. for each cap in ``--caps``: an attacker process on 127.0.0.1 keeps ``--heads``
   unfinished request heads open for ``--seconds`` and replaces each the server closes
   at once; from 2 s in, ``GET /healthz`` from 127.0.0.2 on a new connection every
   0.25 s (3 s timeout). Prints the share answered 200 (target >= 95 %), their p50/p99,
   and how many connections the server held meanwhile. The review: 0 of 28 answered at
   cap 300, 1 of 27 at 2,000.
2. ``--flooders`` connections on 127.0.0.1 send header lines without end for
   ``--flood-seconds``, reconnecting when closed; the server's resident memory before,
   at its peak (sampled every 0.2 s) and 3 s after. Target: within 100 MiB of where it
   started. The review: 236 -> 1,116 MiB, 503 MiB after.

``--only overhead``: the server's CPU per ``GET /healthz`` on 16 kept-alive connections for
``--seconds``, what the protocol's checks cost every request (alternate it with the code
before on ``PYTHONPATH``).

``--nginx deploy``: the same against nginx (installed here, e.g. Debian's ``nginx-light``)
with ``deploy/nginx.conf`` in front of the server and ``deploy/nginx-main.conf``'s
connections per worker, as the compose file's replicas profile runs it (the server
trusting the proxy's address, so not counting it per address); ``--nginx image-default``:
with the official image's 1,024 connections per worker instead. Descriptors and memory
are then the server's and nginx's together.

Timings depend on the machine and its load: the load average is printed with each run;
record both in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import re
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.headfloods import (  # noqa: E402
    Sampler,
    endless_headers,
    hold_heads,
    open_fds,
    probe_for,
    probe_healthz,
    raise_own_fd_limit,
    resident_mib,
)
from tests.reliability.servers import ServerProcess  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
PROBE_START_S = 2.0


def _load() -> str:
    return ", ".join(f"{v:.1f}" for v in os.getloadavg())


def _attacker(port: int, count: int, seconds: float, out: Connection) -> None:
    raise_own_fd_limit(count + 256)
    out.send(hold_heads(port, count, seconds))


NGINX_MAIN = """worker_processes auto;
worker_rlimit_nofile {nofile};
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    include {folder}/site.conf;
}}
"""


def nginx_main(folder: Path, image_default: bool) -> str:
    """The main configuration nginx runs with here: deploy/nginx-main.conf's connection
    settings (or the official image's default, 1,024 per worker), with this run's paths."""
    main = (ROOT / "deploy" / "nginx-main.conf").read_text()
    connections = re.search(r"worker_connections (\d+);", main)
    nofile = re.search(r"worker_rlimit_nofile (\d+);", main)
    assert connections is not None and nofile is not None
    return NGINX_MAIN.format(folder=folder, nofile=nofile.group(1),
                             connections="1024" if image_default else connections.group(1))


@dataclass
class Edge:
    """What the attacker and the probes connect to: the server itself, or nginx with
    deploy/nginx.conf in front of it (as in the compose file's replicas profile, with the
    official image's main settings: a worker per core, 1,024 connections each)."""

    port: int
    pids: list[int]  # whose descriptors and memory are measured

    def fds(self) -> int:
        return sum(open_fds(pid) for pid in self.pids)

    def rss(self) -> float:
        return sum(resident_mib(pid) for pid in self.pids)


@contextlib.contextmanager
def edge(nginx: str, **env: str) -> Iterator[Edge]:
    with tempfile.TemporaryDirectory(prefix="head-floods-") as name:
        folder = Path(name)
        if nginx:  # the replicas see only the proxy, which they trust
            env["SPECSERVER_TRUSTED_PROXIES"] = '["127.0.0.1/32"]'
        server = ServerProcess(str(folder / "store.duckdb"), folder,
                               env={"SPECSERVER_CHECK_WORKERS": "1", **env})
        proxy: subprocess.Popen[bytes] | None = None
        try:
            server.start()
            assert server.proc is not None
            if not nginx:
                yield Edge(server.port, [server.proc.pid])
                return
            port = free_port()
            site = (ROOT / "deploy" / "nginx.conf").read_text()
            site = site.replace("server server:8000;", f"server 127.0.0.1:{server.port};")
            site = site.replace("listen 80;", f"listen 127.0.0.1:{port};")
            (folder / "site.conf").write_text(site)
            (folder / "nginx.conf").write_text(nginx_main(folder, nginx == "image-default"))
            proxy = subprocess.Popen([NGINX, "-c", str(folder / "nginx.conf"), "-p",
                                      str(folder), "-g", "daemon off;"])
            deadline = time.monotonic() + 10
            while probe_healthz(port, timeout_s=1) is None:
                if time.monotonic() > deadline or proxy.poll() is not None:
                    raise RuntimeError((folder / "error.log").read_text())
                time.sleep(0.1)
            workers = [int(p) for p in Path(f"/proc/{proxy.pid}/task/{proxy.pid}/children")
                       .read_text().split()]
            yield Edge(port, [server.proc.pid, proxy.pid, *workers])
        finally:
            if proxy is not None:
                proxy.terminate()
                proxy.wait(10)
            server.stop()


def heads(nginx: str, cap: int, count: int, seconds: float) -> None:
    with edge(nginx, SPECSERVER_MAX_CONNECTIONS=str(cap)) as target:
        receive, send = multiprocessing.Pipe(duplex=False)
        attacker = multiprocessing.Process(target=_attacker,
                                           args=(target.port, count, seconds, send))
        try:
            load_before = _load()
            fds_before = target.fds()
            with Sampler(target.fds, 0.1) as fds:
                attacker.start()
                time.sleep(PROBE_START_S)
                probes = probe_for(target.port, seconds - PROBE_START_S - 1, 0.25)
            result = receive.recv()
            attacker.join(30)
        finally:
            if attacker.is_alive():
                attacker.kill()
    answered = sorted(p * 1000 for p in probes if p is not None)
    share = len(answered) / len(probes) if probes else 0.0
    p99 = answered[min(len(answered) - 1, int(len(answered) * 0.99))] if answered else 0.0
    # What the edge held (its descriptors beyond those before the attack), from the
    # probes' start: a connection refused at once still has its descriptor for a moment.
    held = [n - fds_before for n in fds.samples[int(PROBE_START_S * 10):]] or [0]
    where = f"nginx ({nginx}) in front, " if nginx else ""
    print(f"{where}cap {cap:,}, {count:,} unfinished heads from 127.0.0.1 for {seconds:g} s: "
          f"/healthz from 127.0.0.2 answered {len(answered)} of {len(probes)} "
          f"({share:.0%}; target >= 95 %), p50 "
          f"{statistics.median(answered) if answered else 0:.1f} ms, p99 {p99:.1f} ms; "
          f"held {statistics.median(held):,.0f} connections (median; max "
          f"{max(held):,}) from {PROBE_START_S:g} s on; the attacker opened "
          f"{result.opened:,}, {result.closed:,} closed by the server "
          f"{dict(sorted(result.answers.items()))}, {result.refused:,} connects failed; "
          f"load average before {load_before}, after {_load()}", flush=True)


def flood(nginx: str, connections: int, seconds: float) -> None:
    with edge(nginx) as target:
        load_before = _load()
        probe_for(target.port, 1.0, 0.05)  # warm: the first requests allocate
        before = target.rss()
        with Sampler(target.rss, 0.2) as rss:
            result = endless_headers(target.port, connections, seconds)
        time.sleep(3)
        after = target.rss()
        healthy = probe_for(target.port, 0.5, 0.1)
    peak = max(rss.samples, default=before)
    where = f"nginx ({nginx}) in front: " if nginx else ""
    print(f"{where}{connections} connections sending endless header lines for {seconds:g} s: "
          f"{result.bytes_sent / 2**20:,.0f} MiB handed to the kernel over "
          f"{result.connections:,} connections {dict(sorted(result.answers.items()))}; RSS "
          f"{before:.0f} -> peak {peak:.0f} -> {after:.0f} MiB 3 s after (peak - start "
          f"{peak - before:+.0f} MiB; target within 100 MiB); /healthz after: "
          f"{sum(p is not None for p in healthy)} of {len(healthy)}; load average before "
          f"{load_before}, after {_load()}", flush=True)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hammer(port: int, connections: int, seconds: float, out: Connection) -> None:
    """``GET /healthz`` over ``connections`` kept-alive connections, one request at a time
    on each, for ``seconds``; sends how many were answered."""
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: bench\r\n\r\n"
    selector = selectors.DefaultSelector()
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        sock.send(request)
        selector.register(sock, selectors.EVENT_READ, data=[b""])
    answered = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for key, _ in selector.select(timeout=0.1):
            sock, buffer = key.fileobj, key.data
            assert isinstance(sock, socket.socket)
            buffer[0] += sock.recv(65536)
            head, found, body = buffer[0].partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if found and len(body) >= length:
                answered += 1
                buffer[0] = body[length:]
                sock.send(request)
    out.send(answered)


def overhead(connections: int, seconds: float) -> None:
    """Server CPU per kept-alive ``GET /healthz``: what the protocol's checks add to every
    request (run it alternated with the code before on PYTHONPATH)."""
    with edge("") as target:
        pid = target.pids[0]
        receive, send = multiprocessing.Pipe(duplex=False)
        client = multiprocessing.Process(target=_hammer,
                                         args=(target.port, connections, seconds, send))
        load_before = _load()
        cpu_before = _cpu_s(pid)
        client.start()
        answered = receive.recv()
        client.join(10)
        cpu = _cpu_s(pid) - cpu_before
    print(f"{answered:,} GET /healthz over {connections} kept-alive connections in "
          f"{seconds:g} s: server CPU {cpu:.2f} s, {cpu / max(answered, 1) * 1e6:.0f} us per "
          f"request; load average before {load_before}, after {_load()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", type=int, default=2000)
    parser.add_argument("--caps", default="300,2000",
                        help="SPECSERVER_MAX_CONNECTIONS of each run, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--flooders", type=int, default=8)
    parser.add_argument("--flood-seconds", type=float, default=20.0)
    parser.add_argument("--only", choices=["heads", "flood", "overhead"], default=None,
                        help="one part only; overhead (server CPU per kept-alive request) "
                             "runs only when asked")
    parser.add_argument("--nginx", choices=["deploy", "image-default"], default="",
                        help="attack nginx in front of the server: deploy/nginx.conf with "
                             "deploy/nginx-main.conf's connections, or the image's default")
    args = parser.parse_args()
    raise_own_fd_limit(args.heads + 512)
    if args.only == "overhead":
        overhead(16, args.seconds)
        return
    if args.only != "flood":
        for cap in (int(c) for c in args.caps.split(",")):
            heads(args.nginx, cap, args.heads, args.seconds)
    if args.only != "heads":
        flood(args.nginx, args.flooders, args.flood_seconds)


if __name__ == "__main__":
    main()
