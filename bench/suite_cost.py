"""What the default test tier costs, folder by folder: CPU and wall per pytest run.

    .venv/bin/python bench/suite_cost.py [--tier default|full] [folder ...]

Runs pytest once per folder (the default tier's marker expression, as scripts/dev.py runs
it) and prints, for each run, its last line (the test counts), its CPU seconds (user +
system, pytest's process and every child process it waited for: servers, the CLI run as a
subprocess, check workers) and its wall seconds, and the 1-minute load average before and
after. Sums at the end. CPU is the figure to compare between runs on a shared machine:
the wall time of the same work grows with the load, its CPU time much less. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# scripts/dev.py names the tier's marker expression and the variable (not a package).
_spec = importlib.util.spec_from_file_location("specatlas_dev", ROOT / "scripts" / "dev.py")
assert _spec is not None and _spec.loader is not None
_dev = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_dev)
FAST_TIER: str = _dev.FAST_TIER
TIER_VARIABLE: str = _dev.TIER_VARIABLE

FOLDERS = [
    "tests/schema", "tests/client", "tests/server/board", "tests/server/store",
    "tests/server/ingest", "tests/server/http", "tests/server/cli",
    "tests/server/audit tests/server/ratelimit tests/server/snapshots "
    "tests/server/test_compose.py tests/server/test_settings.py",
    "tests/reliability",
    "tests/architecture tests/e2e tests/realengine tests/test_readme_commands.py "
    "tests/test_tiers.py tests/test_postgres_fixture.py",
]


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(folder: str, tier: str) -> tuple[str, float, float, float, float]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               *([] if tier == "full" else ["-m", FAST_TIER]), *folder.split()]
    load_before = os.getloadavg()[0]
    cpu, began = children_cpu(), time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, TIER_VARIABLE: tier})
    wall, cpu = time.monotonic() - began, children_cpu() - cpu
    lines = done.stdout.strip().splitlines()
    return (lines[-1].strip("= ") if lines else f"exit {done.returncode}", cpu, wall,
            load_before, os.getloadavg()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tier", choices=("default", "full"), default="default")
    parser.add_argument("folders", nargs="*", default=FOLDERS)
    args = parser.parse_args()
    total_cpu = total_wall = 0.0
    print(f"| folder | tests | CPU s | wall s | load before-after |  (tier: {args.tier})")
    for folder in args.folders:
        counts, cpu, wall, before, after = run(folder, args.tier)
        total_cpu, total_wall = total_cpu + cpu, total_wall + wall
        print(f"| {folder} | {counts} | {cpu:.1f} | {wall:.0f} | {before:.1f}-{after:.1f} |",
              flush=True)
    print(f"| total | | {total_cpu:.1f} | {total_wall:.0f} | |")


if __name__ == "__main__":
    main()
