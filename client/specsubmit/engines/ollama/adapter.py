"""Ollama as the client runs it: reached at ``--ollama`` (``OLLAMA_HOST``), never started."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from specsubmit.engines.base import DEFAULT_TIMEOUT_S, Adapter, Engine, Flag, RunSettings
from specsubmit.engines.ollama.client import OllamaClient
from specsubmit.engines.ollama.engine import OllamaEngine, OllamaLog
from specsubmit.engines.ollama.host import parse_ollama_host


@dataclass(frozen=True)
class OllamaOptions:
    """What the command line says about the Ollama server a run reaches."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    host: str | None = None  # --ollama, parsed like OLLAMA_HOST
    log: str | None = None  # --ollama-log: a path or a command
    no_log: bool = False  # --no-log: run without the server log (drafts stay unconfirmed)


def _check(options: OllamaOptions) -> None:
    parse_ollama_host(options.host)


@contextlib.contextmanager
def _open(settings: RunSettings, options: OllamaOptions) -> Iterator[Engine]:
    with OllamaClient(parse_ollama_host(options.host), timeout_s=options.timeout_s) as client:
        log = OllamaLog.from_option(options.log)
        if options.no_log:
            log = dataclasses.replace(log, accept_missing=True)
        yield OllamaEngine(client, settings, log)


ADAPTER: Adapter[OllamaOptions] = Adapter(
    name="ollama", summary="ollama (the running Ollama server)",
    flags=(Flag("--ollama", "host", ambient=True), Flag("--ollama-log", "log", ambient=True),
           Flag("--no-log", "no_log")),
    options=OllamaOptions, open=_open, check=_check, default_protocol="hardnumbers-m2",
    address=lambda options: parse_ollama_host(options.host),
)
