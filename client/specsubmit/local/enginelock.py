"""One run per engine: a lock file in the state folder, keyed by the engine's address.

Two `specsubmit run` against one Ollama would each read the other's acceptance lines from
the shared server log (and share its cores), so both results would carry wrong counters.
The second run is refused with one line before it sends anything. Two llama-server runs on
one machine start their own servers, but they share the cores and each one's timings hold
the other's load, so they take the one lock for "llama-server on this machine".

The lock is an advisory OS lock (``flock`` on POSIX, ``msvcrt.locking`` on Windows) on
``locks/<sha256 of the address>.lock``: it goes away with the process however the process
ends (Ctrl-C, a crash, SIGKILL), so a stale file never blocks a later run. The file holds
the holder's pid and start time, only to say who holds it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from specsubmit.errors import EngineBusy
from specsubmit.local.paths import state_home

LOCK_FOLDER = "locks"


def lock_path(address: str, home: Path | None = None) -> Path:
    digest = hashlib.sha256(address.encode("utf-8")).hexdigest()[:24]
    return (home or state_home()) / LOCK_FOLDER / f"{digest}.lock"


def _try_lock(handle: IO[bytes]) -> bool:
    if sys.platform == "win32":  # pragma: no cover - Windows only
        import msvcrt

        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def engine_lock(address: str, label: str, home: Path | None = None) -> Iterator[Path]:
    """Hold the lock of the engine at ``address`` for the block; ``EngineBusy`` (one line,
    naming ``label`` and the holder) when another run holds it."""
    path = lock_path(address, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+b")
    try:
        if not _try_lock(handle):
            handle.seek(0)
            holder = handle.read(200).decode("utf-8", "replace").strip() or "another process"
            raise EngineBusy(
                f"another specsubmit run is using {label} ({holder}): wait until it has "
                "finished; two runs at once would read each other's counters and load")
        handle.seek(0)
        handle.truncate()
        started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        handle.write(f"pid {os.getpid()}, since {started}".encode())
        handle.flush()
        yield path
    finally:
        handle.close()  # closing the file releases the lock


__all__ = ["engine_lock", "lock_path"]
