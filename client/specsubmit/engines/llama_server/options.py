"""What the command line says about the llama-server specsubmit starts (the adapter's own
options, ``Adapter.options``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specsubmit.engines.base import DEFAULT_TIMEOUT_S

__all__ = ["LlamaServerOptions"]


@dataclass(frozen=True)
class LlamaServerOptions:
    timeout_s: float = DEFAULT_TIMEOUT_S
    binary: Path | None = None  # --llama-server (else Ollama's bundled one, else PATH's)
    models_dir: Path | None = None  # --ollama-models: read-only
    threads: int | None = None  # --llama-threads (else from the cores and the load)
