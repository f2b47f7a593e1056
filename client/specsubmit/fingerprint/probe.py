"""The one door through which fingerprinting touches the machine.

Every probe goes through a ``Probe``: run a command (with a short timeout), read a small
text file, list a folder. The live implementation is ``SystemProbe``; tests pass a probe
that answers from recorded outputs. A missing tool, a timeout, a non-UTF-8 answer or an
unreadable file all come back as ``None`` ("not detected"), never as an exception.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

DEFAULT_TIMEOUT_S = 10.0  # system_profiler and a cold PowerShell can take seconds
MAX_FILE_BYTES = 1 << 20


class Probe(Protocol):
    def run(self, argv: Sequence[str]) -> str | None:
        """Stdout of the command (also when it exits non-zero), or None if it could not run."""
        ...

    def read_text(self, path: str) -> str | None:
        """A small text file's content, or None."""
        ...

    def list_dir(self, path: str) -> list[str]:
        """Names in a folder, sorted; empty when it does not exist."""
        ...


@dataclass(frozen=True)
class HostInfo:
    """What Python itself knows: ``platform.system()`` and ``platform.machine()``."""

    system: str
    machine: str

    @classmethod
    def live(cls) -> HostInfo:
        return cls(system=platform.system(), machine=platform.machine())


@dataclass(frozen=True)
class SystemProbe:
    timeout_s: float = DEFAULT_TIMEOUT_S

    def run(self, argv: Sequence[str]) -> str | None:
        env = dict(os.environ, LC_ALL="C", LANG="C")
        try:
            done = subprocess.run(  # noqa: S603 - fixed argv, no shell
                list(argv),
                capture_output=True,
                timeout=self.timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except (OSError, subprocess.SubprocessError, ValueError):
            return None
        try:
            return done.stdout.decode("utf-8")
        except UnicodeDecodeError:
            return done.stdout.decode("utf-8", errors="replace")

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_FILE_BYTES)
        except OSError:
            return None
        return data.decode("utf-8", errors="replace")

    def list_dir(self, path: str) -> list[str]:
        try:
            return sorted(entry.name for entry in Path(path).iterdir())
        except OSError:
            return []
