"""llama-server as the client runs it: started by specsubmit for each config."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from specsubmit.engines.base import Adapter, Engine, EngineOptions, RunSettings
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.engines.llama_server.probe import run_probe
from specsubmit.errors import UsageError


def _check(options: EngineOptions) -> None:
    if options.llama_threads is not None and not 0 < options.llama_threads <= 1024:
        raise UsageError("--llama-threads must be between 1 and 1024")


@contextlib.contextmanager
def _open(settings: RunSettings, options: EngineOptions) -> Iterator[Engine]:
    _check(options)
    with LlamaServerEngine(settings, binary=options.llama_server,
                           models_dir=options.ollama_models, timeout_s=options.timeout_s,
                           threads=options.llama_threads) as engine:
        yield engine


ADAPTER = Adapter(
    name="llama-server",
    summary="llama-server (started by specsubmit per config; protocol llamacpp-draft by "
            "default, llamacpp-map for your own target and every mechanism)",
    accepts=frozenset({"llama_server", "ollama_models", "llama_threads"}), open=_open,
    default_protocol="llamacpp-draft", probe=run_probe,
    check=_check,
)
