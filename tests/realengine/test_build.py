"""build.py's cache, atomicity and skip/fail policy.

Most tests point SPECBENCH_CACHE at an empty folder and replace the slow step (_build) with
a stand-in, so they check the bookkeeping without compiling anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.realengine import build
from tests.support.realengine.fixtures import require_llama_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake_build(calls: list[Path], delay: float = 0.0, fail: bool = False) -> object:
    def fake(staging: Path, workdir: Path) -> None:
        calls.append(staging)
        (staging / "build.log").write_text("compiling...\n")
        time.sleep(delay)
        if fail:
            raise build.BuildError("compiler crashed")
        binary = staging / build.TARGET
        binary.write_text("#!/bin/sh\necho fake\n")
        binary.chmod(0o755)
        (staging / "build-info.json").write_text("{}")

    return fake


def test_the_key_covers_version_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    key = build.cache_key()
    assert key.startswith(f"llama-cpp-python-{build.SDIST_VERSION}-")
    assert build.cache_key() == key  # stable, not salted per process
    monkeypatch.setattr(build, "CMAKE_FLAGS", (*build.CMAKE_FLAGS, "-DGGML_NATIVE=ON"))
    assert build.cache_key() != key
    monkeypatch.undo()
    monkeypatch.setattr(build, "SDIST_VERSION", "0.3.37")
    assert build.cache_key() != key


def test_the_cache_follows_specbench_cache(empty_cache: Path) -> None:
    assert build.cache_dir() == empty_cache / "llama-server" / build.cache_key()


def test_the_cache_root_by_its_name_and_the_one_before_the_rename(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECBENCH_CACHE", raising=False)
    monkeypatch.delenv("SPECATLAS_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert build.cache_root() == tmp_path / ".cache" / "specatlas"
    (tmp_path / ".cache" / "specbench").mkdir(parents=True)  # built before the rename
    assert build.cache_root() == tmp_path / ".cache" / "specbench"
    (tmp_path / ".cache" / "specatlas").mkdir()
    assert build.cache_root() == tmp_path / ".cache" / "specatlas"
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "old-variable"))
    assert build.cache_root() == tmp_path / "old-variable"
    monkeypatch.setenv("SPECATLAS_CACHE", str(tmp_path / "new-variable"))
    assert build.cache_root() == tmp_path / "new-variable"


def test_a_build_is_moved_into_place_whole_and_reused(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(build, "_build", _fake_build(calls))
    monkeypatch.setattr(build, "missing_toolchain", lambda: [])
    binary = build.llama_server_binary()
    assert binary == build.cache_dir() / build.TARGET
    assert build.llama_server_binary() == binary
    assert len(calls) == 1
    # Nothing but the key directory and its lock are left next to it.
    assert sorted(p.name for p in binary.parent.parent.iterdir()) == sorted(
        [build.cache_key(), build.cache_key() + ".lock"]
    )


def test_a_failed_build_leaves_no_cached_binary(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "_build", _fake_build([], fail=True))
    monkeypatch.setattr(build, "missing_toolchain", lambda: [])
    with pytest.raises(build.BuildError, match="compiler crashed"):
        build.llama_server_binary()
    assert build.cached_binary() is None
    assert not build.cache_dir().exists()
    parent = build.cache_dir().parent
    assert not list(parent.glob(".tmp-*"))
    # The log is kept for whoever reads the failure.
    failed = parent / (build.cache_key() + ".failed.log")
    assert failed.read_text() == "compiling...\n"


def test_leftovers_of_an_interrupted_build_are_not_used_and_are_cleaned(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = build.cache_dir()
    # A killed build: its staging folder, and a key folder without build-info.json.
    stale = directory.parent / f".tmp-{directory.name}-killed"
    (stale / "out").mkdir(parents=True)
    directory.mkdir()
    (directory / build.TARGET).write_text("half a binary")
    (directory / build.TARGET).chmod(0o755)
    assert build.cached_binary() is None
    calls: list[Path] = []
    monkeypatch.setattr(build, "_build", _fake_build(calls))
    monkeypatch.setattr(build, "missing_toolchain", lambda: [])
    binary = build.llama_server_binary()
    assert len(calls) == 1 and not stale.exists()
    assert binary.read_text().startswith("#!/bin/sh")


def test_two_builders_build_once(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(build, "_build", _fake_build(calls, delay=0.3))
    monkeypatch.setattr(build, "missing_toolchain", lambda: [])
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(build.llama_server_binary()))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(calls) == 1  # the second waited on the flock, then found the build
    assert results == [build.cache_dir() / build.TARGET] * 2


def test_no_toolchain_and_no_cache_is_a_build_error(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "missing_toolchain", lambda: ["cmake"])
    with pytest.raises(build.BuildError, match="missing cmake"):
        build.llama_server_binary()


def test_missing_toolchain_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    missing = build.missing_toolchain()
    assert missing[0] == "cmake" and len(missing) == 4
    assert not build.toolchain_available()


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception),
                                            ("", pytest.skip.Exception)])
def test_without_a_toolchain_tests_skip_except_in_ci(
    ci: str, outcome: type[BaseException], empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(build, "missing_toolchain", lambda: ["cmake"])
    with pytest.raises(outcome, match="missing cmake"):
        require_llama_server()


def test_a_build_failure_fails_even_outside_ci(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(build, "_build", _fake_build([], fail=True))
    monkeypatch.setattr(build, "missing_toolchain", lambda: [])
    with pytest.raises(pytest.fail.Exception, match="compiler crashed"):
        require_llama_server()


@pytest.mark.realengine
def test_the_real_cached_binary_is_found_fast_by_the_cli(llama_server_bin: Path) -> None:
    # What .ci/run does before any venv exists; -S (no site-packages) proves build.py needs
    # only the standard library. The cache hit must be quick.
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-S", "-m", "tests.support.realengine.build", "--info"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == str(llama_server_bin)
    info = json.loads(result.stdout.split("\n", 1)[1])
    assert info["llama_cpp_commit"] == build.LLAMA_CPP_COMMIT
    assert "commit 0c1e570" in info["version_output"]
    assert elapsed < 5  # interpreter start included; the lookup itself is milliseconds
    started = time.monotonic()
    assert build.llama_server_binary() == llama_server_bin
    assert time.monotonic() - started < 0.5


@pytest.mark.realengine
def test_the_cached_vocab_is_the_sdist_llama_spm_vocab(llama_server_bin: Path) -> None:
    vocab = build.vocab_path()
    assert vocab.parent == llama_server_bin.parent
    assert vocab.read_bytes()[:4] == b"GGUF"
