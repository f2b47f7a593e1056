"""Ollama as the client runs it: reached at ``--ollama`` (``OLLAMA_HOST``), never started."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from specsubmit.engines.base import Adapter, Engine, EngineOptions, RunSettings
from specsubmit.engines.ollama.client import OllamaClient
from specsubmit.engines.ollama.engine import OllamaEngine, OllamaLog
from specsubmit.engines.ollama.host import parse_ollama_host


def _check(options: EngineOptions) -> None:
    parse_ollama_host(options.ollama)


@contextlib.contextmanager
def _open(settings: RunSettings, options: EngineOptions) -> Iterator[Engine]:
    with OllamaClient(parse_ollama_host(options.ollama), timeout_s=options.timeout_s) as client:
        log = OllamaLog.from_option(options.ollama_log)
        if options.no_log:
            log = dataclasses.replace(log, accept_missing=True)
        yield OllamaEngine(client, settings, log)


ADAPTER = Adapter(
    name="ollama", summary="ollama (the running Ollama server)",
    accepts=frozenset({"ollama", "ollama_log", "no_log"}), open=_open, check=_check,
    default_protocol="hardnumbers-m2",
    address=lambda options: parse_ollama_host(options.ollama),
)
