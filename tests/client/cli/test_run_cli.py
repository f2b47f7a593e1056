"""`specsubmit run | protocols | show` as a contributor runs them: the real console script
in a subprocess, against the fake Ollama on loopback, state in tmp_path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specschema import Submission
from specschema.payload import parse_submission
from tests.client.submit_server import ScriptedServer
from tests.fakeollama import FakeModel, FakeOllama, default_models
from tests.support.ctrlc import interruptible
from tests.support.ports import free_port as _free_port

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


def _completed(proc: subprocess.Popen[str], stderr: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(proc.args, proc.returncode or 0, "", stderr)


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
    # a complete run is offered for submission; no server is configured here
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


# --- --server: checked before any trial; undelivered exits 75; Ctrl-C at consent -----------


def test_server_that_does_not_answer_stops_before_any_trial(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with FakeOllama() as fake:
        result = specsubmit(tmp_path, "run", "--ollama", fake.url, "--server", url)
        assert fake.generate_count == 0
    assert result.returncode == 69
    assert _one_error_line(result).startswith(
        f"specsubmit: error: --server {url} does not answer (ConnectError")


def test_server_with_a_bad_scheme_is_a_usage_error_before_any_trial(tmp_path: Path) -> None:
    with FakeOllama() as fake:
        result = specsubmit(tmp_path, "run", "--ollama", fake.url, "--server", "ftp://host")
        assert fake.generate_count == 0
    assert result.returncode == 2
    assert "--server must be an http(s) URL" in _one_error_line(result)


def test_no_submit_skips_the_server_check(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with FakeOllama() as fake:
        result = specsubmit(tmp_path, "run", "--ollama", fake.url, "--server", url,
                            "--no-submit")
    assert result.returncode == 0, result.stderr


def test_undelivered_result_exits_75_and_waits_in_pending(
    tmp_path: Path, specsubmit_home: Path,
) -> None:
    server = ScriptedServer().start()
    try:
        for _ in range(2):
            server.then(503)
        env = _env(tmp_path) | {"SPECSUBMIT_RETRY_ATTEMPTS": "2", "SPECSUBMIT_RETRY_BASE_S": "0"}
        with FakeOllama() as fake:
            result = subprocess.run([SCRIPT, "run", "--ollama", fake.url, "--server", server.url,
                                     "--yes"], capture_output=True, text=True, env=env,
                                    timeout=60, check=False, stdin=subprocess.DEVNULL)
    finally:
        server.stop()
    assert result.returncode == 75, result.stderr
    line = _one_error_line(result)
    assert "not delivered: server answered 503" in line
    assert "retry with `specsubmit submit --pending`" in line
    (sub,) = _saved(specsubmit_home)
    assert sub.complete
    assert [p.stem for p in (specsubmit_home / "pending").glob("*.json")] == [
        str(sub.submission_id)]


# 0: the SIGINT goes out the moment the prompt is read off stderr, when the client may not yet
# have started its read (input() once lost it there: the handler only set a flag and the read
# then blocked); 1 ms: just after, when the read has mostly begun. The child starts through
# `interruptible`: a suite run in the background hands it an ignored SIGINT otherwise
# (tests/support/ctrlc.py), which is what failed these under "load".
@pytest.mark.parametrize("delay_s", [0.0, 0.001])
def test_ctrl_c_at_the_consent_prompt_exits_130_and_sends_nothing(
    tmp_path: Path, specsubmit_home: Path, delay_s: float,
) -> None:
    import os
    import pty

    server = ScriptedServer().start()
    controller, terminal = pty.openpty()  # a terminal on stdin, so that it asks
    try:
        with FakeOllama() as fake:
            proc = subprocess.Popen(
                interruptible([SCRIPT, "run", "--ollama", fake.url, "--server", server.url]),
                env=_env(tmp_path), stdin=terminal, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)
            assert proc.stderr is not None
            seen = b""
            deadline = time.monotonic() + 60
            while b"Send this result?" not in seen:
                assert time.monotonic() < deadline and proc.poll() is None, seen[-2000:]
                seen += os.read(proc.stderr.fileno(), 4096)
            time.sleep(delay_s)
            proc.send_signal(signal.SIGINT)
            try:
                _, rest = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                pytest.fail("Ctrl-C at the consent prompt was lost: still waiting for an answer "
                            f"15 s later; stderr: {seen[-500:]!r}")
    finally:
        server.stop()
        os.close(controller)
        os.close(terminal)
    stderr = (seen + rest).decode()
    assert proc.returncode == 130, stderr
    (sub,) = _saved(specsubmit_home)
    path = specsubmit_home / "results" / f"{sub.submission_id}.json"
    assert _one_error_line(_completed(proc, stderr)) == (
        "specsubmit: error: interrupted at the consent prompt: not submitted; to send it "
        f"later: specsubmit submit {path}")
    assert server.posts == [] and not (specsubmit_home / "pending").exists()
