"""`specsubmit run --budget`: the plan is printed before the first trial, a budget that
not even one round fits stops the run before it, and one the protocol fits in changes
nothing. The real console
script in a subprocess against the fake Ollama (in this process: it sees each request)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

from specschema.payload import parse_submission
from tests.client.cli.test_run_cli import MTP, SCRIPT, _env
from tests.fakeollama import FakeModel, FakeOllama


class _Watched(list[tuple[str, str, Any]]):
    """The fake's request list: at the second generation request, the first trial (the
    first is the first block's warm-up), notes whether the plan was printed already."""

    def __init__(self, plan_seen: threading.Event) -> None:
        super().__init__()
        self.plan_seen = plan_seen
        self.generations = 0
        self.plan_before_first_trial: bool | None = None

    def append(self, item: tuple[str, str, Any]) -> None:
        if item[1] == "/api/generate":
            self.generations += 1
            if self.generations == 2:
                # The client wrote the plan (if it did) before it sent this request; the
                # reader thread has it as soon as it reads the pipe.
                self.plan_before_first_trial = self.plan_seen.wait(30)
        super().append(item)


def _run(tmp_path: Path, *args: str) -> tuple[int, str, str, _Watched]:
    log = tmp_path / "server.log"
    plan_seen = threading.Event()
    lines: list[str] = []
    with FakeOllama(version="0.33.1", models=[FakeModel(MTP, mtp=True, tokens_per_s=1000.0)],
                    log_path=log) as fake:
        watched = _Watched(plan_seen)
        fake.requests = watched
        with subprocess.Popen(
                [SCRIPT, "run", "--protocol", "ollama-draft", "--target", MTP, "--ollama",
                 fake.url, "--ollama-log", str(log), "--json", "--no-submit", *args],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                text=True, env=_env(tmp_path)) as proc:

            def read() -> None:
                assert proc.stderr is not None
                for line in proc.stderr:
                    lines.append(line)
                    if line.startswith("plan: "):
                        plan_seen.set()

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            assert proc.stdout is not None
            stdout = proc.stdout.read()  # stderr is the reader's alone
            proc.wait(120)
            reader.join(10)
    return proc.returncode, stdout, "".join(lines), watched


def test_a_budget_not_even_one_round_fits_stops_before_the_first_trial(
        tmp_path: Path, specsubmit_home: Path) -> None:
    code, stdout, stderr, watched = _run(tmp_path, "--budget", "0.001")
    assert code == 1, stderr
    assert "plan: ollama-draft v4, 1 round of the protocol's 2" in stderr
    assert "  configs: spec_off (baseline), spec_4, spec_8" in stderr
    assert "the budget of 0.0 min cannot fit this run: even 1 round would take about" in stderr
    assert "stopped before the first trial, nothing was measured. Give --budget 1, or " \
        "fewer configs with --configs" in stderr
    assert "Traceback" not in stderr and stdout == ""
    assert watched.generations == 1  # the first block's warm-up, and no trial
    assert not list((specsubmit_home / "results").glob("*.json"))


def test_a_budget_the_protocol_fits_in_changes_nothing(
        tmp_path: Path, specsubmit_home: Path) -> None:
    code, stdout, stderr, watched = _run(tmp_path, "--budget", "30")
    assert code == 0, stderr
    assert watched.plan_before_first_trial is True
    assert "plan: ollama-draft v4, 2 rounds as the protocol asks\n" in stderr
    assert "  13 blocks of 2 trials: 26 trials, 13 warm-ups" in stderr
    assert "(4 blocks per config;" in stderr
    assert "plan revised, every config timed once: ollama-draft v4, 2 rounds as the " \
        "protocol asks\n  a block took: spec_off " in stderr
    sub = parse_submission(stdout.encode())
    assert sub.complete and sub.protocol.parameters == {"target": MTP}  # no rounds recorded
    assert [len(c.trials) for c in sub.configs] == [10, 8, 8]
    assert len(list((specsubmit_home / "results").glob("*.json"))) == 1  # where it is kept
