"""Finding and checking the Ollama server log before the first trial."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specsubmit.engines.ollama import logsource
from specsubmit.engines.ollama.logsource import LogSource
from specsubmit.engines.ollama.serverlog import Segment, read_requests


def _runner(stdout: bytes, code: int = 0):  # type: ignore[no-untyped-def]
    calls: list[list[str]] = []

    def run(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
        calls.append(list(argv))
        return subprocess.CompletedProcess(list(argv), code, stdout, b"")
    return run, calls


def test_option_is_a_path_or_a_command(tmp_path: Path) -> None:
    log = tmp_path / "my server.log"
    log.write_text("x")
    assert logsource.parse_option(str(log)) == LogSource(path=log)  # a file, spaces or not
    assert logsource.parse_option("~/ollama.log").path == Path("~/ollama.log").expanduser()
    docker = logsource.parse_option("docker logs -t ollama")
    assert docker.command == ("docker", "logs", "-t", "ollama")
    journal = logsource.parse_option("journalctl -u ollama")
    assert journal.command is not None and journal.command[:3] == ("journalctl", "-u", "ollama")
    assert "short-iso-precise" in journal.command  # one timestamp per line to attribute by


def test_default_places_per_os(tmp_path: Path) -> None:
    mac_log = tmp_path / ".ollama" / "logs" / "server.log"
    run, _ = _runner(b"")
    assert logsource.default_source(platform="darwin", home=tmp_path, run=run) is None
    mac_log.parent.mkdir(parents=True)
    mac_log.write_text("")
    assert logsource.default_source(platform="darwin", home=tmp_path, run=run) == LogSource(
        path=mac_log, origin="default")
    win_log = tmp_path / "Local" / "Ollama" / "server.log"
    win_log.parent.mkdir(parents=True)
    win_log.write_text("")
    found = logsource.default_source(platform="win32", env={"LOCALAPPDATA": str(
        tmp_path / "Local")}, home=tmp_path / "nowhere", run=run)
    assert found is not None and found.path == win_log


def test_linux_uses_the_journal_only_when_readable(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logsource.shutil, "which", lambda name: f"/usr/bin/{name}")
    readable, calls = _runner(b"Dec 01 ollama[1]: a line\n")
    found = logsource.default_source(platform="linux", home=tmp_path, run=readable,
                                     now=datetime(2026, 12, 1, 22, 0))
    assert found is not None and found.command is not None
    assert found.command[:3] == ("journalctl", "-u", "ollama")
    assert found.command[-2:] == ("--since", "2026-12-01 21:59:00")
    assert calls[0][:3] == ["journalctl", "-u", "ollama"]
    denied, _ = _runner(b"", code=1)  # not in the systemd-journal group
    assert logsource.default_source(platform="linux", home=tmp_path, run=denied) is None


def test_the_preflight_says_what_is_missing_and_the_fix(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    none = logsource.check(None, platform="linux")
    assert none is not None and "no Ollama server log found" in none
    assert "--ollama-log 'journalctl -u ollama'" in none and "\n" not in none
    mac = logsource.check(LogSource(path=tmp_path / "gone.log"), platform="darwin")
    assert mac is not None and "does not exist" in mac and "~/.ollama/logs/server.log" in mac
    present = tmp_path / "server.log"
    present.write_text("")
    assert logsource.check(LogSource(path=present)) is None
    monkeypatch.setattr(logsource.shutil, "which", lambda name: None)
    missing = logsource.check(LogSource(command=("docker", "logs", "ollama")), platform="linux")
    assert missing is not None and "'docker' is not installed" in missing
    monkeypatch.setattr(logsource.shutil, "which", lambda name: "/usr/bin/journalctl")
    failing, _ = _runner(b"", code=1)
    denied = logsource.check(LogSource(command=logsource.journal_command()), run=failing)
    assert denied is not None and "failed" in denied


def test_a_command_log_is_attributed_by_its_timestamps() -> None:
    # journalctl -o short-iso-precise lines; llama-server's own line inherits the prefix.
    t0 = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)
    text = (
        "2026-12-01T21:00:01.000000+0000 host ollama[7]: time=2026-12-01T21:00:01.000Z "
        'level=INFO source=llama_server.go:433 msg="starting llama-server" '
        'cmd="/usr/lib/ollama/llama-server --spec-type draft-mtp --spec-draft-n-max 4"\n'
        "2026-12-01T21:00:02.500000+0000 host ollama[7]: slot print_timing: id  0 | task 3 | "
        "draft acceptance = 0.82090 (  110 accepted /   134 generated), mean len =  7.47\n"
        "2026-12-01T21:00:12.000000+0000 host ollama[7]: slot print_timing: id  0 | task 4 | "
        "draft acceptance = 0.50000 (   10 accepted /    20 generated), mean len =  2.00\n")
    segments = [Segment("a", True, None, t0), Segment("b", True, None, t0 + timedelta(seconds=10))]
    first, second = read_requests(text.encode(), segments) or []
    assert first.launches[0].spec_type == "draft-mtp"
    counted = first.trial_counters()
    assert counted is not None and (counted.drafted, counted.accepted) == (134, 110)
    assert counted.mean_accepted_len == 7.47
    later = second.trial_counters()
    assert later is not None and later.drafted == 20 and not second.launches
