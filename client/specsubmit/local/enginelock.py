"""One run per engine: a lock file, keyed by the engine's endpoint, for the whole machine.

Two `specsubmit run` against one Ollama would each read the other's acceptance lines from
the shared server log (and share its cores), so both results would carry wrong counters.
The second run is refused with one line before it sends anything. Two llama-server runs on
one machine start their own servers, but they share the cores and each one's timings hold
the other's load, so they take the one lock for "llama-server on this machine".

The lock is an advisory OS lock (``flock`` on POSIX, ``msvcrt.locking`` on Windows) on
``<sha256 of the endpoint>.lock`` in one folder for the machine (the system's temporary
folder's ``specsubmit-locks``, shared by every user and HOME; ``SPECSUBMIT_LOCKS``
overrides it): a run under another HOME, or another user, still meets it. It goes away with
the process however the process ends (Ctrl-C, a crash, SIGKILL), so a stale file never
blocks a later run. The file holds the holder's pid and start time, only to say who holds
it.

The endpoint is the engine's URL with its host resolved (``canonical_address``): every
loopback form (``localhost``, ``127.0.0.1``, ``::1``, ``0.0.0.0``) is one, and a name is
its addresses, so two spellings of one Ollama are one lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from specsubmit.errors import EngineBusy

LOCKS_ENV = "SPECSUBMIT_LOCKS"
Resolver = Callable[[str], list[str]]


def _addresses(host: str) -> list[str]:
    found: list[tuple[Any, ...]] = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in found})


def canonical_address(address: str, resolve: Resolver = _addresses) -> str:
    """``address`` ("<engine> <URL>" or an engine's name alone) with the URL's host as the
    addresses it resolves to, every loopback form as "loopback" (a name that does not
    resolve stays as it is written)."""
    name, _, url = address.partition(" ")
    if not url:
        return address
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        found = [host] if _is_ip(host) else resolve(host)
    except OSError:
        found = [host]
    ips = sorted({"loopback" if _loopback(ip) else ip for ip in found}) or [host]
    where = ",".join(ips)
    return f"{name} {parts.scheme}://{where}:{parts.port or ''}{parts.path.rstrip('/')}"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _loopback(ip: str) -> bool:
    try:
        parsed = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    return parsed.is_loopback or parsed.is_unspecified  # 0.0.0.0 is reached on loopback


def lock_folder() -> Path:
    configured = os.environ.get(LOCKS_ENV)
    folder = Path(configured) if configured else Path(tempfile.gettempdir()) / "specsubmit-locks"
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        if not configured:  # shared by every user: writable by all, files kept by their owner
            with contextlib.suppress(OSError):
                folder.chmod(0o1777)
    return folder


def lock_path(address: str, folder: Path | None = None) -> Path:
    digest = hashlib.sha256(canonical_address(address).encode("utf-8")).hexdigest()[:24]
    return (folder or lock_folder()) / f"{digest}.lock"


def _open(path: Path) -> IO[bytes]:
    """The lock file for writing the holder's name; read-only when another user made it
    (a lock can be taken on a file opened for reading)."""
    try:
        handle = path.open("a+b")
    except PermissionError:
        return path.open("rb")
    with contextlib.suppress(OSError):
        path.chmod(0o666)
    return handle


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
def engine_lock(address: str, label: str, folder: Path | None = None) -> Iterator[Path]:
    """Hold the lock of the engine at ``address`` for the block; ``EngineBusy`` (one line,
    naming ``label`` and the holder) when another run holds it."""
    path = lock_path(address, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = _open(path)
    try:
        if not _try_lock(handle):
            handle.seek(0)
            holder = handle.read(200).decode("utf-8", "replace").strip() or "another process"
            raise EngineBusy(
                f"another specsubmit run is using {label} ({holder}): wait until it has "
                "finished; two runs at once would read each other's counters and load")
        if handle.writable():
            handle.seek(0)
            handle.truncate()
            started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            handle.write(f"pid {os.getpid()}, since {started}".encode())
            handle.flush()
        yield path
    finally:
        handle.close()  # closing the file releases the lock


__all__ = ["canonical_address", "engine_lock", "lock_folder", "lock_path"]
