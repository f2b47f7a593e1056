"""Edges of `specsubmit run` a contributor meets first: a run that could not confirm any
draft is stopped before it spends minutes (unless `--no-log` says that is accepted), and a
slow engine is never silent for long on a console that rich cannot redraw."""

from __future__ import annotations

import io
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from specschema.payload import parse_submission
from specsubmit.cli.listener import ConsoleListener, Heartbeat
from tests.client.cli.test_run_cli import MTP, SCRIPT, _env, _saved, specsubmit
from tests.fakeollama import FakeModel, FakeOllama, default_models


def test_a_run_that_could_speculate_without_a_readable_log_stops_before_any_request(
        tmp_path: Path, specsubmit_home: Path) -> None:
    gone = tmp_path / "no-such.log"
    with FakeOllama(version="0.33.1", models=[FakeModel(MTP, mtp=True)]) as fake:
        refused = specsubmit(tmp_path, "run", "--protocol", "ollama-draft", "--target", MTP,
                             "--ollama", fake.url, "--ollama-log", str(gone), "--no-submit")
        generated = [r for r in fake.requests if r[1] == "/api/generate"]
    assert refused.returncode == 1, refused.stderr
    errors = [line for line in refused.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, refused.stderr
    assert f"the Ollama server log {gone} does not exist" in errors[0]
    assert "--no-log" in errors[0]
    assert not generated
    assert _saved(specsubmit_home) == []


def test_no_log_runs_it_and_its_drafts_stay_unconfirmed(tmp_path: Path) -> None:
    gone = tmp_path / "no-such.log"
    with FakeOllama(version="0.33.1", models=[FakeModel(MTP, mtp=True)]) as fake:
        ran = specsubmit(tmp_path, "run", "--protocol", "ollama-draft", "--target", MTP,
                         "--ollama", fake.url, "--ollama-log", str(gone), "--no-log",
                         "--no-submit", "--json")
    assert ran.returncode == 0, ran.stderr
    assert "--no-log: no draft can be confirmed" in " ".join(ran.stderr.split())
    sub = parse_submission(ran.stdout.encode())
    assert sub.engine_log == "unreadable"
    assert [c.speculation.observed for c in sub.configs if c.role == "draft"] == [
        "not_observed", "not_observed"]


def test_no_log_is_for_the_engine_that_reads_a_log(tmp_path: Path) -> None:
    result = specsubmit(tmp_path, "run", "--engine", "llama-server", "--no-log", "--no-submit")
    assert result.returncode == 2
    assert "--no-log needs --engine ollama" in result.stderr


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _wait_for(lines: list[str], count: int) -> None:
    deadline = time.monotonic() + 10
    while len(lines) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_heartbeat_names_the_work_and_its_time_and_stops_with_it() -> None:
    lines: list[str] = []
    clock = _Clock()
    said = threading.Event()

    def say(line: str) -> None:
        lines.append(line)
        said.set()

    beat = Heartbeat(say, interval_s=0.02, clock=clock)
    beat.begin("draft_n3 trial 2 of 16")
    clock.now += 95
    _wait_for(lines, 1)
    assert lines[0] == "draft_n3 trial 2 of 16: still working, 95 s so far"
    beat.begin("draft_n3 trial 2 of 16")  # the same work again: its time runs on
    _wait_for(lines, len(lines) + 1)
    assert lines[-1].endswith("95 s so far")
    beat.end()
    time.sleep(0.1)  # a beat that read the work before end() may still print once
    settled = len(lines)
    time.sleep(0.2)
    assert len(lines) == settled
    beat.close()


def test_a_console_that_is_not_a_terminal_hears_the_heartbeat_during_a_trial() -> None:
    piped = io.StringIO()
    listener = ConsoleListener(Console(file=piped, force_terminal=False, width=100))
    assert listener.heartbeat is not None
    listener.heartbeat.interval_s = 0.02
    listener.trial_started(3, 20, "ngram_simple_m8", 1)
    deadline = time.monotonic() + 10
    while "still working" not in piped.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    listener.stop()
    assert "ngram_simple_m8 trial 2 of 20: still working" in piped.getvalue()
    terminal = ConsoleListener(Console(file=io.StringIO(), force_terminal=True))
    assert terminal.heartbeat is None  # rich redraws the elapsed time there
    terminal.stop()


def test_the_progress_follows_a_run_that_became_shorter_and_says_a_stopped_draft() -> None:
    shown = io.StringIO()
    listener = ConsoleListener(Console(file=shown, force_terminal=True, width=200))
    listener.trial_started(0, 26, "no_draft", 0)
    listener.stopped_early("draft_qwen2.5_0.5b_n8", 6224)
    listener.trial_started(12, 22, "no_draft", 6)  # the draft's later blocks are gone
    assert listener.task is not None and listener.total == 22
    assert listener.progress.tasks[0].total == 22
    listener.stop()
    assert ("draft_qwen2.5_0.5b_n8: stopped after the first round by the protocol's rule: "
            "none of its 6,224 drafted tokens accepted") in shown.getvalue()


def _file_size_limit(limit: int) -> Callable[[], None]:
    """For the child: writes past ``limit`` bytes fail (EFBIG), as on a full disk (ENOSPC)
    for the process; SIGXFSZ ignored so that the write fails rather than the process."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_mid_run_names_the_checkpoint_that_survived(
        tmp_path: Path, specsubmit_home: Path) -> None:
    with FakeOllama(version="0.12.8", models=default_models()) as fake:
        whole = specsubmit(tmp_path, "run", "--ollama", fake.url, "--no-submit")
        assert whole.returncode == 0, whole.stderr
        (complete,) = specsubmit_home.glob("results/*.json")
        size = complete.stat().st_size
        complete.unlink()
        full = subprocess.run([SCRIPT, "run", "--ollama", fake.url, "--no-submit"],
                              capture_output=True, text=True, timeout=120, env=_env(tmp_path),
                              stdin=subprocess.DEVNULL, preexec_fn=_file_size_limit(size // 2))
    assert full.returncode == 1, full.stderr
    [line] = [x for x in full.stderr.splitlines() if "error:" in x]
    (kept,) = specsubmit_home.glob("results/*.json")
    partial = parse_submission(kept.read_bytes())
    trials = sum(len(c.trials) for c in partial.configs)
    assert 0 < trials < 15 and not partial.complete
    assert line.startswith(f"specsubmit: error: cannot write the result to {kept}: ")
    assert line.endswith(f"; the last checkpoint, {trials} trials, is intact at {kept}")
