"""llama-server as the client runs it: started by specsubmit for each config."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from specsubmit.engines.base import Adapter, Engine, Flag, RunSettings
from specsubmit.engines.llama_server.engine import LlamaServerEngine
from specsubmit.engines.llama_server.options import LlamaServerOptions
from specsubmit.engines.llama_server.probe import run_probe
from specsubmit.errors import UsageError


def _check(options: LlamaServerOptions) -> None:
    if options.threads is not None and not 0 < options.threads <= 1024:
        raise UsageError("--llama-threads must be between 1 and 1024")


@contextlib.contextmanager
def _open(settings: RunSettings, options: LlamaServerOptions) -> Iterator[Engine]:
    _check(options)
    with LlamaServerEngine(settings, binary=options.binary, models_dir=options.models_dir,
                           timeout_s=options.timeout_s, threads=options.threads) as engine:
        yield engine


ADAPTER: Adapter[LlamaServerOptions] = Adapter(
    name="llama-server",
    summary="llama-server (started by specsubmit per config; protocol llamacpp-draft by "
            "default, llamacpp-map for your own target and every mechanism)",
    flags=(Flag("--llama-server", "binary"), Flag("--ollama-models", "models_dir"),
           Flag("--llama-threads", "threads")),
    options=LlamaServerOptions, open=_open, default_protocol="llamacpp-draft",
    probe=run_probe, check=_check,
)
