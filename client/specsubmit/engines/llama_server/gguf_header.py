"""Just enough of a GGUF header to check a draft's vocabulary before any trial (stdlib);
the rule itself is ``compatibility.py``.

Why our own reader and not the ``gguf`` package: the client stays light (``gguf`` pulls
numpy), and only the key/value section is needed, which sits at the start of the file, so
a 9 GB model costs a few MB of reading. Why check at all, when llama-server checks too:
this build logs "the target and draft vocabs are not compatible" and then serves the target
*without* speculation, so the run would measure an A/A comparison and call it a draft.

A model path is anything the contributor (or a model folder) names, so the reader is
bounded: only a regular file is read (a FIFO or a device is refused before any read, and
opening one does not wait for a writer), every length and count the header declares is held
against the bytes left in the file and against a budget before anything is read or
allocated (``HEADER_BYTES``, ``HEADER_ITEMS``: ten times the largest real headers), and the
reading stops after ``HEADER_SECONDS``. A hostile header (a key count of 2^40, a string of
2^60 bytes, an array of 10^12 items, 2^26 empty strings in a sparse file) is one
``BadModelFile`` at once.
"""

from __future__ import annotations

import os
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from specsubmit.errors import BadModelFile

_WANTED = {
    "general.architecture", "general.name", "general.file_type", "general.parameter_count",
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
}
# ``<architecture>.nextn_predict_layers``: the multi-token-prediction layers a target carries
# (llama.cpp's LLM_KV_NEXTN_PREDICT_LAYERS); --spec-type draft-mtp drafts with them.
_MTP_SUFFIX = ".nextn_predict_layers"
# GGUF value types -> struct format of a scalar (8 = string, 9 = array).
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
_MAX_STRING = 1 << 24
_U64 = struct.Struct("<Q")
_MAX_KV = 1 << 16  # real headers hold tens of keys
# What one header may cost at most. The largest real ones: Gemma 3's 262,144 tokens (about
# 6 MB of key/value section), GPT-OSS's 201,088 tokens and ~446,000 merges (~650,000 items).
HEADER_BYTES = 64 << 20  # bytes of the header read or skipped
HEADER_ITEMS = 1 << 21  # array items, all arrays together
HEADER_SECONDS = 10.0  # wall time (a real one takes well under a second)
_CHECK_EVERY = 1 << 14  # array items between two looks at the clock

Value = int | float | bool | str | list[str] | None


@dataclass(frozen=True)
class GgufHeader:
    architecture: str | None
    name: str | None
    file_type: int | None
    parameter_count: int | None
    tokenizer_model: str | None
    tokenizer_pre: str | None
    tokens: tuple[str, ...]
    bos: int | None
    eos: int | None
    add_bos: bool | None
    add_eos: bool | None
    mtp_layers: int | None = None  # None: the key is absent (no MTP layers)


class _Reader:
    """Reads the header through budgets: ``spend`` before every read or skip, ``count``
    before every array, the clock every ``_CHECK_EVERY`` items."""

    def __init__(self, handle: BinaryIO, path: Path, size: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.handle, self.path, self.size, self.clock = handle, path, size, clock
        self.position = 0
        self.items = 0
        self.deadline = clock() + HEADER_SECONDS

    def bad(self, why: str) -> BadModelFile:
        return BadModelFile(f"{self.path.name} is not a loadable GGUF model: {why}")

    def spend(self, size: int) -> None:
        """Account for ``size`` more bytes, refusing them before they are read."""
        if self.position + size > min(self.size, HEADER_BYTES):
            raise self.past(size)
        self.position += size

    def past(self, size: int) -> BadModelFile:
        """Why ``size`` more bytes cannot be had: the file ends, or the budget does."""
        if size > self.size - self.position:
            return self.bad("the header ends early")
        return self.bad(f"its header is over {HEADER_BYTES >> 20} MiB")

    def count(self, items: int, least_bytes: int, *, one_by_one: bool = True) -> None:
        """Account for ``items`` items of at least ``least_bytes`` each; ``one_by_one``:
        read one at a time (strings, keys: each costs a turn of the loop), so they count
        against ``HEADER_ITEMS`` too (a scalar array is skipped at once)."""
        if one_by_one:
            self.items += items
            if self.items > HEADER_ITEMS:
                raise self.bad("an array in the header is implausibly long")
        least = items * least_bytes
        if least > self.size - self.position:
            raise self.bad("the header ends early")
        if self.position + least > HEADER_BYTES:
            raise self.bad(f"its header is over {HEADER_BYTES >> 20} MiB")

    def on_time(self) -> None:
        if self.clock() > self.deadline:
            raise self.bad(f"its header took over {HEADER_SECONDS:g} s to read")

    def take(self, size: int) -> bytes:
        self.spend(size)
        data = self.handle.read(size)
        if len(data) != size:
            raise self.bad("the header ends early")
        return data

    def skip(self, size: int) -> None:
        self.spend(size)
        self.handle.seek(size, 1)

    def scalar(self, kind: int) -> int | float | bool:
        fmt = _SCALAR[kind]
        value: int | float | bool = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

    def u32(self) -> int:
        return int(self.scalar(4))

    def u64(self) -> int:
        return int(self.scalar(10))

    def string(self, keep: bool = True) -> str:
        size = self.u64()
        if size > _MAX_STRING:
            raise self.bad("a string in the header is implausibly long")
        if not keep:
            self.skip(size)
            return ""
        return self.take(size).decode("utf-8", "replace")

    def strings(self, count: int, keep: bool) -> list[str]:
        """An array's strings (``string`` unrolled: a tokenizer holds ~10^5-10^6)."""
        self.count(count, 8)  # each at least its length
        items: list[str] = []
        read, seek, limit = self.handle.read, self.handle.seek, min(self.size, HEADER_BYTES)
        for index in range(count):
            if index % _CHECK_EVERY == 0:
                self.on_time()
            if self.position + 8 > limit:
                raise self.past(8)
            head = read(8)
            if len(head) != 8:
                raise self.bad("the header ends early")
            size = _U64.unpack(head)[0]
            if size > _MAX_STRING:
                raise self.bad("a string in the header is implausibly long")
            if self.position + 8 + size > limit:
                self.position += 8
                raise self.past(size)
            self.position += 8 + size
            if keep:
                data = read(size)
                if len(data) != size:
                    raise self.bad("the header ends early")
                items.append(data.decode("utf-8", "replace"))
            else:
                seek(size, 1)
        return items

    def value(self, kind: int, keep: bool) -> Value:
        if kind in _SCALAR:
            return self.scalar(kind)
        if kind == 8:
            return self.string(keep)
        if kind == 9:
            item_kind, count = self.u32(), self.u64()
            if item_kind == 8:
                items = self.strings(count, keep)
                return items if keep else None
            if item_kind in _SCALAR:
                width = struct.calcsize(_SCALAR[item_kind])
                self.count(count, width, one_by_one=False)
                self.skip(width * count)
                return None
            raise self.bad(f"unsupported array type {item_kind}")
        raise self.bad(f"unsupported value type {kind}")


def _open_regular(path: Path) -> tuple[BinaryIO, int]:
    """The file opened for reading and its size; a FIFO, socket or device is refused
    without waiting (O_NONBLOCK: opening a FIFO would wait for a writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise BadModelFile(f"cannot open the model file {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadModelFile(f"{path.name} is not a loadable GGUF model: not a regular "
                               "file (a pipe, socket or device)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), info.st_size  # read-only: it may be an Ollama blob
    except BaseException:
        os.close(fd)
        raise


def read_header(path: Path, *, clock: Callable[[], float] = time.monotonic) -> GgufHeader:
    """The tokenizer and identity keys of a GGUF file (v2/v3, little-endian), read within
    the header's budgets (module docstring; ``clock`` times ``HEADER_SECONDS``)."""
    handle, size = _open_regular(path)
    with handle:
        reader = _Reader(handle, path, size, clock)
        if reader.take(4) != b"GGUF":
            raise reader.bad("no GGUF magic at its start")
        version = reader.u32()
        if version not in (2, 3):
            raise reader.bad(f"GGUF version {version} (2 or 3 expected)")
        reader.u64()  # tensor count
        kv_count = reader.u64()
        if kv_count > _MAX_KV:
            raise reader.bad("implausibly many header keys")
        reader.count(kv_count, 12)  # a key's length and a value's type at least
        found: dict[str, Value] = {}
        for _ in range(kv_count):
            reader.on_time()
            key = reader.string()
            kind = reader.u32()
            found[key] = reader.value(kind, keep=key in _WANTED or key.endswith(_MTP_SUFFIX))

    def text(key: str) -> str | None:
        value = found.get(key)
        return value if isinstance(value, str) else None

    def integer(key: str) -> int | None:
        value = found.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def flag(key: str) -> bool | None:
        value = found.get(key)
        return value if isinstance(value, bool) else None

    tokens = found.get("tokenizer.ggml.tokens")
    return GgufHeader(
        architecture=text("general.architecture"), name=text("general.name"),
        file_type=integer("general.file_type"),
        parameter_count=integer("general.parameter_count"),
        tokenizer_model=text("tokenizer.ggml.model"),
        tokenizer_pre=text("tokenizer.ggml.pre"),
        tokens=tuple(tokens) if isinstance(tokens, list) else (),
        bos=integer("tokenizer.ggml.bos_token_id"), eos=integer("tokenizer.ggml.eos_token_id"),
        add_bos=flag("tokenizer.ggml.add_bos_token"),
        add_eos=flag("tokenizer.ggml.add_eos_token"),
        mtp_layers=integer(f"{text('general.architecture')}{_MTP_SUFFIX}"),
    )
