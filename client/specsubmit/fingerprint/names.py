"""Canonical hardware names and sizes: pure functions from raw strings.

The aggregation key (``chip``) must read the same whichever tool reported it, so that
"GeForce RTX 3090" from an old driver and "NVIDIA GeForce RTX 3090" from a new one, or
"Radeon RX 7900 XTX" and "AMD Radeon RX 7900 XTX", land in one group.
"""

from __future__ import annotations

import math
import re

from specschema import Gpu

GIB = 1024**3

# Marketed memory sizes in GB. The OS reports less than is installed (firmware, iGPU and
# kernel reservations), so a reading maps to the smallest marketed size that holds it.
MARKETED_GB = (
    1, 2, 3, 4, 6, 8, 12, 16, 18, 20, 24, 32, 36, 40, 48, 64, 72, 80, 96, 128, 144, 192,
    256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384,
)

# /proc/cpuinfo on ARM: "CPU implementer" and "CPU part" (from the Linux kernel's
# arch/arm64/include/asm/cputype.h and util-linux lscpu-arm.c).
ARM_IMPLEMENTERS: dict[int, str] = {
    0x41: "ARM", 0x42: "Broadcom", 0x43: "Cavium", 0x46: "Fujitsu", 0x48: "HiSilicon",
    0x4E: "NVIDIA", 0x50: "APM", 0x51: "Qualcomm", 0x53: "Samsung", 0x61: "Apple",
    0x6D: "Microsoft", 0xC0: "Ampere",
}
ARM_PARTS: dict[tuple[int, int], str] = {
    (0x41, 0xD03): "Cortex-A53", (0x41, 0xD04): "Cortex-A35", (0x41, 0xD05): "Cortex-A55",
    (0x41, 0xD07): "Cortex-A57", (0x41, 0xD08): "Cortex-A72", (0x41, 0xD09): "Cortex-A73",
    (0x41, 0xD0A): "Cortex-A75", (0x41, 0xD0B): "Cortex-A76", (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD0D): "Cortex-A77", (0x41, 0xD40): "Neoverse-V1", (0x41, 0xD41): "Cortex-A78",
    (0x41, 0xD44): "Cortex-X1", (0x41, 0xD46): "Cortex-A510", (0x41, 0xD47): "Cortex-A710",
    (0x41, 0xD48): "Cortex-X2", (0x41, 0xD49): "Neoverse-N2", (0x41, 0xD4B): "Cortex-A78C",
    (0x41, 0xD4D): "Cortex-A715", (0x41, 0xD4E): "Cortex-X3", (0x41, 0xD4F): "Neoverse-V2",
    (0x41, 0xD80): "Cortex-A520", (0x41, 0xD81): "Cortex-A720", (0x41, 0xD82): "Cortex-X4",
    (0x41, 0xD84): "Neoverse-V3", (0x41, 0xD8E): "Neoverse-N3",
    (0x46, 0x001): "A64FX", (0x48, 0xD01): "Kunpeng-920", (0xC0, 0xAC3): "Ampere-1",
    (0xC0, 0xAC4): "Ampere-1a", (0x51, 0x001): "Oryon",
    (0x61, 0x022): "M1 Icestorm", (0x61, 0x023): "M1 Firestorm",
    (0x61, 0x032): "M2 Blizzard", (0x61, 0x033): "M2 Avalanche",
}

_SPACES = re.compile(r"\s+")


def _squash(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def clean(value: object, limit: int = 200) -> str | None:
    """A usable raw string: stripped, non-empty, not a placeholder, at most `limit` chars."""
    if not isinstance(value, str):
        return None
    text = _squash(value)
    if not text or text.lower() in _PLACEHOLDERS or text.startswith("[N/A"):
        return None
    return text[:limit]


_PLACEHOLDERS = {
    "n/a", "none", "unknown", "default string", "to be filled by o.e.m.", "system product name",
    "system manufacturer", "not specified", "not applicable", "o.e.m.", "oem",
}


MAX_BYTES = 2**50
MAX_CORES = 4096
MAX_THREADS = 8192
MAX_GPU_CORES = 1_000_000


def bounded(value: int | None, low: int, high: int) -> int | None:
    """The value when it lies in [low, high] (the wire format's bounds), else None."""
    if value is None or isinstance(value, bool) or not low <= value <= high:
        return None
    return value


def marketed_gb(memory_bytes: int | None) -> int | None:
    """24 for 25769803776 bytes; 32 for a Linux MemTotal of 31.2 GiB; None when unknown."""
    if bounded(memory_bytes, 1, MAX_BYTES) is None or memory_bytes is None:
        return None
    gib = memory_bytes / GIB
    if round(gib) >= 1 and abs(memory_bytes - round(gib) * GIB) <= 16 * 1024**2:
        return round(gib)  # an exact reading (macOS hw.memsize, installed DIMMs)
    for size in MARKETED_GB:
        if gib <= size:
            return size
    return math.ceil(gib)


def apple_chip(raw: str | None) -> str | None:
    """'Apple M3 Pro' from 'Apple M3 Pro', 'Apple M1 (Virtual)' or 'kHW_AppleM1Item'."""
    if raw is None:
        return None
    text = _squash(raw)
    item = re.fullmatch(r"kHW_Apple(M\d+)(Pro|Max|Ultra)?Item", text)
    if item:
        return _squash(f"Apple {item.group(1)} {item.group(2) or ''}")
    match = re.search(r"\bApple (M\d+)(?: (Pro|Max|Ultra))?\b", text)
    if match:
        return _squash(f"Apple {match.group(1)} {match.group(2) or ''}")
    return None


def cpu_name(raw: str | None) -> str | None:
    """'Intel Core i9-9980HK' from 'Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz',
    'AMD Ryzen 9 7950X' from 'AMD Ryzen 9 7950X 16-Core Processor'."""
    if raw is None:
        return None
    chip = apple_chip(raw)
    if chip is not None:
        return chip
    text = re.sub(r"\((?:R|TM|tm|r)\)|®|™", "", raw)
    text = re.sub(r"\s+@\s+[\d.]+\s*[GM]Hz.*$", "", text)
    text = re.sub(r"\b\d+-Core Processor\b|\bProcessor\b|\bCPU\b", "", text)
    text = re.sub(r"\bwith Radeon .*$", "", text)
    return clean(text)


def gpu_name(raw: str | None, vendor: str | None = None) -> str | None:
    """Vendor-prefixed canonical GPU name."""
    text = clean(raw)
    if text is None:
        return None
    chip = apple_chip(text)
    if chip is not None:
        return chip
    bracket = re.search(r"\[([^\]]+)\]", text)
    if bracket and ("Radeon" in bracket.group(1) or "GeForce" in bracket.group(1)):
        text = bracket.group(1)  # lspci/rocm style "Navi 31 [Radeon RX 7900 XTX]"
    text = re.sub(r"\((?:R|TM)\)", "", text)
    text = re.sub(r"^Advanced Micro Devices,? Inc\.?\s*", "AMD ", text)
    text = _squash(text)
    guessed = vendor or gpu_vendor(text)
    if guessed == "nvidia" and not text.upper().startswith("NVIDIA"):
        text = f"NVIDIA {text}"
    if guessed == "amd" and not text.upper().startswith("AMD"):
        text = f"AMD {text}"
    return clean(text)


def gpu_vendor(text: str | None) -> str | None:
    if text is None:
        return None
    lowered = text.lower()
    if "nvidia" in lowered or re.search(r"geforce|quadro|tesla|rtx|gtx", lowered):
        return "nvidia"
    if re.search(r"\bamd\b|radeon|advanced micro devices|\bati\b", lowered):
        return "amd"
    if "intel" in lowered:
        return "intel"
    if "apple" in lowered:
        return "apple"
    return "other"


def arm_cpu_name(pairs: list[tuple[int, int]]) -> str | None:
    """'ARM Cortex-A76 + Cortex-A55' from the distinct (implementer, part) pairs."""
    names: list[str] = []
    vendor: str | None = None
    for implementer, part in pairs:
        vendor = vendor or ARM_IMPLEMENTERS.get(implementer, f"ARM implementer {implementer:#x}")
        name = ARM_PARTS.get((implementer, part), f"part {part:#05x}")
        if name not in names:
            names.append(name)
    if vendor is None:
        return None
    return clean(f"{vendor} {' + '.join(names)}")


def main_gpu(gpus: list[Gpu]) -> Gpu | None:
    """The GPU Ollama will use: NVIDIA first, then AMD, then Intel Arc; the largest memory."""
    ranked = [
        gpu
        for gpu in gpus
        if gpu.vendor in ("nvidia", "amd")
        or (gpu.vendor == "intel" and "arc" in (gpu.name or "").lower().split())
    ]
    if not ranked:
        return None
    order = {"nvidia": 0, "amd": 1, "intel": 2}
    return min(ranked, key=lambda gpu: (order[gpu.vendor or "intel"], -(gpu.memory_bytes or 0)))
