"""How many threads llama-server gets when ``--llama-threads`` is not given.

llama.cpp's own default is the physical core count. On a machine whose cores are busy
with other work that collapses: every decode step waits for its slowest thread, and a
thread that loses its core waits a whole scheduler slice. On the shared 2-core machine of
the measurements (BENCHMARKS.md, "llama-server threads") the default gave 2.5 tok/s where
one thread gave 26.5. So the default is the physical cores less those already busy (the
1-minute load average, taken before our server starts), at least one:

    threads = max(1, min(physical cores, logical CPUs - round(load average)))

A quiet machine gets llama.cpp's own choice; a loaded one gets what is left. The count the
run used is recorded in each launch of the result (``Launch.threads``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def physical_cores() -> int:
    """Physical cores (Linux: distinct (package, core) pairs in /proc/cpuinfo; macOS:
    hw.physicalcpu); the logical count where neither can be read."""
    logical = os.cpu_count() or 1
    if sys.platform.startswith("linux"):
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return logical
        pairs = set()
        package = core = ""
        for line in text.splitlines() + [""]:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "physical id":
                package = value.strip()
            elif key == "core id":
                core = value.strip()
            elif not line.strip() and core:
                pairs.add((package, core))
                package = core = ""
        return max(1, min(len(pairs), logical)) if pairs else logical
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "hw.physicalcpu"], capture_output=True,
                                 text=True, timeout=5, check=False).stdout.strip()
            return max(1, int(out))
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return logical
    return logical


def load_average() -> float:
    """The 1-minute load average (0 where the OS has none, e.g. Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def default_threads(*, physical: int | None = None, logical: int | None = None,
                    load: float | None = None) -> int:
    """The module docstring's rule (the keywords are for tests)."""
    physical = physical_cores() if physical is None else physical
    logical = (os.cpu_count() or 1) if logical is None else logical
    load = load_average() if load is None else load
    return max(1, min(physical, logical - round(load)))


__all__ = ["default_threads", "load_average", "physical_cores"]
