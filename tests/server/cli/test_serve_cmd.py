"""`specserver serve` with a store it cannot open: one line on stderr, exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb

from tests.support.liveserver import free_port

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


# --- the real port, a mistyped --database folder, a port in use ----------------


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SPECSERVER_")}


def test_port_0_prints_and_serves_the_real_port(tmp_path: Path) -> None:
    import httpx

    process = subprocess.Popen(
        [SPECSERVER, "serve", "--port", "0", "--database", str(tmp_path / "s.duckdb"),
         "--check-workers", "0"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("specserver http://127.0.0.1:"), process.stderr
        port = int(line.split()[1].rsplit(":", 1)[1])
        assert port != 0
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30)  # waits in backlog
        assert health.status_code == 200
        body = health.json()
        assert body["store_version"] == body["schema_version"] >= 1
    finally:
        process.terminate()
        process.wait(15)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_a_database_in_a_missing_folder_is_refused_unless_asked(tmp_path: Path) -> None:
    typo = tmp_path / "sotre" / "s.duckdb"
    result = _serve(str(typo))
    assert result.returncode == 1
    assert _one_line(result) == (
        f"specserver: no store at {typo}: the folder {typo.parent} does not exist (a typo?); "
        "pass --create-folder to create it")
    assert not typo.parent.exists()
    # --create-folder: the folder and the store are created (the URL line comes after the
    # store was opened), then it serves.
    process = subprocess.Popen(
        [SPECSERVER, "serve", "--port", "0", "--database", str(typo), "--create-folder",
         "--check-workers", "0"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("specserver http://127.0.0.1:")
        assert typo.exists()
    finally:
        process.terminate()
        process.wait(15)
        if process.stdout is not None:
            process.stdout.close()


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [SPECSERVER, "serve", "--port", str(port), "--database", str(tmp_path / "s.duckdb")],
            capture_output=True, text=True, timeout=60, env=_env(), check=False)
    assert result.returncode == 1
    assert _one_line(result).startswith(f"specserver: cannot listen on 127.0.0.1:{port}: ")
    assert not (tmp_path / "s.duckdb").exists()  # refused before the store was touched
