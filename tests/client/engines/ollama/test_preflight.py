"""Preflight pieces that need no server: model identity and the memory arithmetic."""

from __future__ import annotations

from specschema import Fingerprint, Gpu
from specsubmit.engines.memory import available_memory
from specsubmit.engines.ollama.preflight import model_identity, normalize_model_name

DIGEST = "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72"


def test_model_identity_from_tags_and_show() -> None:
    tag = {"name": "llama3.2:latest", "size": 2019393189, "digest": f"sha256:{DIGEST.upper()}",
           "details": {"family": "llama", "parameter_size": "3.2B", "quantization_level": ""}}
    show = {"details": {"quantization_level": "Q4_K_M", "family": ""}}
    info = model_identity("llama3.2", tag, show)
    assert (info.digest, info.size_bytes, info.family, info.parameter_size, info.quantization) \
        == (DIGEST, 2019393189, "llama", "3.2B", "Q4_K_M")


def test_model_identity_tolerates_odd_values() -> None:
    info = model_identity("m", {"digest": "not-hex", "size": True, "details": "x"}, {})
    assert info.digest is None and info.size_bytes is None and info.family is None


def test_normalize_model_name() -> None:
    assert normalize_model_name("llama3.2") == "llama3.2:latest"
    assert normalize_model_name("qwen3:14b") == "qwen3:14b"
    assert normalize_model_name("localhost:5000/me/model") == "localhost:5000/me/model:latest"


def test_available_memory() -> None:
    gib = 1024**3
    assert available_memory(Fingerprint(memory_bytes=24 * gib, unified_memory=True,
                                        gpus=[Gpu(memory_bytes=24 * gib)])) == 24 * gib
    assert available_memory(Fingerprint(memory_bytes=64 * gib, unified_memory=False,
                                        gpus=[Gpu(memory_bytes=24 * gib),
                                              Gpu(memory_bytes=None)])) == 88 * gib
    assert (available_memory(Fingerprint()) or 0) > 0  # falls back to this machine's RAM
