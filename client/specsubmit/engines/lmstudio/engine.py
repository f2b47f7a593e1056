"""LM Studio behind the runner's ``Engine`` interface (its API: ``api.py``).

One server for the whole run, reached at ``--engine-url`` (default ``lms server start``'s
``http://127.0.0.1:1234``); the client never starts or stops it. A config's speculation is
a request field: the baseline sends none, a draft config sends ``draft_model`` (the
protocol's ``request_fields``), and each response says what happened in its ``stats``
(``total_draft_tokens_count`` / ``accepted_draft_tokens_count``: the trial's counters,
source ``engine_api``). The models come from ``GET /api/v1/models``; the version recorded is
the runtime's (``runtime.version`` of the responses, the build its ``runtime.name``): the
API reports no app version, so what the app can honour is decided by the counters (the
descriptor in ``specschema.engines``).

The context length is a load setting in LM Studio (``lms load --context-length``), not a
request field: the protocol's ``num_ctx`` is compared with the loaded instance's and a
difference is a warning, never sent.
"""

from __future__ import annotations

import threading
from typing import Any

from specschema import Engine, Fingerprint, ModelInfo, engine_can_honor
from specschema.protocol import ProtocolConfig
from specsubmit.engines.base import (
    EngineName,
    EngineReport,
    Generation,
    Preflight,
    RunListener,
    RunSettings,
    wire_version,
)
from specsubmit.engines.lmstudio.api import LMStudioApi
from specsubmit.engines.memory import available_memory, check_memory
from specsubmit.errors import EngineModelMissing, UsageError
from specsubmit.outside_text import visible

# Protocol option -> chat completion field (1_developer/3_openai-compat/chat-completions.md
# lists these as supported payload parameters).
REQUEST_OPTIONS = {"num_predict": "max_tokens", "temperature": "temperature", "seed": "seed",
                   "top_k": "top_k", "top_p": "top_p", "repeat_penalty": "repeat_penalty"}
LOAD_OPTIONS = {"num_ctx"}  # set when a model is loaded (`lms load --context-length`)
RUNTIME_OF_FORMAT = {"gguf": "ggml", "mlx": "mlx"}
VERSION_UNKNOWN = "unknown"  # until the first response names its runtime


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def model_identity(key: str, listed: dict[str, Any]) -> ModelInfo:
    """A ``GET /api/v1/models`` entry as the wire's ModelInfo (LM Studio lists no digest)."""
    quantization = listed.get("quantization")
    quant = quantization.get("name") if isinstance(quantization, dict) else None
    fmt = listed.get("format")

    def text(value: object) -> str | None:
        return value[:200] if isinstance(value, str) and value else None

    return ModelInfo(
        name=key[:120], quantization=text(quant), parameter_size=text(listed.get("params_string")),
        family=text(listed.get("architecture")), size_bytes=_positive_int(listed.get("size_bytes")),
        format=fmt if fmt in RUNTIME_OF_FORMAT else None,
    )


class LMStudioEngine:
    """The run's requests against one LM Studio server (the API client is the caller's)."""

    name: EngineName = "lmstudio"
    per_config_start = False
    load_time_options: frozenset[str] = frozenset()  # LM Studio reloads for none of ours

    def __init__(self, api: LMStudioApi, settings: RunSettings) -> None:
        self.api, self.settings, self.protocol = api, settings, settings.protocol
        self.runtime_name: str | None = None
        self.runtime_version: str | None = None
        self.models_loaded: dict[str, list[str]] = {}
        self.other_drafts: dict[str, set[str]] = {}  # a draft config's stats named another

    def _target(self, config: ProtocolConfig) -> str:
        return self.protocol.model_for(config, self.settings.target)

    def _check_options(self) -> None:
        known = set(REQUEST_OPTIONS) | LOAD_OPTIONS
        for config in self.protocol.configs:
            unknown = sorted(set(self.protocol.request_options(config)) - known)
            if unknown:
                raise UsageError(f"protocol {self.protocol.id} sets {', '.join(unknown)}, "
                                 "which LM Studio has no request field for")
            if config.role == "draft" and config.request_fields.get("draft_model") != (
                    config.draft_model or None):
                raise UsageError(f"{config.name}: an LM Studio draft config sends its "
                                 "draft_model as a request field")

    def preflight(self, fingerprint: Fingerprint, listener: RunListener,
                  stop: threading.Event | None = None) -> Preflight:
        self._check_options()
        listed = {str(m.get("key")): m for m in self.api.models() if m.get("type") == "llm"}
        listener.phase(f"LM Studio at {self.api.base_url} ({len(listed)} models)")
        target = self._target(self.protocol.baseline())
        names = [target] + [c.draft_model for c in self.protocol.configs if c.draft_model]
        models: list[ModelInfo] = []
        for name in dict.fromkeys(names):
            if name not in listed:
                raise EngineModelMissing(
                    f"model '{visible(name, 120)}' is not in LM Studio — download it with "
                    f"`lms get {visible(name, 120)}`")
            models.append(model_identity(name, listed[name]))
        wanted_ctx = self.protocol.options.num_ctx
        for instance in listed[target].get("loaded_instances") or []:
            config = instance.get("config") if isinstance(instance, dict) else None
            ctx = config.get("context_length") if isinstance(config, dict) else None
            if isinstance(ctx, int) and ctx != wanted_ctx:
                listener.warning(f"{target} is loaded with a context of {ctx} tokens, the "
                                 f"protocol's is {wanted_ctx}: reload it with `lms load "
                                 f"{target} --context-length {wanted_ctx}`")
        can_honor = {c.name: engine_can_honor(c.mechanism, VERSION_UNKNOWN, self.name)
                     for c in self.protocol.configs}
        drafts = [m.size_bytes or 0 for m in models if m.name != target]
        needed = (models[0].size_bytes or 0) + max(drafts, default=0) or None
        if self.protocol.requirements.memory_bytes:
            needed = max(needed or 0, self.protocol.requirements.memory_bytes)
        available = available_memory(fingerprint)
        check_memory(needed, available, self.settings.assume_yes, listener)
        return Preflight(VERSION_UNKNOWN, models, can_honor, needed, available,
                         engine_name=self.name,
                         runtime=RUNTIME_OF_FORMAT.get(models[0].format or ""))

    def request_body(self, config: ProtocolConfig, prompt: str | None = None, *,
                     warmup: bool = False) -> dict[str, Any]:
        options = self.protocol.request_options(config, warmup=warmup)
        content = self.protocol.prompt if prompt is None else prompt
        body: dict[str, Any] = {
            "model": self._target(config),
            "messages": [{"role": "user", "content": content}],
            "stream": False,
        }
        body.update({REQUEST_OPTIONS[k]: v for k, v in options.items() if k in REQUEST_OPTIONS})
        body.update(config.request_fields)
        return body

    def begin_config(self, config: ProtocolConfig, listener: RunListener) -> None:
        """Nothing to start: the draft is a request field."""

    def generate(self, config: ProtocolConfig, *, counted: bool,
                 prompt: str | None = None) -> Generation:
        reply = self.api.chat(self.request_body(config, prompt, warmup=not counted))
        self.runtime_name = reply.runtime_name or self.runtime_name
        self.runtime_version = reply.runtime_version or self.runtime_version
        loaded = self.models_loaded.setdefault(config.name, [])
        for name in (self._target(config), reply.draft_model):
            if name and name not in loaded and len(loaded) < 16:
                loaded.append(name)
        if reply.draft_model and reply.draft_model != config.draft_model:
            self.other_drafts.setdefault(config.name, set()).add(reply.draft_model)
        return reply.generation

    def end_config(self, config: ProtocolConfig, *, last: bool) -> None:
        """The server stays up: it is the contributor's."""

    def report(self, pre: Preflight, listener: RunListener) -> EngineReport:
        for name, drafts in self.other_drafts.items():
            listener.warning(f"{name}: LM Studio's stats name the draft "
                             f"{visible(', '.join(sorted(drafts)), 200)}, not "
                             f"{self.protocol.config(name).draft_model or 'none'}")
        return EngineReport(models_loaded=self.models_loaded, build=self.runtime_name,
                            version=self.runtime_version, runtime=pre.runtime)

    def wire_engine(self, pre: Preflight, report: EngineReport) -> tuple[Engine, str | None]:
        """The runtime's version and name (the API reports no app version), ggml or mlx by
        the target's format; no log."""
        runtime = report.runtime if report.runtime in ("ggml", "mlx") else None
        return Engine(name=self.name, version=wire_version(report.version or pre.engine_version),
                      build=report.build, runtime=runtime), None  # type: ignore[arg-type]

    def close(self) -> None:
        """The API client belongs to the caller, who closes it."""
