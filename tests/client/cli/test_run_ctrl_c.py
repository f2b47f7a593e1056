"""Ctrl-C during `specsubmit run`: the real console script in a subprocess against the
fake Ollama; a finished trial is never lost, and the run ends in one line and exit 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specschema import Submission
from tests.client.cli.test_run_cli import MTP, _completed, _env, _one_error_line, _saved
from tests.fakeollama import FakeModel, FakeOllama
from tests.support.ctrlc import interruptible

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))


def test_ctrl_c_stops_after_the_current_request(tmp_path: Path, specsubmit_home: Path) -> None:
    slow = [FakeModel("qwen3:14b", tokens_per_s=800)]  # 0.25 s per request
    with FakeOllama(models=slow) as fake:
        proc = subprocess.Popen(interruptible([SCRIPT, "run", "--ollama", fake.url]),
                                env=_env(tmp_path), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while fake.generate_count < 3 + 2 and time.monotonic() < deadline:
            time.sleep(0.02)  # wait until two trials are under way
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        requests_sent = fake.generate_count
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "stopping after the current request" in stderr
    (sub,) = _saved(specsubmit_home)
    measured = sum(len(c.trials) for c in sub.configs)
    assert not sub.complete and 1 <= measured < 15
    assert measured == requests_sent - 3  # the request in flight finished and was kept
    assert f"interrupted after {measured} of 15 trials" in stderr


def test_ctrl_c_before_any_trial(tmp_path: Path, specsubmit_home: Path) -> None:
    with FakeOllama(stall_s=3.0) as fake:
        proc = subprocess.Popen(interruptible([SCRIPT, "run", "--ollama", fake.url]),
                                env=_env(tmp_path), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while fake.generate_count < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)  # a second Ctrl-C aborts at once
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "Traceback" not in stderr and "nothing was saved" in stderr
    assert _saved(specsubmit_home) == []


def _start_run(tmp_path: Path, fake: FakeOllama, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(interruptible([SCRIPT, "run", "--ollama", fake.url, *args]),
                            env=_env(tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_requests(fake: FakeOllama, count: int) -> int:
    deadline = time.monotonic() + 30
    while fake.generate_count < count:
        assert time.monotonic() < deadline, f"only {fake.generate_count} requests"
        time.sleep(0.01)
    return fake.generate_count


def _positions(sub: Submission) -> list[int]:
    return sorted(t.position for c in sub.configs for t in c.trials)


def test_ctrl_c_twice_after_trials_keeps_every_finished_trial(
    tmp_path: Path, specsubmit_home: Path,
) -> None:
    """This used to print "interrupted before any trial ran; nothing was saved"
    and lose them all. The second Ctrl-C aborts the request in flight, not the finished."""
    slow = [FakeModel("qwen3:14b", tokens_per_s=200)]  # 1 s per request
    with FakeOllama(models=slow) as fake:
        proc = _start_run(tmp_path, fake)
        started = _wait_for_requests(fake, 3 + 4)  # 3 warm-ups, trials 1-3 done, 4 in flight
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)  # still inside the 1 s request: abort it
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "nothing was saved" not in stderr
    finished = started - 3 - 1
    (sub,) = _saved(specsubmit_home)
    assert not sub.complete and _positions(sub) == list(range(finished))
    assert sub.note and f"{finished} of 15 trials" in sub.note
    path = specsubmit_home / "results" / f"{sub.submission_id}.json"
    assert _one_error_line(_completed(proc, stderr)) == (
        f"specsubmit: error: interrupted after {finished} of 15 trials; the incomplete result "
        f"is saved at {path}")


@pytest.mark.parametrize("after_trials", [2, 6, 11])
def test_a_burst_of_ctrl_c_never_loses_a_finished_trial(
    tmp_path: Path, specsubmit_home: Path, after_trials: int,
) -> None:
    """Ctrl-C pressed many times, 4 ms apart, while 20 ms trials run and are saved: some
    land in a request, some in a save (which finishes first), some after the abort began."""
    with FakeOllama(models=[FakeModel("qwen3:14b", tokens_per_s=10_000)]) as fake:
        proc = _start_run(tmp_path, fake)
        _wait_for_requests(fake, 3 + after_trials)
        for _ in range(12):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.004)
        _, stderr = proc.communicate(timeout=30)
        started = fake.generate_count
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    (sub,) = _saved(specsubmit_home)
    measured = len(_positions(sub))
    assert _positions(sub) == list(range(measured))
    # Every request that ended is kept; at most the one in flight at the abort is not.
    assert started - 3 - 1 <= measured <= started - 3
    assert f"interrupted after {measured} of 15 trials" in _one_error_line(
        _completed(proc, stderr))
    leftovers = [p.name for p in (specsubmit_home / "results").iterdir()
                 if p.suffix != ".json" or p.name.startswith(".")]
    assert leftovers == []  # no half-written temp file left beside the result


def test_ctrl_c_in_the_middle_of_a_block_keeps_the_whole_blocks_and_says_so(
    tmp_path: Path, specsubmit_home: Path,
) -> None:
    """ollama-draft runs blocks of 2 trials, each after its own warm-up: requests 1-3 are
    block 0 (warm-up, 2 trials), 4-6 block 1. A Ctrl-C during request 5 (block 1's first
    trial) stops after it; that half block is not kept, in the file or in any checkpoint."""
    log = tmp_path / "server.log"
    slow = [FakeModel(MTP, mtp=True, tokens_per_s=400)]  # 0.5 s per request
    with FakeOllama(version="0.33.1", models=slow, log_path=log) as fake:
        proc = _start_run(tmp_path, fake, "--protocol", "ollama-draft", "--target", MTP,
                          "--ollama-log", str(log))
        _wait_for_requests(fake, 5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        sent = fake.generate_count
    assert proc.returncode == 130, stderr
    assert sent == 5, stderr  # the run stopped after the request in flight
    (sub,) = _saved(specsubmit_home)
    assert not sub.complete
    assert [(c.name, [t.block for t in c.trials]) for c in sub.configs] == [
        ("spec_off", [0, 0]), ("spec_4", []), ("spec_8", [])]
    path = specsubmit_home / "results" / f"{sub.submission_id}.json"
    assert _one_error_line(_completed(proc, stderr)) == (
        "specsubmit: error: interrupted after 2 of 26 trials (and 1 of the block cut short, "
        "not kept: a block counts only whole); the incomplete result is saved at "
        f"{path}")




def test_a_ctrl_c_during_a_save_waits_until_the_file_is_written() -> None:
    """The shield around every save: the abort is raised after it, never inside."""
    import io

    from rich.console import Console

    from specsubmit.cli.run import _CtrlC

    before = signal.getsignal(signal.SIGINT)
    steps: list[str] = []
    try:
        with pytest.raises(KeyboardInterrupt), _CtrlC(Console(file=io.StringIO())) as ctrl_c:
            os.kill(os.getpid(), signal.SIGINT)  # the first: stop after the current request
            time.sleep(0.05)
            assert ctrl_c.event.is_set()
            with ctrl_c.shield():
                os.kill(os.getpid(), signal.SIGINT)  # the second, in the middle of a save
                time.sleep(0.05)
                steps.append("saved")
            steps.append("not reached")
    finally:
        signal.signal(signal.SIGINT, before)
    assert steps == ["saved"]


def test_an_abort_that_lands_in_a_finalizer_prints_no_traceback() -> None:
    """The second Ctrl-C's KeyboardInterrupt can be raised inside a finalizer (an HTTP
    stream closed by the garbage collector), where Python swallows it and prints
    "Exception ignored in ..." with a traceback (seen in a burst of Ctrl-Cs under load).
    Inside the run it is dropped; any other unraisable exception still reaches the hook."""
    import io
    import sys

    from rich.console import Console

    from specsubmit.cli.run import _CtrlC

    class Finalized:
        def __init__(self, exc: BaseException) -> None:
            self.exc = exc

        def __del__(self) -> None:
            raise self.exc

    seen: list[BaseException | None] = []
    before_hook = sys.unraisablehook
    def record(args: sys.UnraisableHookArgs) -> None:
        seen.append(args.exc_value)

    sys.unraisablehook = record
    before = signal.getsignal(signal.SIGINT)
    try:
        with _CtrlC(Console(file=io.StringIO())):
            Finalized(KeyboardInterrupt())  # collected at once: raises in __del__
            Finalized(ValueError("a real bug"))
        assert sys.unraisablehook is record  # the hook before the run, restored
    finally:
        sys.unraisablehook = before_hook
        signal.signal(signal.SIGINT, before)
    assert [type(exc) for exc in seen] == [ValueError]
