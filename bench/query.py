"""Read-side benchmark: leaderboard latency and full re-aggregation at 10k and 100k submissions.

Generates submissions (15 trials each, 3 configs: a baseline and two drafts) straight into
a DuckDB store with bulk SQL, the way ingestion would have stored them (same tables, one
summary row per config), then measures against a real server process:

- ``GET /v1/leaderboard`` p50/p99 warm (after one cold request), sequential requests;
- the same for a filtered leaderboard and the HTML page;
- a cold full re-aggregation in process (empty cache: read every visible draft result and
  apply the aggregation rules), split into the per-contributor step (the store's rows and
  their reduction) and the rules across contributors;
- both at each size, to show the growth.

    .venv/bin/python bench/query.py                       # 10k then 100k
    .venv/bin/python bench/query.py --sizes 10000 --requests 200
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import httpx
from sqlalchemy import create_engine

from specschema.protocol_files import get_protocol
from specserver.board import aggregate, columns
from specserver.board import sql as board_sql
from specserver.board.leaderboard import ReadService
from specserver.store import queries, tables
from specserver.store.backend import DUCKDB
from specserver.store.migrations import migrate

CHIPS = [
    "Apple M1", "Apple M1 Pro", "Apple M1 Max", "Apple M2", "Apple M2 Pro", "Apple M2 Max",
    "Apple M3", "Apple M3 Pro", "Apple M3 Max", "Apple M4", "Apple M4 Pro", "Apple M4 Max",
    "NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 4060", "NVIDIA GeForce RTX 4070", "NVIDIA GeForce RTX 4080",
    "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090", "AMD Radeon RX 7900 XTX",
    "AMD Radeon RX 7800 XT", "Intel Arc A770", "AMD Ryzen 9 7950X",
]
MEMORY = [8, 16, 24, 32, 36, 48, 64, 96, 128]
VERSIONS = ["0.30.0", "0.30.1", "0.31.0", "0.32.0", "0.32.6", "0.33.1"]
CONTRIBUTOR_RATIO = 5  # about five submissions per key on average (keys grow with size)


def generate(path: Path, start: int, stop: int) -> None:
    """Submissions [start, stop) with their fingerprints, configs, trials and summaries."""
    draft = get_protocol("ollama-draft")
    hard = get_protocol("hardnumbers-m2")
    chips = "[" + ", ".join(f"'{c}'" for c in CHIPS) + "]"
    memory = "[" + ", ".join(str(m) for m in MEMORY) + "]"
    versions = "[" + ", ".join(f"'{v}'" for v in VERSIONS) + "]"
    contributors = max(1, stop // CONTRIBUTOR_RATIO)
    con = duckdb.connect(str(path))
    con.execute("SELECT setseed(0.42)")
    # A contributor key is one machine (chip, memory) that upgrades Ollama now and then.
    con.execute(f"""
        CREATE TEMP TABLE gen AS
        SELECT i, k,
               printf('%08x-0000-4000-8000-%012x', i, i) AS sid,
               sha256('key-' || k::VARCHAR) AS key_id,
               i % 10 < 7 AS mtp,
               ({chips})[1 + (hash(k * 31) % {len(CHIPS)})::INTEGER] AS chip,
               ({memory})[1 + (hash(k * 17) % {len(MEMORY)})::INTEGER] AS memory_gb,
               ({versions})[1 + ((hash(k * 13) + i // 25000) % {len(VERSIONS)})::INTEGER]
                   AS version,
               TIMESTAMP '2026-06-01' + to_seconds(i) AS t0,
               15 + 40 * random() AS base_tps
        FROM (SELECT i, hash(i * 7919) % {contributors} AS k FROM range({start}, {stop}) t(i))
    """)
    con.execute("ALTER TABLE gen ADD COLUMN digest BIGINT")
    con.execute(f"UPDATE gen SET digest = {DUCKDB.id_digest_sql('sid')}")
    con.execute(f"""
        INSERT INTO submissions SELECT
            sid, key_id, 'signed', NULL, t0, t0 + INTERVAL 1 SECOND, sha256(sid),
            CASE WHEN mtp THEN 'ollama-draft' ELSE 'hardnumbers-m2' END, 1,
            CASE WHEN mtp THEN '{draft.sha256}' ELSE '{hard.sha256}' END,
            CASE WHEN mtp THEN 'qwen3.5:9b-mtp' ELSE 'qwen3:14b' END, sha256(chip),
            chip, memory_gb, CASE WHEN mtp THEN version ELSE '0.12.8' END,
            CASE WHEN chip LIKE 'Apple%' THEN 'macos' ELSE 'linux' END, '100% GPU',
            'specsubmit', '0.1.0', true, false, NULL, NULL,
            -- wire v2's columns, null as on rows stored before it (engine_name null: Ollama)
            NULL, NULL, NULL, NULL, NULL,
            -- store versions 5-6: each key from its own address range (the most cohorts the
            -- board's Sybil rules must form), the target's quantization
            sha256('range-' || k::VARCHAR), 'Q4_K_M',
            -- store version 12: the id's digest; whether a draft result reached a board
            -- (the not_applied ones of hardnumbers-m2, or confirmed with the log's counters)
            digest, NOT mtp OR hash(i) % 3 <> 0
        FROM gen
    """)
    con.execute("INSERT INTO envelopes SELECT sid, encode('{}') FROM gen")
    con.execute("""
        INSERT INTO fingerprints (submission_id, chip, memory_gb, gpu_count, os_name, json)
        SELECT sid, chip, memory_gb, 1,
               CASE WHEN chip LIKE 'Apple%' THEN 'macos' ELSE 'linux' END, '{}' FROM gen
    """)
    # Three configs per submission: the baseline and two drafts.
    con.execute("""
        CREATE TEMP TABLE cfg AS
        SELECT g.*, c.ci,
               CASE WHEN mtp THEN ['spec_off', 'spec_4', 'spec_8'][c.ci]
                    ELSE ['no_draft', 'draft_qwen2.5_0.5b', 'draft_qwen2.5_1.5b'][c.ci] END
                   AS config_name,
               CASE WHEN c.ci = 1 THEN 'baseline' ELSE 'draft' END AS role,
               CASE WHEN mtp OR c.ci = 1 THEN NULL
                    ELSE ['', 'qwen2.5:0.5b', 'qwen2.5:1.5b'][c.ci] END AS draft_model,
               CASE WHEN mtp THEN 'draft_num_predict'
                    WHEN c.ci = 1 THEN 'none' ELSE 'draft_model_field' END AS mechanism,
               CASE WHEN c.ci = 1 OR NOT mtp THEN 'not_applied'
                    WHEN hash(i) % 3 = 0 THEN 'not_observed' ELSE 'confirmed' END AS observed,
               CASE WHEN c.ci = 1 THEN 1.0
                    WHEN NOT mtp THEN 0.97 + 0.06 * random()
                    ELSE (1.0 + 0.5 * (hash(chip) % 7) / 7.0) * (0.9 + 0.2 * random())
                         - (c.ci - 2) * 0.15 END AS speedup
        FROM gen g, range(1, 4) c(ci)
    """)
    con.execute("""
        INSERT INTO configs SELECT sid, config_name, role,
               CASE WHEN mtp THEN 'qwen3.5:9b-mtp' ELSE 'qwen3:14b' END, draft_model, mechanism,
               '{}', role = 'draft', mtp OR role = 'baseline', observed,
               NULL, NULL, NULL, CASE WHEN role = 'draft' THEN true END, NULL, NULL
        FROM cfg
    """)
    con.execute("""
        INSERT INTO trials SELECT sid, config_name, t.j, (ci - 1) * 5 + t.j,
               200 / (base_tps * speedup) + 0.3, 0.25,
               CAST((200 / (base_tps * speedup) + 0.28) * 1e9 AS BIGINT), 30000000, 58,
               200000000, 200, CAST(200 / (base_tps * speedup * (0.97 + 0.06 * random())) * 1e9
                                    AS BIGINT),
               'length', 812, sha256(sid), false, NULL, NULL, NULL, NULL,
               NULL,  -- store version 8: no block
               NULL, NULL  -- store version 14: no rounds, no per-position counts
        FROM cfg, range(0, 5) t(j)
    """)
    con.execute("""
        INSERT INTO summaries SELECT sid, config_name, role,
               CASE WHEN mtp THEN 'qwen3.5:9b-mtp' ELSE 'qwen3:14b' END, draft_model, mechanism,
               observed, 5, 200 / (base_tps * speedup) + 0.3, 200 / (base_tps * speedup),
               base_tps * speedup, base_tps * speedup * 0.97, base_tps * speedup * 1.03,
               base_tps * speedup * 0.02, 0.02,
               CASE WHEN role = 'draft' THEN speedup END,
               CASE WHEN role = 'draft' THEN speedup * 0.95 END,
               CASE WHEN role = 'draft' THEN speedup * 1.05 END,
               CASE WHEN role = 'draft' THEN speedup END,
               CASE WHEN role = 'draft' THEN true END,
               -- evidence (store version 4): confirmed rows' counters corroborated by the log
               CASE WHEN observed = 'confirmed' THEN 'log' ELSE 'none' END, NULL,
               -- store version 6: the draft model's digest and quantization
               NULL, NULL,
               -- store version 8: no blocks
               NULL, NULL, NULL, NULL,
               -- store version 11: a draft's baseline median tok/s (the baseline's speedup is 1)
               CASE WHEN role = 'draft' THEN base_tps * 1.0 END,
               digest,  -- store version 12
               NULL, NULL, NULL, NULL  -- store version 14: no type, depth or rounds (Ollama)
        FROM cfg
    """)
    con.execute("CHECKPOINT")
    con.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def cold_aggregation(path: Path, repeats: int = 5) -> dict[str, float]:
    """The default leaderboard from an empty cache, as the server computes it: per-contributor
    medians from the store's rows, then the rules across contributors. Medians of
    ``repeats`` runs (this VM's speed moves ~15 % between identical runs), with the range."""
    engine = create_engine(f"duckdb:///{path}")
    dims = aggregate.leaderboard_dimensions(aggregate.DEFAULT_GROUP_BY)
    # the shipped Sybil rules (board/newkeys.py): cohorts and probation are part of the work
    reads = ReadService(engine, probation_days=7.0, cohort_window_hours=24.0,
                        graduations_per_day=2)
    total, cpu, sql, pure = [], [], [], []
    groups = reduced_rows = 0
    for _ in range(repeats):
        reads.clear_cache()
        started, cpu_started = time.perf_counter(), time.process_time()
        board = reads.cold_board(queries.Filters(), dims, "speedup")
        total.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)  # all threads, DuckDB's included
        started = time.perf_counter()
        with engine.connect() as conn:
            reduced = board_sql.contributor_columns(conn, queries.Filters(), dims,
                                                  aggregate.BOARD_VERDICTS)
        sql.append(time.perf_counter() - started)
        started = time.perf_counter()
        codes = columns.Codes()
        by_group = reduced.by_group(codes)
        standing = columns.Standing.empty()
        standing.fit(len(codes))
        for key, rows in by_group.items():  # the rules without cohorts (no standing)
            columns.group_aggregate(aggregate.key_dict(dims, key), rows, standing, 0, 3)
        pure.append(time.perf_counter() - started)
        groups, reduced_rows = len(board.groups), len(reduced.group)
    engine.dispose()
    return {"total_s": statistics.median(total), "cpu_s": statistics.median(cpu),
            "total_min_s": min(total), "total_max_s": max(total),
            "sql_s": statistics.median(sql),
            "aggregate_s": statistics.median(pure), "groups": groups,
            "contributor_rows": reduced_rows, "draft_results": board.results}


def wait_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("server exited")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit("server did not start")


def http_latencies(path: Path, requests: int, port: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "SPECSERVER_DATABASE_URL": str(path)}
    process = subprocess.Popen(
        [sys.executable, "-c", "from specserver.cli import main; main()", "serve", "--port",
         str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    results: dict[str, dict[str, float]] = {}
    try:
        wait_up(url, process)
        with httpx.Client(base_url=url, timeout=60) as client:
            for name, target in (("leaderboard", "/v1/leaderboard"),
                                 ("leaderboard?chip=Apple M2", "/v1/leaderboard?chip=Apple%20M2"),
                                 ("page /", "/")):
                started = time.perf_counter()
                first = client.get(target)
                cold = time.perf_counter() - started
                assert first.status_code == 200, first.text[:200]
                times = []
                for _ in range(requests):
                    started = time.perf_counter()
                    response = client.get(target)
                    times.append(time.perf_counter() - started)
                    assert response.status_code == 200
                etag = first.headers["etag"]
                started = time.perf_counter()
                not_modified = client.get(target, headers={"If-None-Match": etag})
                revalidate = time.perf_counter() - started
                assert not_modified.status_code == 304
                results[name] = {"cold_ms": cold * 1000, "p50_ms": percentile(times, 0.5) * 1000,
                                 "p99_ms": percentile(times, 0.99) * 1000,
                                 "304_ms": revalidate * 1000}
    finally:
        process.terminate()
        process.wait(30)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--keep", help="folder to keep the store in")
    parser.add_argument("--cold-repeats", type=int, default=5,
                        help="cold full computations per size (their median is printed)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="specbench-query-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "store.duckdb"
    path.unlink(missing_ok=True)
    engine = create_engine(f"duckdb:///{path}")
    migrate(engine)
    engine.dispose()
    done = 0
    print(f"store: {path}  (tables: {', '.join(t.name for t in tables.metadata.sorted_tables)})")
    for size in sizes:
        started = time.perf_counter()
        generate(path, done, size)
        print(f"\n== {size:,} submissions (generated {size - done:,} in "
              f"{time.perf_counter() - started:.1f} s, file {path.stat().st_size / 2**20:.0f} MiB)")
        done = size
        with duckdb.connect(str(path), read_only=True) as con:
            trials = con.execute("SELECT count(*) FROM trials").fetchone()
            print(f"trials: {trials[0] if trials else 0:,}")
        cold = cold_aggregation(path, args.cold_repeats)
        print(f"cold full re-aggregation: {cold['total_s'] * 1000:.0f} ms (median of "
              f"{args.cold_repeats}: {cold['total_min_s'] * 1000:.0f}-"
              f"{cold['total_max_s'] * 1000:.0f} ms), CPU "
              f"{cold['cpu_s'] * 1000:.0f} ms (per-contributor "
              f"step {cold['sql_s'] * 1000:.0f} ms + rules {cold['aggregate_s'] * 1000:.0f} ms; "
              f"{cold['draft_results']:,} draft results -> {cold['contributor_rows']:,} "
              f"contributor rows -> {cold['groups']} groups)")
        for name, figures in http_latencies(path, args.requests, args.port).items():
            print(f"GET {name:<28} cold {figures['cold_ms']:7.1f} ms  warm p50 "
                  f"{figures['p50_ms']:6.2f} ms  p99 {figures['p99_ms']:6.2f} ms  304 "
                  f"{figures['304_ms']:5.2f} ms  ({args.requests} sequential requests)")


if __name__ == "__main__":
    main()
