"""Just enough of a GGUF header to check a draft's vocabulary before any trial (stdlib);
the rule itself is ``compatibility.py``.

Why our own reader and not the ``gguf`` package: the client stays light (``gguf`` pulls
numpy), and only the key/value section is needed, which sits at the start of the file, so
a 9 GB model costs a few MB of reading. Why check at all, when llama-server checks too:
this build logs "the target and draft vocabs are not compatible" and then serves the target
*without* speculation, so the run would measure an A/A comparison and call it a draft.
"""

from __future__ import annotations

import struct
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
_MAX_ITEMS = 1 << 26
_MAX_KV = 1 << 20

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
    def __init__(self, handle: BinaryIO, path: Path) -> None:
        self.handle, self.path = handle, path

    def bad(self, why: str) -> BadModelFile:
        return BadModelFile(f"{self.path.name} is not a loadable GGUF model: {why}")

    def take(self, size: int) -> bytes:
        data = self.handle.read(size)
        if len(data) != size:
            raise self.bad("the header ends early")
        return data

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
            self.handle.seek(size, 1)
            return ""
        return self.take(size).decode("utf-8", "replace")

    def value(self, kind: int, keep: bool) -> Value:
        if kind in _SCALAR:
            return self.scalar(kind)
        if kind == 8:
            return self.string(keep)
        if kind == 9:
            item_kind, count = self.u32(), self.u64()
            if count > _MAX_ITEMS:
                raise self.bad("an array in the header is implausibly long")
            if item_kind == 8:
                items = [self.string(keep) for _ in range(count)]
                return items if keep else None
            if item_kind in _SCALAR:
                self.handle.seek(struct.calcsize(_SCALAR[item_kind]) * count, 1)
                return None
            raise self.bad(f"unsupported array type {item_kind}")
        raise self.bad(f"unsupported value type {kind}")


def read_header(path: Path) -> GgufHeader:
    """The tokenizer and identity keys of a GGUF file (v2/v3, little-endian)."""
    try:
        handle = path.open("rb")  # read-only: the file may be an Ollama blob
    except OSError as exc:
        raise BadModelFile(f"cannot open the model file {path}: {exc.strerror}") from None
    with handle:
        reader = _Reader(handle, path)
        if reader.take(4) != b"GGUF":
            raise reader.bad("no GGUF magic at its start")
        version = reader.u32()
        if version not in (2, 3):
            raise reader.bad(f"GGUF version {version} (2 or 3 expected)")
        reader.u64()  # tensor count
        kv_count = reader.u64()
        if kv_count > _MAX_KV:
            raise reader.bad("implausibly many header keys")
        found: dict[str, Value] = {}
        for _ in range(kv_count):
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
