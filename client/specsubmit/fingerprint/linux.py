"""Linux: /proc, /sys, nvidia-smi, rocm-smi and systemd-detect-virt.

Only named fields are read. /proc/cpuinfo on a Raspberry Pi carries a `Serial` line and
/sys/class/dmi/id holds product_serial and product_uuid: none of them is ever opened or kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specschema import Cpu, Fingerprint, Gpu, OsInfo
from specsubmit.fingerprint import gpu_tools, names
from specsubmit.fingerprint.probe import HostInfo, Probe

POWER_SUPPLY_DIR = "/sys/class/power_supply"
DETECT_VIRT_ARGV = ("systemd-detect-virt",)


@dataclass(frozen=True)
class CpuInfo:
    brand_raw: str | None = None
    arm_parts: tuple[tuple[int, int], ...] = ()
    threads: int | None = None
    cores: int | None = None
    hypervisor_flag: bool | None = None
    board_model: str | None = None


def _hex(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        return None


def _blocks(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per blank-line-separated block, keys lower-cased."""
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if blocks[-1]:
                blocks.append({})
            continue
        blocks[-1].setdefault(key.strip().lower(), value.strip())
    return [block for block in blocks if block]


def parse_cpuinfo(text: str | None) -> CpuInfo:
    if not text:
        return CpuInfo()
    blocks = _blocks(text)
    processors = [block for block in blocks if block.get("processor", "").isdigit()]
    brand = next((names.clean(b["model name"]) for b in blocks if "model name" in b), None)
    board = next(
        (names.clean(b["model"]) for b in blocks if not b.get("model", "0").isdigit()), None)
    cores = {(b.get("physical id", ""), b["core id"]) for b in processors if "core id" in b}
    parts: list[tuple[int, int]] = []
    for block in processors:
        implementer = _hex(block.get("cpu implementer"))
        part = _hex(block.get("cpu part"))
        if implementer is not None and part is not None and (implementer, part) not in parts:
            parts.append((implementer, part))
    flag_lines = [b["flags"].split() for b in processors if "flags" in b]
    return CpuInfo(
        brand_raw=brand,
        arm_parts=tuple(parts),
        threads=len(processors) or None,
        cores=len(cores) or None,
        hypervisor_flag=any("hypervisor" in flags for flags in flag_lines) if flag_lines else None,
        board_model=board,
    )


def parse_meminfo(text: str | None) -> int | None:
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text or "", re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def parse_power_supplies(supplies: dict[str, dict[str, str]]) -> str | None:
    """{name: {"type": "Mains", "online": "1"}, ...} -> "ac" / "battery".

    A machine with no battery is on mains; with a battery it is on battery only when no
    mains supply is online and the battery is discharging."""
    batteries = [s for s in supplies.values() if s.get("type") == "Battery"]
    mains = [s for s in supplies.values() if s.get("type") in ("Mains", "USB", "USB_C")]
    if any(s.get("online") == "1" for s in mains):
        return "ac"
    if any(s.get("status") == "Discharging" for s in batteries):
        return "battery"
    if not batteries:
        return "ac"
    if mains and all(s.get("online") == "0" for s in mains):
        return "battery"
    return None


_VM_PRODUCTS = (
    ("kvm", "kvm"), ("qemu", "qemu"), ("standard pc", "qemu"), ("virtualbox", "oracle"),
    ("vmware", "vmware"), ("virtual machine", "microsoft"), ("hvm domu", "xen"),
    ("google compute engine", "google"), ("cloud hypervisor", "cloud-hypervisor"),
)


def virtualization(detect_virt: str | None, cpu: CpuInfo, product: str | None) -> str | None:
    answer = (detect_virt or "").strip()
    if re.fullmatch(r"[a-z0-9_\-]{1,32}", answer):
        return answer  # "none", "kvm", "wsl", "docker", ...
    lowered = (product or "").lower()
    for marker, name in _VM_PRODUCTS:
        if marker in lowered:
            return name
    if cpu.hypervisor_flag is True:
        return "hypervisor"
    if cpu.hypervisor_flag is False:
        return "none"
    return None


def normalize_arch(machine: str) -> str | None:
    lowered = machine.strip().lower()
    return {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(
        lowered, lowered[:32] or None)


def _read(probe: Probe, path: str) -> str | None:
    return names.clean((probe.read_text(path) or "").replace("\x00", ""))


def machine_model(vendor: str | None, product: str | None, board: str | None) -> str | None:
    if board:
        return board
    if product and vendor and not product.lower().startswith(vendor.split()[0].lower()):
        return names.clean(f"{vendor} {product}")
    return product


def build(
    host: HostInfo,
    cpu: CpuInfo,
    memory_bytes: int | None,
    gpus: list[Gpu],
    *,
    kernel: str | None,
    vendor: str | None,
    product: str | None,
    power_source: str | None,
    virt: str | None,
) -> Fingerprint:
    arch = normalize_arch(host.machine)
    brand = cpu.brand_raw
    name = names.cpu_name(brand) if brand else names.arm_cpu_name(list(cpu.arm_parts))
    cores = cpu.cores if cpu.cores else (cpu.threads if arch == "arm64" else None)
    main = names.main_gpu(gpus)
    return Fingerprint(
        chip=main.name if main else name,
        machine_model=machine_model(vendor, product, cpu.board_model),
        cpu=Cpu(brand_raw=brand, name=name, arch=arch,
                cores_total=names.bounded(cores, 1, names.MAX_CORES),
                threads=names.bounded(cpu.threads, 1, names.MAX_THREADS)),
        memory_bytes=names.bounded(memory_bytes, 1, names.MAX_BYTES),
        memory_gb=names.marketed_gb(memory_bytes),
        unified_memory=False if main else None,
        gpus=gpus[:16],
        os=OsInfo(name="linux", version=kernel, arch=arch),
        virtualization=virt,
        power_source=power_source,  # type: ignore[arg-type]
    )


def collect(probe: Probe, host: HostInfo) -> Fingerprint:
    cpu = parse_cpuinfo(probe.read_text("/proc/cpuinfo"))
    supplies = {
        name: {
            key: (_read(probe, f"{POWER_SUPPLY_DIR}/{name}/{key}") or "")
            for key in ("type", "online", "status")
        }
        for name in probe.list_dir(POWER_SUPPLY_DIR)
    }
    vendor = _read(probe, "/sys/class/dmi/id/sys_vendor")
    product = _read(probe, "/sys/class/dmi/id/product_name") or _read(
        probe, "/proc/device-tree/model")
    gpus = gpu_tools.parse_nvidia_smi(probe.run(gpu_tools.NVIDIA_SMI_ARGV))
    gpus += gpu_tools.parse_rocm_smi(probe.run(gpu_tools.ROCM_SMI_ARGV))
    return build(
        host,
        cpu,
        parse_meminfo(probe.read_text("/proc/meminfo")),
        gpus,
        kernel=_read(probe, "/proc/sys/kernel/osrelease"),
        vendor=vendor,
        product=product,
        power_source=parse_power_supplies(supplies),
        virt=virtualization(probe.run(DETECT_VIRT_ARGV), cpu, product),
    )
