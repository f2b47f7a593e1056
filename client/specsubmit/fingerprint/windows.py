"""Windows: one PowerShell call for the CIM classes, nvidia-smi for the real VRAM.

Only named properties are selected (never Name of Win32_ComputerSystem, which is the
host name, nor UserName or any serial). ConvertTo-Json turns a single item into an
object and several into an array: both are accepted. Win32_VideoController.AdapterRAM
is a uint32 that saturates near 4 GB, so VRAM comes from nvidia-smi when it can.
"""

from __future__ import annotations

import json
from typing import Any

from specschema import Cpu, Fingerprint, Gpu, OsInfo
from specsubmit.fingerprint import gpu_tools, names
from specsubmit.fingerprint.linux import machine_model, normalize_arch
from specsubmit.fingerprint.probe import HostInfo, Probe

ADAPTER_RAM_CAP = 4293918720
CIM_SCRIPT = (
    "$ErrorActionPreference='SilentlyContinue';"
    "@{"
    "Processor=Get-CimInstance Win32_Processor|Select-Object Name,NumberOfCores,"
    "NumberOfLogicalProcessors;"
    "VideoController=Get-CimInstance Win32_VideoController|Select-Object Name,AdapterRAM,"
    "DriverVersion,AdapterCompatibility;"
    "ComputerSystem=Get-CimInstance Win32_ComputerSystem|Select-Object Manufacturer,Model,"
    "TotalPhysicalMemory;"
    "PhysicalMemory=Get-CimInstance Win32_PhysicalMemory|Select-Object Capacity;"
    "OperatingSystem=Get-CimInstance Win32_OperatingSystem|Select-Object Caption,Version;"
    "Battery=Get-CimInstance Win32_Battery|Select-Object BatteryStatus"
    "}|ConvertTo-Json -Depth 3 -Compress"
)
POWERSHELL_ARGV = ("powershell", "-NoProfile", "-NonInteractive", "-Command", CIM_SCRIPT)


def as_list(value: Any) -> list[dict[str, Any]]:
    """ConvertTo-Json: null, one object, or an array of objects."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    return []


def parse_cim(text: str | None) -> dict[str, list[dict[str, Any]]]:
    try:
        data = json.loads((text or "").lstrip("\ufeff"))
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(key): as_list(value) for key, value in data.items()}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def video_controllers(items: list[dict[str, Any]], smi: list[Gpu]) -> list[Gpu]:
    """CIM adapters, with NVIDIA ones taking memory and driver from nvidia-smi."""
    remaining = list(smi)
    gpus: list[Gpu] = []
    for item in items:
        raw = names.clean(item.get("Name"))
        vendor = names.gpu_vendor(f"{item.get('AdapterCompatibility', '')} {raw or ''}")
        name = names.gpu_name(raw, vendor if vendor in ("nvidia", "amd") else None)
        match = next((gpu for gpu in remaining if gpu.name == name), None)
        if match is not None:
            remaining.remove(match)
            gpus.append(match.model_copy(update={"name_raw": raw}))
            continue
        ram = _int(item.get("AdapterRAM"))
        gpus.append(
            Gpu(
                name_raw=raw,
                name=name,
                vendor=vendor,  # type: ignore[arg-type]
                memory_bytes=names.bounded(ram, 1, ADAPTER_RAM_CAP - 1),
                driver=names.clean(item.get("DriverVersion")),
            )
        )
    return (gpus + remaining)[:16]


_VM_MODELS = (
    ("virtual machine", "microsoft"), ("vmware", "vmware"), ("virtualbox", "oracle"),
    ("kvm", "kvm"), ("qemu", "qemu"), ("standard pc", "qemu"), ("parallels", "parallels"),
)


def _virtualization(system: dict[str, Any] | None) -> str | None:
    if system is None:
        return None
    text = f"{system.get('Manufacturer', '')} {system.get('Model', '')}".lower()
    for marker, name in _VM_MODELS:
        if marker in text:
            return name
    return "none"


def _power(cim: dict[str, list[dict[str, Any]]]) -> str | None:
    if "Battery" not in cim:
        return None
    statuses = [_int(item.get("BatteryStatus")) for item in cim["Battery"]]
    if not statuses:
        return "ac"
    return "battery" if 1 in statuses else "ac"  # 1 = discharging, 2 = on AC, 6-9 charging


def build(host: HostInfo, cim: dict[str, list[dict[str, Any]]], smi: list[Gpu]) -> Fingerprint:
    processors = cim.get("Processor", [])
    processor = processors[0] if processors else {}
    systems = cim.get("ComputerSystem") or []
    system = systems[0] if systems else None
    os_item = (cim.get("OperatingSystem") or [{}])[0]
    installed = sum(_int(item.get("Capacity")) or 0 for item in cim.get("PhysicalMemory", []))
    memory = installed or (_int(system.get("TotalPhysicalMemory")) if system else None)
    gpus = video_controllers(cim.get("VideoController", []), smi) if cim else smi
    brand = names.clean(processor.get("Name"))
    arch = normalize_arch(host.machine)
    main = names.main_gpu(gpus)
    cpu_name = names.cpu_name(brand)
    cores = sum(_int(item.get("NumberOfCores")) or 0 for item in processors)
    threads = sum(_int(item.get("NumberOfLogicalProcessors")) or 0 for item in processors)
    model = None
    if system is not None:
        model = machine_model(names.clean(system.get("Manufacturer")), names.clean(
            system.get("Model")), None)
    return Fingerprint(
        chip=main.name if main else cpu_name,
        machine_model=model,
        cpu=Cpu(brand_raw=brand, name=cpu_name, arch=arch,
                cores_total=names.bounded(cores, 1, names.MAX_CORES),
                threads=names.bounded(threads, 1, names.MAX_THREADS)),
        memory_bytes=names.bounded(memory, 1, names.MAX_BYTES),
        memory_gb=names.marketed_gb(memory),
        unified_memory=False if main else None,
        gpus=gpus,
        os=OsInfo(name="windows", version=names.clean(os_item.get("Version")), arch=arch),
        virtualization=_virtualization(system),
        power_source=_power(cim),  # type: ignore[arg-type]
    )


def collect(probe: Probe, host: HostInfo) -> Fingerprint:
    cim = parse_cim(probe.run(POWERSHELL_ARGV))
    if not cim:  # PowerShell 7 alone is `pwsh`
        cim = parse_cim(probe.run(("pwsh", *POWERSHELL_ARGV[1:])))
    return build(
        host,
        cim,
        gpu_tools.parse_nvidia_smi(probe.run(gpu_tools.NVIDIA_SMI_ARGV)),
    )
