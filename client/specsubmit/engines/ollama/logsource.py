"""Where the Ollama server log is, and reading it: a file, or a command's output.

``--ollama-log`` takes either. A value naming an existing file, or without a space, is a
path; otherwise it is a command (``journalctl -u ollama``, ``docker logs -t ollama``),
split like a shell would and run without one. Without the option the default place of the
OS is used when it is there (ollama-api.md "Read first"; Ollama's docs/troubleshooting):

- macOS: ``~/.ollama/logs/server.log``;
- Windows: ``%LOCALAPPDATA%\\Ollama\\server.log``;
- Linux under systemd: ``journalctl -u ollama`` when this user can read it.

``check`` is the pre-flight: it says in one line what is missing and the command that fixes
it, before the first trial. A file is read by byte offsets (exact attribution); a command's
output is read once after the trials and attributed by its timestamps (``serverlog``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

Runner = Callable[[Sequence[str], float], "subprocess.CompletedProcess[bytes]"]

COMMAND_TIMEOUT_S = 30.0
JOURNAL = ("journalctl", "-u", "ollama")


def _run(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(argv), capture_output=True, timeout=timeout, check=False)


@dataclass(frozen=True)
class LogSource:
    """A log file (``path``) or a command whose stdout is the log (``command``)."""

    path: Path | None = None
    command: tuple[str, ...] | None = None
    origin: str = "given"  # "given" (--ollama-log) or "default"

    def describe(self) -> str:
        if self.command is not None:
            return f"`{shlex.join(self.command)}`"
        return str(self.path)

    def read(self, run: Runner = _run) -> bytes | None:
        """The whole log now; None when it cannot be read."""
        if self.path is not None:
            try:
                return self.path.read_bytes()
            except OSError:
                return None
        assert self.command is not None
        try:
            done = run(self.command, COMMAND_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None


def journal_command(since: datetime | None = None) -> tuple[str, ...]:
    """journald's Ollama unit with one precise timestamp per line (serverlog reads it)."""
    argv = [*JOURNAL, "--no-pager", "-o", "short-iso-precise"]
    if since is not None:
        argv += ["--since", since.strftime("%Y-%m-%d %H:%M:%S")]
    return tuple(argv)


def parse_option(value: str) -> LogSource:
    """``--ollama-log``: a path or a command."""
    text = value.strip()
    path = Path(text).expanduser()
    if path.is_file() or not any(c.isspace() for c in text):
        return LogSource(path=path)
    try:
        argv = tuple(shlex.split(text, posix=os.name != "nt"))
    except ValueError:
        return LogSource(path=path)
    if argv and argv[0] == "journalctl" and "-o" not in argv and "--output" not in argv:
        argv = (*argv, "-o", "short-iso-precise", "--no-pager")  # timestamps on every line
    return LogSource(command=argv)


def default_source(*, platform: str = sys.platform, env: dict[str, str] | None = None,
                   home: Path | None = None, run: Runner = _run,
                   now: datetime | None = None) -> LogSource | None:
    """The OS's default log when it exists and can be read, else None."""
    env = dict(os.environ) if env is None else env
    home = home or Path.home()
    if platform.startswith("win"):
        local = env.get("LOCALAPPDATA")
        candidate = Path(local) / "Ollama" / "server.log" if local else None
    else:
        candidate = home / ".ollama" / "logs" / "server.log"
    if candidate is not None and candidate.is_file():
        return LogSource(path=candidate, origin="default")
    if platform.startswith("linux") and journal_readable(run):
        since = (now or datetime.now()) - timedelta(minutes=1)
        return LogSource(command=journal_command(since), origin="default")
    return None


def journal_readable(run: Runner = _run) -> bool:
    """Whether ``journalctl -u ollama`` shows this user any line of the unit."""
    if shutil.which("journalctl") is None:
        return False
    try:
        done = run([*JOURNAL, "-n", "1", "--no-pager", "-q"], 10.0)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def fix_hint(platform: str = sys.platform) -> str:
    """The command that gives a run its log, for this OS."""
    if platform == "darwin":
        return "pass --ollama-log ~/.ollama/logs/server.log (the Ollama app writes it)"
    if platform.startswith("win"):
        return "pass --ollama-log \"%LOCALAPPDATA%\\Ollama\\server.log\""
    return ("pass --ollama-log 'journalctl -u ollama' (add yourself to the systemd-journal "
            "group if it is not readable: sudo usermod -aG systemd-journal $USER), or "
            "--ollama-log 'docker logs -t ollama' for a container")


def check(source: LogSource | None, *, platform: str = sys.platform,
          run: Runner = _run) -> str | None:
    """None when the log is there and readable; else one line: what is missing, and the fix."""
    if source is None:
        return ("no Ollama server log found, so speculation counters cannot be read and no "
                f"draft can be confirmed: {fix_hint(platform)}")
    if source.path is not None:
        if not source.path.is_file():
            return f"the Ollama server log {source.path} does not exist: {fix_hint(platform)}"
        try:
            with source.path.open("rb"):
                pass
        except OSError:
            return (f"the Ollama server log {source.path} is not readable by this user: "
                    f"{fix_hint(platform)}")
        return None
    assert source.command is not None
    if shutil.which(source.command[0]) is None:
        return f"--ollama-log command {source.command[0]!r} is not installed: {fix_hint(platform)}"
    if source.read(run) is None:
        return (f"the log command {source.describe()} failed (not readable by this user?): "
                f"{fix_hint(platform)}")
    return None
