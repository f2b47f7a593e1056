"""macOS: sysctl, system_profiler, sw_vers and pmset.

Parsers are pure functions over the commands' text. Only named fields are read:
system_profiler also prints serial_number, platform_UUID and provisioning_UDID, which are
never looked at.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from specschema import Cpu, Fingerprint, Gpu, OsInfo
from specsubmit.fingerprint import names
from specsubmit.fingerprint.probe import HostInfo, Probe

# Present on every macOS: asked for in one call.
SYSCTL_KEYS_ALWAYS = (
    "machdep.cpu.brand_string",
    "hw.memsize",
    "hw.model",
    "hw.physicalcpu",
    "hw.logicalcpu",
)
# Missing on Intel Macs or older systems ("sysctl: unknown oid"): one call each, so that
# a missing one cannot take the others down with it.
SYSCTL_KEYS_OPTIONAL = (
    "hw.perflevel0.physicalcpu",
    "hw.perflevel1.physicalcpu",
    "hw.optional.arm64",
    "sysctl.proc_translated",
    "kern.hv_vmm_present",
)
SYSCTL_KEYS = SYSCTL_KEYS_ALWAYS + SYSCTL_KEYS_OPTIONAL
SYSCTL_ARGVS = (("sysctl", *SYSCTL_KEYS_ALWAYS),) + tuple(
    ("sysctl", key) for key in SYSCTL_KEYS_OPTIONAL)
SYSTEM_PROFILER_ARGV = ("system_profiler", "SPHardwareDataType", "SPDisplaysDataType", "-json")
SW_VERS_ARGV = ("sw_vers",)
PMSET_ARGV = ("pmset", "-g", "batt")


def parse_sysctl(text: str | None) -> dict[str, str]:
    """`key: value` lines (unknown oids go to stderr and are simply absent)."""
    values: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in SYSCTL_KEYS:
            values[key.strip()] = value.strip()
    return values


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        return int(value)
    return None


def _size_bytes(text: object) -> int | None:
    """'24 GB' / '1536 MB' as bytes (binary units, as macOS means them)."""
    if not isinstance(text, str):
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT])B\s*", text)
    if not match:
        return None
    power = "KMGT".index(match.group(2)) + 1
    return int(float(match.group(1)) * 1024**power)


@dataclass(frozen=True)
class ProfilerHardware:
    chip_raw: str | None = None
    cpu_type: str | None = None
    machine_model: str | None = None
    cores_total: int | None = None
    cores_performance: int | None = None
    cores_efficiency: int | None = None
    memory_bytes: int | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)


def parse_number_processors(value: object) -> tuple[int | None, int | None, int | None]:
    """'proc 8:4:4' -> (8, 4, 4); 'proc 12:0:8:4' -> (12, None, None); 2 -> (2, None, None)."""
    as_int = _int(value)
    if as_int is not None:
        return as_int, None, None
    if not isinstance(value, str):
        return None, None, None
    parts = [_int(part) for part in value.removeprefix("proc").strip().split(":")]
    if not parts or parts[0] is None:
        return None, None, None
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return parts[0], None, None


def parse_system_profiler(text: str | None) -> ProfilerHardware:
    try:
        data = json.loads(text or "")
    except ValueError:
        return ProfilerHardware()
    if not isinstance(data, dict):
        return ProfilerHardware()
    hardware = data.get("SPHardwareDataType")
    hw: dict[str, Any] = hardware[0] if isinstance(hardware, list) and hardware and isinstance(
        hardware[0], dict) else {}
    displays = data.get("SPDisplaysDataType")
    items = displays if isinstance(displays, list) else []
    gpus = [item for item in items if isinstance(item, dict)]
    chip = names.clean(hw.get("chip_type"))
    # On Intel Macs number_processors counts packages (1), not cores.
    total, perf, eff = parse_number_processors(hw.get("number_processors")) if chip else (
        None, None, None)
    return ProfilerHardware(
        chip_raw=chip,
        cpu_type=names.clean(hw.get("cpu_type")),
        machine_model=names.clean(hw.get("machine_model")),
        cores_total=total,
        cores_performance=perf,
        cores_efficiency=eff,
        memory_bytes=_size_bytes(hw.get("physical_memory")),
        gpus=gpus,
    )


def _metal_family(item: dict[str, Any]) -> str | None:
    raw = names.clean(item.get("spdisplays_mtlgpufamilysupport")) or names.clean(
        item.get("spdisplays_metal") or item.get("spdisplays_metalfamily"))
    if raw is None:
        return None
    return raw.removeprefix("spdisplays_")


def parse_display(item: dict[str, Any], soc: str | None) -> Gpu:
    raw = names.clean(item.get("sppci_model")) or names.clean(item.get("_name"))
    vendor_raw = str(item.get("spdisplays_vendor", "")).lower()
    chip = names.apple_chip(raw) if raw else None
    if chip is not None or "apple" in vendor_raw:
        vendor = "apple"
        canonical = chip or names.clean(raw) or soc  # a VM's "Apple Paravirtual device" stays
        memory = None  # unified: the GPU shares system memory
    else:
        vendor = names.gpu_vendor(f"{vendor_raw} {raw or ''}") or "other"
        canonical = names.gpu_name(raw, vendor if vendor in ("nvidia", "amd") else None)
        memory = _size_bytes(item.get("spdisplays_vram") or item.get("_spdisplays_vram"))
    cores = _int(item.get("sppci_cores"))
    return Gpu(
        name_raw=raw,
        name=canonical,
        vendor=vendor,  # type: ignore[arg-type]
        memory_bytes=names.bounded(memory, 1, names.MAX_BYTES),
        compute_cores=names.bounded(cores, 1, names.MAX_GPU_CORES),
        metal_family=_metal_family(item),
    )


def parse_sw_vers(text: str | None) -> str | None:
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "ProductVersion":
            return names.clean(value)
    return None


def parse_pmset(text: str | None) -> str | None:
    match = re.search(r"Now drawing from '([^']+)'", text or "")
    if not match:
        return None
    return {"AC Power": "ac", "Battery Power": "battery"}.get(match.group(1))


def _virtualization(sysctl: dict[str, str], model: str | None) -> str | None:
    if not sysctl:
        return None
    if sysctl.get("sysctl.proc_translated") == "1":
        return "rosetta"
    lowered = (model or "").lower()
    vms = (("vmware", "vmware"), ("parallels", "parallels"), ("virtualbox", "oracle"))
    for marker, name in vms:
        if marker in lowered:
            return name
    if sysctl.get("kern.hv_vmm_present") == "1" or lowered.startswith("virtualmac"):
        return "apple-virtualization"
    return "none"


def build(
    sysctl: dict[str, str],
    hardware: ProfilerHardware,
    os_version: str | None,
    power_source: str | None,
) -> Fingerprint:
    brand = names.clean(sysctl.get("machdep.cpu.brand_string"))
    soc = names.apple_chip(hardware.chip_raw) or names.apple_chip(brand)
    apple_silicon = soc is not None or sysctl.get("hw.optional.arm64") == "1"
    arch = "arm64" if apple_silicon else ("x86_64" if sysctl or hardware.cpu_type else None)
    gpus = [parse_display(item, soc) for item in hardware.gpus][:16]
    model = names.clean(sysctl.get("hw.model")) or hardware.machine_model
    memory = names.bounded(_int(sysctl.get("hw.memsize")) or hardware.memory_bytes, 1,
                           names.MAX_BYTES)
    perf = _int(sysctl.get("hw.perflevel0.physicalcpu"))
    eff = _int(sysctl.get("hw.perflevel1.physicalcpu"))
    if apple_silicon and perf is None:
        perf, eff = hardware.cores_performance, hardware.cores_efficiency
    cpu = Cpu(
        brand_raw=brand or hardware.chip_raw or hardware.cpu_type,
        name=soc if apple_silicon else names.cpu_name(brand),
        arch=arch,
        cores_total=names.bounded(_int(sysctl.get("hw.physicalcpu")) or hardware.cores_total,
                                  1, names.MAX_CORES),
        cores_performance=names.bounded(perf, 0, names.MAX_CORES) if apple_silicon else None,
        cores_efficiency=names.bounded(eff, 0, names.MAX_CORES) if apple_silicon else None,
        threads=names.bounded(_int(sysctl.get("hw.logicalcpu")), 1, names.MAX_THREADS),
    )
    # Ollama has no GPU backend on Intel Macs: there the CPU is what runs the model.
    chip = soc if apple_silicon else cpu.name
    if apple_silicon:
        unified: bool | None = True
    else:
        unified = False if any(gpu.vendor in ("amd", "nvidia") for gpu in gpus) else None
    return Fingerprint(
        chip=chip,
        machine_model=model,
        cpu=cpu,
        memory_bytes=memory,
        memory_gb=names.marketed_gb(memory),
        unified_memory=unified,
        gpus=gpus,
        os=OsInfo(name="macos", version=os_version, arch=arch),
        virtualization=_virtualization(sysctl, model),
        power_source=power_source,  # type: ignore[arg-type]
    )


def collect(probe: Probe, host: HostInfo) -> Fingerprint:
    del host  # under Rosetta Python reports x86_64: sysctl knows better
    return build(
        parse_sysctl("\n".join(probe.run(argv) or "" for argv in SYSCTL_ARGVS)),
        parse_system_profiler(probe.run(SYSTEM_PROFILER_ARGV)),
        parse_sw_vers(probe.run(SW_VERS_ARGV)),
        parse_pmset(probe.run(PMSET_ARGV)),
    )
