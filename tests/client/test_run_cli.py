"""`specsubmit run | protocols | show` as a contributor runs them: the real console script
in a subprocess, against the fake Ollama on loopback, state in tmp_path."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specschema import Submission
from specschema.payload import parse_submission
from tests.fakeollama import FakeModel, FakeOllama, default_models

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))
MTP = "qwen3.5:9b-mtp"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OLLAMA_HOST", "SPECSUBMIT_OLLAMA_LOG", "SPECSUBMIT_PROTOCOL")}
    env["HOME"] = str(tmp_path / "home")  # no ~/.ollama/logs/server.log of the real user
    env["COLUMNS"] = "120"
    return env


def specsubmit(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=timeout,
                          env=_env(tmp_path), check=False, stdin=subprocess.DEVNULL)


def _saved(home: Path) -> list[Submission]:
    return [parse_submission(p.read_bytes()) for p in sorted((home / "results").glob("*.json"))]


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("specsubmit: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_full_hardnumbers_run(tmp_path: Path, specsubmit_home: Path) -> None:
    with FakeOllama(version="0.12.8") as fake:
        result = specsubmit(tmp_path, "run", "--ollama", fake.url, "--no-submit")
    assert result.returncode == 0, result.stderr
    (sub,) = _saved(specsubmit_home)
    assert sub.complete and [c.speculation.observed for c in sub.configs] == ["not_applied"] * 3
    assert "Median tok/s" in result.stdout and "vs baseline" in result.stdout
    assert "not applied (noise)" in result.stdout and "run-to-run noise" in result.stdout
    assert "Trials (in run order)" in result.stdout
    path = specsubmit_home / "results" / f"{sub.submission_id}.json"
    assert f"result saved to {path}" in result.stderr
    assert "Not submitted (--no-submit)" in result.stderr
    shown = specsubmit(tmp_path, "show", str(path))
    assert shown.returncode == 0
    assert "Median tok/s" in shown.stdout and "run-to-run noise" in shown.stdout


def test_json_output_file_and_ollama_host_env(tmp_path: Path, specsubmit_home: Path) -> None:
    out = tmp_path / "copy.json"
    with FakeOllama() as fake:
        env = _env(tmp_path) | {"OLLAMA_HOST": f":{fake.port}"}  # parsed as 127.0.0.1:port
        result = subprocess.run([SCRIPT, "run", "--json", "--output", str(out)],
                                capture_output=True, text=True, env=env, timeout=60, check=False,
                                stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    printed = parse_submission(result.stdout.encode())
    (saved,) = _saved(specsubmit_home)
    assert printed == saved == parse_submission(out.read_bytes())
    assert printed.complete
    assert "Median tok/s" in result.stderr  # the human report moved to stderr
    # a complete run is offered for submission (issue 4); no server is configured here
    assert "Not submitted: no server configured" in result.stderr


def test_ollama_draft_confirmed_on_0_33_with_a_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with FakeOllama(version="0.33.1", models=[FakeModel(MTP, mtp=True)], log_path=log) as fake:
        result = specsubmit(tmp_path, "run", "--protocol", "ollama-draft", "--target", MTP,
                            "--ollama", fake.url, "--ollama-log", str(log), "--json")
    assert result.returncode == 0, result.stderr
    sub = parse_submission(result.stdout.encode())
    drafts = [c.speculation for c in sub.configs if c.role == "draft"]
    assert [d.observed for d in drafts] == ["confirmed", "confirmed"]
    assert all(d.drafted_tokens and d.accepted_tokens for d in drafts)
    assert sub.protocol.parameters == {"target": MTP}
    assert "confirmed (" in result.stderr and "drafted tokens accepted" in result.stderr


def test_ollama_draft_on_0_12_8_is_not_applied(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with FakeOllama(version="0.12.8", models=[FakeModel(MTP, mtp=True)], log_path=log) as fake:
        result = specsubmit(tmp_path, "run", "--protocol", "ollama-draft", "--target", MTP,
                            "--ollama", fake.url, "--ollama-log", str(log), "--json")
    assert result.returncode == 0, result.stderr
    sub = parse_submission(result.stdout.encode())
    assert [c.speculation.observed for c in sub.configs] == ["not_applied"] * 3
    assert "needs Ollama 0.30.0" in result.stderr


# --- usage errors: exit 2 ------------------------------------------------------------------


def test_ollama_draft_without_target_is_a_usage_error(tmp_path: Path) -> None:
    result = specsubmit(tmp_path, "run", "--protocol", "ollama-draft")
    assert result.returncode == 2
    assert "protocol ollama-draft has no default model: pass --target MODEL" in \
        _one_error_line(result)


def test_unknown_protocol_is_a_usage_error(tmp_path: Path) -> None:
    result = specsubmit(tmp_path, "run", "--protocol", "nope")
    assert result.returncode == 2
    assert "unknown protocol 'nope'" in _one_error_line(result)


# --- run failures: exit 1, one line, no traceback --------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_nothing_listening(tmp_path: Path, specsubmit_home: Path) -> None:
    port = _free_port()
    result = specsubmit(tmp_path, "run", "--ollama", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert _one_error_line(result) == (
        f"specsubmit: error: Ollama is not running at http://127.0.0.1:{port} — "
        "start it with `ollama serve`")
    assert _saved(specsubmit_home) == []


def test_missing_model(tmp_path: Path) -> None:
    with FakeOllama(models=[]) as fake:
        result = specsubmit(tmp_path, "run", "--ollama", fake.url)
    assert result.returncode == 1
    line = _one_error_line(result)
    assert "model 'qwen3:14b' is not installed" in line and "--pull" in line


def test_pull_then_run(tmp_path: Path, specsubmit_home: Path) -> None:
    with FakeOllama(models=[], pullable=default_models()) as fake:
        result = specsubmit(tmp_path, "run", "--ollama", fake.url, "--pull")
    assert result.returncode == 0, result.stderr
    assert "pull qwen3:14b" in result.stderr
    assert _saved(specsubmit_home)[0].complete


@pytest.mark.parametrize(
    ("knob", "expected"),
    [
        ({"error_mid_stream": "runner crashed"},
         "Ollama reported an error mid-stream: runner crashed"),
        ({"end_without_done": True}, 'ended without its final chunk (no "done")'),
        ({"stall_s": 2.0}, "sent nothing for 0.5 s (raise the limit with --timeout)"),
    ],
)
def test_stream_failures(tmp_path: Path, specsubmit_home: Path, knob: dict[str, object],
                         expected: str) -> None:
    with FakeOllama(**knob) as fake:  # type: ignore[arg-type]
        result = specsubmit(tmp_path, "run", "--ollama", fake.url, "--timeout", "0.5")
    assert result.returncode == 1
    line = _one_error_line(result)
    assert expected in line and "nothing was measured" in line
    assert _saved(specsubmit_home) == []  # it failed in the first warm-up


def test_ollama_killed_mid_run(tmp_path: Path, specsubmit_home: Path) -> None:
    with FakeOllama(die_after_generates=3 + 6) as fake:
        result = specsubmit(tmp_path, "run", "--ollama", fake.url)
    assert result.returncode == 1
    line = _one_error_line(result)
    assert "broke mid-response (did Ollama stop or crash?)" in line
    assert "partial result (5 of 15 trials) is saved at" in line
    assert "Not submitted" not in result.stderr  # an incomplete result is never offered
    (sub,) = _saved(specsubmit_home)
    assert not sub.complete and sum(len(c.trials) for c in sub.configs) == 5
    assert "Incomplete result" in result.stdout


def test_ctrl_c_stops_after_the_current_request(tmp_path: Path, specsubmit_home: Path) -> None:
    slow = [FakeModel("qwen3:14b", tokens_per_s=800)]  # 0.25 s per request
    with FakeOllama(models=slow) as fake:
        proc = subprocess.Popen([SCRIPT, "run", "--ollama", fake.url], env=_env(tmp_path),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
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
        proc = subprocess.Popen([SCRIPT, "run", "--ollama", fake.url], env=_env(tmp_path),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
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


# --- protocols and show --------------------------------------------------------------------


def test_protocols_lists_both(tmp_path: Path) -> None:
    result = specsubmit(tmp_path, "protocols")
    assert result.returncode == 0
    for text in ("hardnumbers-m2", "ollama-draft", "draft_num_predict=4", "required: --target",
                 "Ollama >= 0.30.0 for draft_num_predict", "about 12 GB of memory"):
        assert text in result.stdout


def test_show_a_broken_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1}')
    result = specsubmit(tmp_path, "show", str(bad))
    assert result.returncode == 1
    assert f"{bad} is not a specsubmit result" in _one_error_line(result)
    missing = specsubmit(tmp_path, "show", str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "cannot read" in _one_error_line(missing)
