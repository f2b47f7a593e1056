"""Where Ollama put a loaded model, read from `/api/ps` as the `ollama ps` CLI reads it.

`cmd/cmd.go` PROCESSOR column: size_vram == 0 -> "100% CPU"; size_vram == size ->
"100% GPU"; size_vram > size or size == 0 -> "Unknown" (here: not detected, None);
otherwise round(CPU share * 100)% CPU / the rest GPU, e.g. "25%/75% CPU/GPU".
"""

from __future__ import annotations

from typing import Any


def _same_model(entry: dict[str, Any], model: str) -> bool:
    wanted = {model, model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"}
    return any(entry.get(key) in wanted for key in ("name", "model"))


def processor(size: int, size_vram: int) -> tuple[str | None, float | None]:
    if size_vram == 0:
        return "100% CPU", 0.0
    if size_vram == size:
        return "100% GPU", 1.0
    if size_vram > size or size == 0:
        return None, None
    cpu_percent = round((size - size_vram) / size * 100)
    return f"{cpu_percent}%/{100 - cpu_percent}% CPU/GPU", round(size_vram / size, 4)


def backend_from_ps(ps_json: dict[str, Any], model: str) -> tuple[str | None, float | None]:
    """("100% GPU", 1.0), ("100% CPU", 0.0), ("25%/75% CPU/GPU", 0.75) or (None, None)."""
    models = ps_json.get("models") if isinstance(ps_json, dict) else None
    if not isinstance(models, list):
        return None, None
    for entry in models:
        if not isinstance(entry, dict) or not _same_model(entry, model):
            continue
        size, size_vram = entry.get("size"), entry.get("size_vram")
        if type(size) is not int or type(size_vram) is not int or size < 0 or size_vram < 0:
            return None, None  # size_vram is missing before Ollama 0.1.38
        return processor(size, size_vram)
    return None, None
