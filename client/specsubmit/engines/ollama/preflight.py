"""Ollama's pre-flight: engine version and capability, models present (or pulled), model
identity from /api/tags + /api/show, and a memory check. Raises before anything is
measured; warnings go to the ``RunListener``."""

from __future__ import annotations

import re
import threading
from functools import partial
from typing import Any

from specschema import Fingerprint, ModelInfo, engine_can_honor
from specschema.conclusion import capability_reason
from specsubmit.engines.base import Preflight, PullProgress, RunListener, RunSettings
from specsubmit.engines.memory import available_memory, check_memory
from specsubmit.engines.ollama.client import OllamaClient
from specsubmit.errors import ModelMissing

__all__ = ["MLX_NOTICE", "model_identity", "normalize_model_name", "preflight"]

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_FORMAT = re.compile(r"^[a-z0-9_\-]{1,32}$")
# /api/tags details.format -> the engine runtime Ollama runs it on (ollama-api.md §2 and
# "Read first" 4: safetensors models run on the MLX engine, GGUF ones on llama-server).
RUNTIME_OF_FORMAT = {"safetensors": "mlx", "gguf": "ggml"}
MLX_NOTICE = ("{model} runs on Ollama's MLX engine, where speculation cannot be switched off "
              "per request (draft_num_predict is not read): the baseline speculates too, so "
              "no config of this run can be a speedup (verdict cannot_compare)")


def normalize_model_name(name: str) -> str:
    """Ollama's `name:tag` with the default tag made explicit."""
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


def _str_or_none(value: object, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def model_identity(name: str, tag: dict[str, Any], show: dict[str, Any]) -> ModelInfo:
    details: dict[str, Any] = {}
    for source in (tag.get("details"), show.get("details")):
        if isinstance(source, dict):
            details.update({k: v for k, v in source.items() if v})
    digest = str(tag.get("digest") or "").removeprefix("sha256:").lower()
    size = tag.get("size")
    fmt = str(details.get("format") or "").lower()
    return ModelInfo(
        format=fmt if _FORMAT.match(fmt) else None,
        name=name,
        digest=digest if _DIGEST.match(digest) else None,
        quantization=_str_or_none(details.get("quantization_level")),
        parameter_size=_str_or_none(details.get("parameter_size")),
        family=_str_or_none(details.get("family")),
        size_bytes=size if isinstance(size, int) and not isinstance(size, bool) and size > 0
        else None,
    )


def preflight(client: OllamaClient, settings: RunSettings, fingerprint: Fingerprint,
              listener: RunListener, stop: threading.Event | None = None) -> Preflight:
    protocol, target = settings.protocol, settings.target
    version = client.version()
    listener.phase(f"Ollama {version}")
    can_honor: dict[str, bool | None] = {}
    for config in protocol.configs:
        can_honor[config.name] = engine_can_honor(config.mechanism, version)
        if config.role == "draft" and can_honor[config.name] is False:
            listener.warning(
                f"{config.name}: {capability_reason(config.mechanism, version)}, so this "
                "draft cannot be applied; it is measured anyway (an A/A comparison)"
            )
    needed_models: list[str] = []
    optional_models: list[str] = []
    for config in protocol.configs:
        model = protocol.model_for(config, target)
        if model not in needed_models:
            needed_models.append(model)
        if config.draft_model and config.draft_model not in needed_models:
            if can_honor[config.name] is False:
                optional_models.append(config.draft_model)
            else:
                needed_models.append(config.draft_model)
    tags = {normalize_model_name(str(t.get("name") or t.get("model"))): t for t in client.tags()}
    for model in needed_models:
        if normalize_model_name(model) in tags:
            continue
        if not settings.pull:
            raise ModelMissing(
                f"model '{model}' is not installed in Ollama — run `ollama pull {model}` "
                "or rerun with --pull"
            )
        listener.phase(f"pulling {model}")
        client.pull(model, partial(_pull_progress, listener, model, stop=stop))
        tags = {normalize_model_name(str(t.get("name") or t.get("model"))): t
                for t in client.tags()}
        if normalize_model_name(model) not in tags:
            raise ModelMissing(f"model '{model}' is still missing after pulling it")
    models: list[ModelInfo] = []
    for model in needed_models + [m for m in optional_models if m not in needed_models]:
        tag = tags.get(normalize_model_name(model))
        if tag is None:
            listener.warning(f"{model} is not installed; Ollama ignores it in this protocol, "
                             "so the measurement is the same without it")
            continue
        models.append(model_identity(model, tag, client.show(model)))
    target_model = protocol.model_for(protocol.baseline(), target)
    target_info = next((m for m in models if m.name == target_model), None)
    runtime = RUNTIME_OF_FORMAT.get(target_info.format or "") if target_info else None
    if runtime == "mlx":
        listener.warning(MLX_NOTICE.format(model=target_model))
    sizes = [m.size_bytes for m in models if m.name in needed_models]
    needed = sum(s for s in sizes if s) or None
    if protocol.requirements.memory_bytes:
        needed = max(needed or 0, protocol.requirements.memory_bytes)
    available = available_memory(fingerprint)
    check_memory(needed, available, settings.assume_yes, listener)
    return Preflight(version, models, can_honor, needed, available, engine_name="ollama",
                     runtime=runtime)


def _pull_progress(listener: RunListener, model: str, progress: PullProgress, *,
                   stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise KeyboardInterrupt
    listener.pull_progress(model, progress)
