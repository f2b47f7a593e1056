"""An error is one line on stderr and nothing else: no blank lines before it (rich's progress
display, stopped without having started, printed one each), no Python repr of a program's
output in it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port

SCRIPT = str(Path(sys.executable).with_name("specsubmit"))


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SPECSUBMIT_SERVER")}
    env["HOME"] = str(tmp_path / "home")
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=60,
                          env=env, check=False, stdin=subprocess.DEVNULL)


def test_a_run_that_fails_before_any_trial_prints_only_the_error_line(
    tmp_path: Path, specsubmit_home: Path,
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = _run(tmp_path, "run", "--ollama", url)
    assert result.returncode != 0
    assert result.stderr == (f"specsubmit: error: Ollama is not running at {url} — start it "
                             "with `ollama serve`\n")


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for the binary")
@pytest.mark.parametrize(("body", "said"), [
    ('printf "not-llama 1.0\\nCopyright \\033[31mred\\033[0m\\n"; exit 3',
     "(exit 3; its first line: not-llama 1.0)"),
    ('printf "\\n\\n  \\033]0;title\\007hello\\n"',
     "(its first line: \\x1b]0;title\\x07hello)"),
    ("exit 0", "(it printed nothing)"),
])
def test_a_binary_that_is_not_llama_server_is_named_in_one_line(
    tmp_path: Path, specsubmit_home: Path, body: str, said: str,
) -> None:
    binary = tmp_path / "fake-llama-server"
    binary.write_text(f"#!/bin/sh\n{body}\n")
    binary.chmod(0o755)
    result = _run(tmp_path, "run", "--engine", "llama-server", "--llama-server", str(binary))
    assert result.returncode != 0
    assert result.stderr == (f"specsubmit: error: {binary} is not a llama-server: `--version` "
                             f'printed no llama.cpp "version: ..." line {said}\n')
    assert "\\n" not in result.stderr and "\033" not in result.stderr and "\a" not in result.stderr
