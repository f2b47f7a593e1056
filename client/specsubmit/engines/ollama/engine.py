"""Ollama behind the runner's ``Engine`` interface.

One server for the whole run (the speculative settings are request options), a pre-flight
from ``run.preflight``, and the acceptance counters read from the server log after the
trials, attributed to the request that produced them by byte offset (``serverlog``).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from specschema import Fingerprint
from specschema.protocol import ProtocolConfig
from specsubmit.engines.base import EngineName, EngineReport, Generation, Preflight, RunListener
from specsubmit.engines.ollama.client import GenerateRequest, OllamaClient
from specsubmit.engines.ollama.serverlog import (
    DraftCounters,
    Segment,
    log_size,
    read_counters,
    wait_for_quiet_log,
)
from specsubmit.run.evidence import unrequested
from specsubmit.run.preflight import preflight
from specsubmit.run.settings import RunSettings


class OllamaEngine:
    """The run's requests against one Ollama server (the client is the caller's)."""

    name: EngineName = "ollama"
    per_config_start = False

    def __init__(self, client: OllamaClient, settings: RunSettings) -> None:
        self.client, self.settings = client, settings
        self.protocol = settings.protocol
        self.segments: list[Segment] = []
        self.ps_after: dict[str, list[dict[str, Any]]] = {}
        self.models_loaded: dict[str, list[str]] = {}

    def preflight(self, fingerprint: Fingerprint, listener: RunListener,
                  stop: threading.Event | None = None) -> Preflight:
        return preflight(self.client, self.settings, fingerprint, listener, stop)

    def request(self, config: ProtocolConfig) -> GenerateRequest:
        return GenerateRequest(
            model=self.protocol.model_for(config, self.settings.target),
            prompt=self.protocol.prompt,
            options=self.protocol.request_options(config),
            keep_alive=self.protocol.keep_alive,
            extra_fields=dict(config.request_fields),
        )

    def begin_config(self, config: ProtocolConfig, listener: RunListener) -> None:
        """Nothing to start: the config is in each request's options."""

    def generate(self, config: ProtocolConfig, *, counted: bool) -> Generation:
        path = self.settings.log_path
        offset = log_size(path) if path else None
        self.segments.append(Segment(config.name, counted, offset, datetime.now(UTC)))
        generation = self.client.generate(self.request(config))
        if path is not None and self.settings.log_settle_s > 0:
            wait_for_quiet_log(path, self.settings.log_settle_s)
        return generation

    def end_config(self, config: ProtocolConfig, *, last: bool) -> None:
        """After a config's last trial: what Ollama has loaded (``/api/ps``)."""
        if not last:
            return
        ps = self.client.ps()
        self.ps_after[config.name] = ps
        names = (str(m.get("name") or m.get("model") or "") for m in ps)
        self.models_loaded[config.name] = [n for n in names if 0 < len(n) <= 120][:16]

    def report(self, pre: Preflight, listener: RunListener) -> EngineReport:
        counters, log_read = self._counters(pre, listener)
        return EngineReport(counters=counters, log_read=log_read,
                            models_loaded=self.models_loaded, ps_after=self.ps_after)

    def _counters(self, pre: Preflight, listener: RunListener
                  ) -> tuple[dict[str, DraftCounters], bool | None]:
        could_speculate = any(
            c.role == "draft" and pre.can_honor[c.name] is not False
            for c in self.protocol.configs
        )
        path = self.settings.log_path
        if path is None:
            if could_speculate:
                listener.warning("no Ollama server log given (--ollama-log): speculation can "
                                 "be neither confirmed nor ruled out by its counters")
            return {}, None
        found = read_counters(path, self.segments)
        if found is None:
            if could_speculate:
                listener.warning(f"cannot read the Ollama server log at {path}: "
                                 "speculation can be neither confirmed nor ruled out")
            return {}, False
        for name in unrequested(self.protocol.configs, pre.can_honor, found):
            listener.warning(
                f"the server log shows speculation during {name} ({found[name].drafted} "
                "tokens drafted), which this config does not ask for: the model speculates "
                "by itself (MTP layers or a DRAFT), so every config may include it"
            )
        return found, True

    def close(self) -> None:
        """The client belongs to the caller, who closes it."""

