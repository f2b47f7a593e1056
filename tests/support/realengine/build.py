"""Build (once) and cache a real llama.cpp `llama-server` for the real-engine tests.

Source: the PyPI sdist of llama-cpp-python, which vendors the whole llama.cpp tree. No
registry has Ollama or a prebuilt llama-server for this platform, and the sdist is the one
pinned, hash-checked source we can fetch with an ordinary client (pip). Only its
`vendor/llama.cpp` is used; nothing of llama-cpp-python is built or installed.

Stdlib only on purpose: `.ci/run` calls `python3 -m tests.support.realengine.build` on a
fresh clone before the project's venv exists.

Cache layout (``cache_root()``: ``$SPECATLAS_CACHE``, default ``~/.cache/specatlas``)::

    llama-server/<key>/llama-server                 the binary
    llama-server/<key>/ggml-vocab-llama-spm.gguf    the sdist's 32000-token SPM vocab
    llama-server/<key>/build-info.json              versions, flags, `--version`, timings
    llama-server/<key>/build.log                    cmake's output
    llama-server/<key>.lock                         flock: one builder per key at a time

``<key>`` hashes everything that changes the binary (sdist version and hash, llama.cpp
commit, cmake flags, target), so changing a flag builds next to the old binary instead of
silently reusing it. The key directory is renamed into place only when complete, so an
interrupted build leaves at most a ``.tmp-*`` directory, which the next build deletes.

Environment:
    SPECATLAS_CACHE         cache root (default ~/.cache/specatlas; SPECBENCH_CACHE and
                            ~/.cache/specbench, the names before the rename, still read)
    SPECBENCH_LLAMA_SDIST   use this local sdist file instead of downloading it (still
                            checked against the pinned sha256), for offline machines
    SPECBENCH_BUILD_JOBS    parallel compile jobs (default: the number of CPUs)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("specbench.realengine.build")

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
# Pinned so a re-published or tampered file cannot change what the tests run.
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_ROOT = f"llama_cpp_python-{SDIST_VERSION}"
# The llama.cpp commit the sdist vendors (its .git/modules/vendor/llama.cpp/HEAD); checked
# after extraction so a mismatch between this constant and the source is caught.
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
TARGET = "llama-server"
VOCAB_FILE = "ggml-vocab-llama-spm.gguf"

# Portable (no -march=native, so a cached binary survives a CPU change on a shared cache),
# static llama/ggml libraries, server target only, and nothing that fetches from the network
# at configure time (the web UI) or links OpenSSL. The build commit/number are given
# explicitly because cmake would otherwise ask git, which finds whichever repository happens
# to contain the cache directory (or none).
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT[:7]}",
    "-DLLAMA_BUILD_NUMBER=1",
)


class BuildError(RuntimeError):
    """The download, configure or compile step failed (never a reason to skip a test)."""


def cache_root() -> Path:
    """$SPECATLAS_CACHE (or $SPECBENCH_CACHE, its name before the rename to specatlas), else
    ~/.cache/specatlas, or ~/.cache/specbench where only that one exists: a cache built
    before the rename is used, not built again."""
    explicit = os.environ.get("SPECATLAS_CACHE") or os.environ.get("SPECBENCH_CACHE")
    if explicit:
        return Path(explicit)
    current, legacy = Path.home() / ".cache" / "specatlas", Path.home() / ".cache" / "specbench"
    return legacy if legacy.is_dir() and not current.exists() else current


def cache_key() -> str:
    identity = {
        "sdist": f"{SDIST_NAME}=={SDIST_VERSION}",
        "sha256": SDIST_SHA256,
        "commit": LLAMA_CPP_COMMIT,
        "flags": list(CMAKE_FLAGS),
        "target": TARGET,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return f"{SDIST_NAME}-{SDIST_VERSION}-{digest[:12]}"


def cache_dir() -> Path:
    """The directory that holds (or will hold) the binary for the current key."""
    return cache_root() / "llama-server" / cache_key()


def _find_program(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def missing_toolchain() -> list[str]:
    """What is missing to build llama-server here (empty when everything is present)."""
    missing = []
    if not _find_program("cmake"):
        missing.append("cmake")
    # CMake honours CC/CXX; otherwise it looks for these names.
    if not _find_program(*filter(None, [os.environ.get("CXX")]), "c++", "g++", "clang++"):
        missing.append("a C++ compiler (g++)")
    if not _find_program(*filter(None, [os.environ.get("CC")]), "cc", "gcc", "clang"):
        missing.append("a C compiler (gcc)")
    if not _find_program("ninja", "make"):
        missing.append("make or ninja")
    return missing


def toolchain_available() -> bool:
    return not missing_toolchain()


def cached_binary() -> Path | None:
    """The cached binary if a complete build for the current key exists, else None."""
    directory = cache_dir()
    binary = directory / TARGET
    # build-info.json is written last inside the staging directory, and the directory is
    # renamed into place as a whole, so its presence means the build finished.
    if (directory / "build-info.json").is_file() and os.access(binary, os.X_OK):
        return binary
    return None


def vocab_path() -> Path:
    """The sdist's llama SPM vocab next to the binary (builds the binary first if needed)."""
    return llama_server_binary().parent / VOCAB_FILE


def build_info() -> dict[str, object]:
    """build-info.json of the cached build (builds the binary first if needed)."""
    info: dict[str, object] = json.loads(
        (llama_server_binary().parent / "build-info.json").read_text()
    )
    return info


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        # flock is dropped by the kernel when the holder dies, so a killed build never
        # leaves a stale lock behind.
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _run(command: list[str], logfile: Path, cwd: Path | None = None) -> None:
    log.info("+ %s", " ".join(command))
    with logfile.open("a") as out:
        out.write(f"\n+ {' '.join(command)}\n")
        out.flush()
        result = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "".join(logfile.read_text(errors="replace").splitlines(keepends=True)[-40:])
        raise BuildError(
            f"{command[0]} failed with exit code {result.returncode}; "
            f"last lines of {logfile}:\n{tail}"
        )


def _pip() -> list[str]:
    # The running interpreter's pip first (the venv's, or CI's python3); a Debian python3
    # without python3-pip still may have a pip on PATH.
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    found = _find_program("pip3", "pip")
    if found:
        return [found]
    raise BuildError("pip is needed to download the llama-cpp-python sdist; none found")


def _fetch_sdist(workdir: Path, logfile: Path) -> Path:
    local = os.environ.get("SPECBENCH_LLAMA_SDIST")
    if local:
        sdist = Path(local)
    else:
        # --require-hashes makes pip itself refuse a file with another hash; --no-binary
        # makes sure we get the source, never a wheel.
        requirements = workdir / "requirements.txt"
        requirements.write_text(f"{SDIST_NAME}=={SDIST_VERSION} --hash=sha256:{SDIST_SHA256}\n")
        _run(
            [*_pip(), "download", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--no-binary", ":all:", "--require-hashes",
             "-r", str(requirements), "-d", str(workdir / "dl")],
            logfile,
        )
        sdist = workdir / "dl" / SDIST_FILE
    if not sdist.is_file():
        raise BuildError(f"sdist not found at {sdist}")
    actual = _sha256(sdist)
    if actual != SDIST_SHA256:
        raise BuildError(f"{sdist}: sha256 {actual}, expected {SDIST_SHA256}")
    return sdist


def _extract_llama_cpp(sdist: Path, workdir: Path) -> Path:
    vendor = f"{SDIST_ROOT}/vendor/llama.cpp/"
    head_member = f"{SDIST_ROOT}/.git/modules/vendor/llama.cpp/HEAD"
    with tarfile.open(sdist, "r:gz") as archive:
        head_file = archive.extractfile(head_member)
        if head_file is None:
            raise BuildError(f"{sdist} has no {head_member}")
        commit = head_file.read().decode().strip()
        if commit != LLAMA_CPP_COMMIT:
            raise BuildError(f"{sdist} vendors llama.cpp {commit}, expected {LLAMA_CPP_COMMIT}")
        # Only the llama.cpp tree: the rest (the Python binding) is not needed.
        members = [m for m in archive.getmembers() if m.name.startswith(vendor)]
        if hasattr(tarfile, "data_filter"):  # 3.11.4+: refuse links and paths that escape
            archive.extractall(workdir, members=members, filter="data")
        else:  # pragma: no cover - older 3.11 patch releases
            for member in members:
                if member.issym() or member.islnk() or ".." in Path(member.name).parts:
                    raise BuildError(f"{sdist}: unexpected member {member.name}")
            archive.extractall(workdir, members=members)
    return workdir / SDIST_ROOT / "vendor" / "llama.cpp"


def _build(staging: Path, workdir: Path) -> None:
    started = time.monotonic()
    logfile = staging / "build.log"
    sdist = _fetch_sdist(workdir, logfile)
    fetched = time.monotonic()
    source = _extract_llama_cpp(sdist, workdir)
    build = workdir / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(["cmake", "-S", str(source), "-B", str(build), *generator, *CMAKE_FLAGS], logfile)
    jobs = os.environ.get("SPECBENCH_BUILD_JOBS") or str(os.cpu_count() or 2)
    _run(["cmake", "--build", str(build), "--target", TARGET, "-j", jobs], logfile)
    built = time.monotonic()

    binary = staging / TARGET
    shutil.copy2(build / "bin" / TARGET, binary)
    shutil.copy2(source / "models" / VOCAB_FILE, staging / VOCAB_FILE)
    # A binary that cannot start (missing shared library, wrong arch) must fail the build,
    # not the first test that uses it.
    version = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    if version.returncode != 0:
        raise BuildError(f"{binary} --version failed ({version.returncode}): {version.stderr}")
    info = {
        "sdist": f"{SDIST_NAME}=={SDIST_VERSION}",
        "sdist_sha256": SDIST_SHA256,
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "cmake_flags": list(CMAKE_FLAGS),
        "generator": generator[1] if generator else "default",
        "jobs": int(jobs),
        "version_output": (version.stdout + version.stderr).strip(),
        "fetch_seconds": round(fetched - started, 1),
        "build_seconds": round(built - fetched, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (staging / "build-info.json").write_text(json.dumps(info, indent=2) + "\n")


def llama_server_binary() -> Path:
    """Path of a working llama-server binary, building it first if it is not cached.

    Raises BuildError when the build fails. Callers that want to skip on a machine without
    a compiler check toolchain_available() first; a cached binary is returned even then.
    """
    found = cached_binary()
    if found:
        return found
    directory = cache_dir()
    with _locked(directory.with_name(directory.name + ".lock")):
        found = cached_binary()  # another process may have built it while we waited
        if found:
            return found
        missing = missing_toolchain()
        if missing:
            raise BuildError(f"cannot build llama-server: missing {', '.join(missing)}")
        # We hold the lock, so any staging directory for this key is an interrupted build.
        for stale in directory.parent.glob(f".tmp-{directory.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if directory.exists():  # incomplete: no build-info.json
            shutil.rmtree(directory)
        # Staging lives beside the final directory: same filesystem, so the rename is atomic.
        staging_root = Path(
            tempfile.mkdtemp(prefix=f".tmp-{directory.name}-", dir=directory.parent)
        )
        try:
            staging = staging_root / "out"
            staging.mkdir()
            log.info("building %s in %s (a few minutes)", TARGET, staging_root)
            try:
                _build(staging, staging_root)
            except BaseException:
                failed_log = staging / "build.log"
                if failed_log.exists():
                    shutil.copy2(failed_log, directory.with_name(directory.name + ".failed.log"))
                raise
            os.rename(staging, directory)
        finally:
            shutil.rmtree(staging_root, ignore_errors=True)
    found = cached_binary()
    if not found:
        raise BuildError(f"build finished but {directory / TARGET} is not usable")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.realengine.build",
        description="Build (or find in the cache) llama-server; print its path.",
    )
    parser.add_argument("--check-toolchain", action="store_true",
                        help="only report whether cmake and a C/C++ compiler are present")
    parser.add_argument("--info", action="store_true", help="print build-info.json too")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.check_toolchain:
        missing = missing_toolchain()
        sys.stdout.write("toolchain ok\n" if not missing else f"missing: {', '.join(missing)}\n")
        return 0 if not missing else 1
    try:
        binary = llama_server_binary()
    except BuildError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    sys.stdout.write(f"{binary}\n")
    if args.info:
        sys.stdout.write((binary.parent / "build-info.json").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
