"""`specserver serve` with a store it cannot open: one line on stderr, exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
from liveserver import free_port

SPECSERVER = str(Path(sys.executable).parent / "specserver")


def _serve(database: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECSERVER_")}
    return subprocess.run(
        [SPECSERVER, "serve", "--port", str(free_port()), "--database", database],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_duckdb_file_held_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / "held.duckdb"
    holder = duckdb.connect(str(path))  # this test process holds the file's write lock
    try:
        result = _serve(str(path))
    finally:
        holder.close()
    assert result.returncode == 1
    assert _one_line(result).startswith(f"specserver: cannot open the store duckdb:///{path}")


def test_postgresql_not_listening_is_one_line_without_the_password() -> None:
    result = _serve("postgresql+psycopg://postgres:s3cret@127.0.0.1:1/test")
    assert result.returncode == 1
    line = _one_line(result)
    assert line.startswith("specserver: cannot open the store postgresql+psycopg://postgres:***@")
    assert "s3cret" not in result.stderr + result.stdout
