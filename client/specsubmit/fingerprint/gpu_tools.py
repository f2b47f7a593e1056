"""nvidia-smi and rocm-smi: the vendor tools that know a discrete GPU's name and VRAM.

Only name, memory and driver are asked for; never the UUID, serial or bus id.
"""

from __future__ import annotations

import json
import re
from typing import Any

from specschema import Gpu
from specsubmit.fingerprint import names

MIB = 1024**2
NVIDIA_SMI_ARGV = (
    "nvidia-smi",
    "--query-gpu=name,memory.total,driver_version",
    "--format=csv,noheader,nounits",
)
ROCM_SMI_ARGV = ("rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json")


def parse_nvidia_smi(text: str | None) -> list[Gpu]:
    """One CSV line per GPU: `NVIDIA GeForce RTX 4090, 24564, 550.54.14` (MiB)."""
    gpus: list[Gpu] = []
    for line in (text or "").splitlines():
        fields = [part.strip() for part in line.split(",")]
        if len(fields) < 3 or not re.fullmatch(r"\d+", fields[1]):
            continue  # "NVIDIA-SMI has failed ...", "No devices were found", [N/A] memory
        raw = names.clean(fields[0])
        if raw is None:
            continue
        gpus.append(
            Gpu(
                name_raw=raw,
                name=names.gpu_name(raw, "nvidia"),
                vendor="nvidia",
                memory_bytes=names.bounded(int(fields[1]) * MIB, 1, names.MAX_BYTES),
                driver=names.clean(fields[2]),
            )
        )
    return gpus[:16]


def _folded(entry: dict[str, Any]) -> dict[str, Any]:
    return {str(key).strip().lower(): value for key, value in entry.items()}


def _json_object(text: str) -> Any:
    start = text.find("{")  # rocm-smi may print warnings before the JSON
    if start < 0:
        return None
    try:
        return json.loads(text[start:])
    except ValueError:
        return None


def parse_rocm_smi(text: str | None) -> list[Gpu]:
    """`{"card0": {"Card Series": ..., "VRAM Total Memory (B)": ...}}`; keys in any case."""
    data = _json_object(text or "")
    if not isinstance(data, dict):
        return []
    gpus: list[Gpu] = []
    for card, entry in sorted(data.items(), key=lambda item: _card_number(item[0])):
        if not re.fullmatch(r"card\d+", str(card).lower()) or not isinstance(entry, dict):
            continue  # e.g. the "system" key
        fields = _folded(entry)
        raw = names.clean(fields.get("card series")) or names.clean(fields.get("market name"))
        if raw is None or re.fullmatch(r"0x[0-9a-fA-F]+", raw):
            raw = names.clean(fields.get("card sku")) or raw
        vram = fields.get("vram total memory (b)")
        memory = int(vram) if isinstance(vram, str) and vram.strip().isdigit() else None
        gpus.append(
            Gpu(
                name_raw=raw,
                name=names.gpu_name(raw, "amd"),
                vendor="amd",
                memory_bytes=names.bounded(memory, 1, names.MAX_BYTES),
                driver=names.clean(fields.get("driver version")),
            )
        )
    return gpus[:16]


def _card_number(key: object) -> int:
    match = re.search(r"\d+", str(key))
    return int(match.group()) if match else 1 << 30
