"""The GGUF header reader against hostile files: it spent over 150 s on a 512 MiB sparse
file, and took every count and length in the header at its word. Each file here is built
by hand (a hostile header exists nowhere else); the honest headers are covered by
test_compatibility.py and the real models' tests. Every case must end in one
``BadModelFile`` at once, without reading the file through or allocating what it declares
(tracemalloc's peak is held under a few MiB).
"""

from __future__ import annotations

import os
import struct
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from specsubmit.engines.llama_server import gguf_header
from specsubmit.engines.llama_server.gguf_header import read_header
from specsubmit.engines.llama_server.store import resolve_path
from specsubmit.errors import BadModelFile

STRING, ARRAY, UINT8 = 8, 9, 0


def _text(value: str) -> bytes:
    raw = value.encode()
    return struct.pack("<Q", len(raw)) + raw


def _file(path: Path, kv_count: int, body: bytes, size: int | None = None) -> Path:
    """A GGUF v3 header declaring ``kv_count`` keys, then ``body``; the file made
    ``size`` bytes long (sparse: a hole after the body)."""
    with path.open("wb") as handle:
        handle.write(b"GGUF" + struct.pack("<IQQ", 3, 0, kv_count) + body)
        if size is not None:
            handle.truncate(size)
    return path


def _refused(path: Path, match: str, **kwargs: object) -> tuple[float, int]:
    """(seconds, peak bytes allocated) of a read that must fail with ``match``."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(BadModelFile, match=match):
            read_header(path, **kwargs)  # type: ignore[arg-type]
        return time.perf_counter() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _array_of_strings(key: str, count: int) -> bytes:
    return _text(key) + struct.pack("<IIQ", ARRAY, STRING, count)


CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("key_count_2_40", lambda p: _file(p, 1 << 40, b""), "implausibly many header keys"),
    ("key_count_below_the_cap_past_the_file",
     lambda p: _file(p, 60_000, _text("general.name")), "ends early"),
    ("string_length_2_60", lambda p: _file(p, 1, struct.pack("<Q", 1 << 60) + b"x" * 64),
     "implausibly long"),
    ("string_length_8_mib_in_a_small_file",
     lambda p: _file(p, 1, struct.pack("<Q", 8 << 20) + b"general.name"), "ends early"),
    ("array_of_10_12_strings",
     lambda p: _file(p, 1, _array_of_strings("tokenizer.ggml.tokens", 10**12)),
     "implausibly long"),
    ("array_of_10_12_bytes",
     lambda p: _file(p, 1, _text("tokenizer.ggml.scores") + struct.pack(
         "<IIQ", ARRAY, UINT8, 10**12)), "ends early"),
    # the review's file: 2^26 empty strings, 512 MiB of zeros (a sparse hole)
    ("sparse_512_mib_of_empty_strings",
     lambda p: _file(p, 1, _array_of_strings("tokenizer.ggml.merges", 1 << 26), 512 << 20),
     "implausibly long"),
    ("five_16_mib_strings_past_the_byte_budget", lambda p: _over_the_byte_budget(p),
     "over 64 MiB"),
]


def _over_the_byte_budget(path: Path) -> Path:
    """Five unwanted 16 MiB strings (skipped, never read) in a sparse file longer than
    the byte budget: the budget ends it, not the file."""
    with path.open("wb") as handle:
        handle.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 5))
        for n in range(5):
            handle.write(_text(f"junk.{n}") + struct.pack("<IQ", STRING, 16 << 20))
            handle.seek(16 << 20, os.SEEK_CUR)
        handle.truncate(gguf_header.HEADER_BYTES + (8 << 20))
    return path


@pytest.mark.parametrize(("make", "match"), [(c[1], c[2]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_hostile_header_is_one_error_at_once(tmp_path: Path, make: Callable[[Path], Path],
                                               match: str) -> None:
    path = make(tmp_path / "hostile.gguf")
    seconds, peak = _refused(path, match)
    print(f"{path.stat().st_size:,} bytes: {seconds * 1000:.1f} ms, peak {peak:,} B")
    assert seconds < 2.0  # ~1 ms here; the bound is for a loaded machine
    assert peak < 4 << 20


def test_the_items_of_all_arrays_share_one_budget(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_header, "HEADER_ITEMS", 1000)
    empty = struct.pack("<Q", 0)
    body = b"".join(_array_of_strings(f"junk.{n}", 600) + empty * 600 for n in range(2))
    path = _file(tmp_path / "two.gguf", 2, body)
    _refused(path, "implausibly long")
    one = _file(tmp_path / "one.gguf", 1, body[: len(body) // 2])
    assert read_header(one).tokens == ()  # 600 items: within the budget


def test_a_slow_read_stops_at_the_time_budget(tmp_path: Path) -> None:
    empty = struct.pack("<Q", 0)
    path = _file(tmp_path / "slow.gguf", 1,
                 _array_of_strings("tokenizer.ggml.tokens", 100_000) + empty * 100_000)
    ticks = iter(range(0, 10**6, 6))  # each look at the clock: 6 s later
    _refused(path, "took over 10 s", clock=lambda: float(next(ticks)))
    assert len(read_header(path).tokens) == 100_000  # the real clock: read through


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            read_header(fifo)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # unblock it: a writer opens, then closes
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading the header of a FIFO waited for a writer")
    assert isinstance(outcome[0], BadModelFile), outcome
    assert "not a regular file" in str(outcome[0])


def test_a_device_is_refused(tmp_path: Path) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    with pytest.raises(BadModelFile, match="not a regular file"):
        read_header(Path("/dev/zero"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_model_path_that_is_not_a_file_is_refused_before_it_is_hashed(
        tmp_path: Path) -> None:
    """``--target PATH`` hashes the whole file (its digest is published): a FIFO would be
    waited on and ``/dev/zero`` hashed forever."""
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    paths = [fifo] + ([Path("/dev/zero")] if Path("/dev/zero").exists() else [])
    for path in paths:
        outcome: list[BaseException | None] = []

        def resolve(path: Path = path, outcome: list[BaseException | None] = outcome) -> None:
            try:
                resolve_path(str(path))
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                outcome.append(exc)

        worker = threading.Thread(target=resolve, daemon=True)
        worker.start()
        worker.join(5)
        if worker.is_alive():
            if path == fifo:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            pytest.fail(f"resolving {path} did not end")
        assert isinstance(outcome[0], BadModelFile), outcome
        assert "not a regular file" in str(outcome[0])
