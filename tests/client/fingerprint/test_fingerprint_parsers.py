"""Pure parsers and naming rules of the fingerprint, one behaviour per test."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specschema import Gpu
from specsubmit.fingerprint import backend_from_ps, gpu_tools, linux, macos, names, windows
from specsubmit.fingerprint.probe import HostInfo

GIB = 1024**3


@pytest.mark.parametrize(
    ("memory_bytes", "expected"),
    [
        (25769803776, 24),  # macOS hw.memsize, exact
        (23 * GIB + 990 * 1024**2, 24),  # 23.99 GiB is sold as 24
        (int(31.2 * GIB), 32),  # Linux MemTotal on a 32 GB machine
        (int(62.6 * GIB), 64),
        (int(125.7 * GIB), 128),
        (int(15.3 * GIB), 16),  # an iGPU took some
        (10 * GIB, 10),  # a VM given exactly 10 GiB
        (38654705664, 36),
        (None, None),
        (0, None),
    ],
)
def test_marketed_gb(memory_bytes, expected):
    assert names.marketed_gb(memory_bytes) == expected


@given(st.integers(min_value=1, max_value=2**50))
def test_marketed_gb_never_below_the_reading(memory_bytes):
    gb = names.marketed_gb(memory_bytes)
    assert gb is not None and gb >= 1
    assert gb * GIB >= memory_bytes - 16 * 1024**2


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Apple M3 Pro", "Apple M3 Pro"),
        ("Apple M2 (Virtual)", "Apple M2"),
        ("kHW_AppleM1Item", "Apple M1"),
        ("kHW_AppleM1MaxItem", "Apple M1 Max"),
        ("Apple M4 Max", "Apple M4 Max"),
        ("VirtualApple @ 2.50GHz", None),
        (None, None),
    ],
)
def test_apple_chip(raw, expected):
    assert names.apple_chip(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz", "Intel Core i9-9980HK"),
        ("AMD Ryzen 9 7950X 16-Core Processor", "AMD Ryzen 9 7950X"),
        ("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "Intel Xeon Gold 6248"),
        ("AMD Ryzen 7 5800H with Radeon Graphics         ", "AMD Ryzen 7 5800H"),
        ("Apple M2", "Apple M2"),
    ],
)
def test_cpu_name(raw, expected):
    assert names.cpu_name(raw) == expected


@pytest.mark.parametrize(
    ("raw", "vendor", "expected"),
    [
        ("GeForce RTX 3090", None, "NVIDIA GeForce RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "nvidia", "NVIDIA GeForce RTX 4090"),
        ("Radeon RX 7900 XTX", "amd", "AMD Radeon RX 7900 XTX"),
        ("AMD Radeon RX 7900 XTX", None, "AMD Radeon RX 7900 XTX"),
        ("Navi 31 [Radeon RX 7900 XTX]", "amd", "AMD Radeon RX 7900 XTX"),
        ("Intel(R) UHD Graphics 770", None, "Intel UHD Graphics 770"),
        ("[N/A]", "nvidia", None),
    ],
)
def test_gpu_name_is_vendor_prefixed_and_canonical(raw, vendor, expected):
    assert names.gpu_name(raw, vendor) == expected


def test_main_gpu_prefers_nvidia_then_memory_and_ignores_integrated():
    igpu = Gpu(name="Intel UHD Graphics 770", vendor="intel", memory_bytes=GIB)
    small = Gpu(name="NVIDIA GeForce RTX 3060", vendor="nvidia", memory_bytes=12 * GIB)
    big = Gpu(name="NVIDIA GeForce RTX 3090", vendor="nvidia", memory_bytes=24 * GIB)
    amd = Gpu(name="AMD Radeon RX 7900 XTX", vendor="amd", memory_bytes=24 * GIB)
    assert names.main_gpu([igpu, small, amd, big]) == big
    assert names.main_gpu([igpu, amd]) == amd
    assert names.main_gpu([igpu]) is None
    arc = Gpu(name="Intel Arc A770", vendor="intel", memory_bytes=16 * GIB)
    assert names.main_gpu([igpu, arc]) == arc


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ([(0x41, 0xD0B)], "ARM Cortex-A76"),
        ([(0x41, 0xD0B), (0x41, 0xD05)], "ARM Cortex-A76 + Cortex-A55"),
        ([(0x61, 0x000)], "Apple part 0x000"),
        ([(0xC0, 0xAC3)], "Ampere Ampere-1"),
        ([], None),
    ],
)
def test_arm_cpu_names(pairs, expected):
    assert names.arm_cpu_name(pairs) == expected


# --- macOS -----------------------------------------------------------------------------


def test_sysctl_ignores_unknown_lines_and_keeps_known_keys():
    text = "hw.memsize: 17179869184\nsysctl: unknown oid 'hw.perflevel0.physicalcpu'\nfoo: 1\n"
    assert macos.parse_sysctl(text) == {"hw.memsize": "17179869184"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [("proc 8:4:4", (8, 4, 4)), ("proc 12:0:8:4", (12, None, None)), (2, (2, None, None)),
     ("weird", (None, None, None)), (None, (None, None, None))],
)
def test_number_processors_forms(value, expected):
    assert macos.parse_number_processors(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Now drawing from 'AC Power'\n", "ac"),
        ("Now drawing from 'Battery Power'\n -InternalBattery-0 (id=1)\t50%; discharging; "
         "(no estimate) present: true\n", "battery"),
        ("Now drawing from 'UPS Power'\n", None),
        ("", None),
    ],
)
def test_pmset(text, expected):
    assert macos.parse_pmset(text) == expected


def test_system_profiler_not_json_is_empty():
    assert macos.parse_system_profiler("system_profiler: timeout") == macos.ProfilerHardware()


def test_intel_mac_number_processors_counts_packages_not_cores():
    text = json.dumps({"SPHardwareDataType": [{"cpu_type": "6-Core Intel Core i7",
                                               "number_processors": 1}]})
    assert macos.parse_system_profiler(text).cores_total is None


# --- Linux -----------------------------------------------------------------------------


def test_nvidia_smi_skips_failures_and_na():
    text = (
        "NVIDIA GeForce RTX 4090, 24564, 550.54.14\n"
        "NVIDIA GeForce RTX 4090, [N/A], 550.54.14\n"
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    )
    gpus = gpu_tools.parse_nvidia_smi(text)
    assert [(g.name, g.memory_bytes) for g in gpus] == [("NVIDIA GeForce RTX 4090", 24564 * 2**20)]


def test_rocm_smi_keys_match_case_insensitively():
    upper = {"card0": {"Card Series": "Radeon RX 7900 XTX", "VRAM Total Memory (B)": "1024"}}
    lower = {"card0": {"card series": "Radeon RX 7900 XTX", "vram total memory (b)": "1024"}}
    assert gpu_tools.parse_rocm_smi(json.dumps(upper)) == gpu_tools.parse_rocm_smi(
        json.dumps(lower))
    assert gpu_tools.parse_rocm_smi(json.dumps(upper))[0].memory_bytes == 1024


def test_rocm_smi_hex_series_falls_back_to_sku_and_ignores_system():
    data = {"system": {"Driver version": "6.7.0"},
            "card0": {"Card Series": "0x744c", "Card SKU": "RX 7900 XTX"}}
    assert [g.name_raw for g in gpu_tools.parse_rocm_smi(json.dumps(data))] == ["RX 7900 XTX"]


def test_cpuinfo_counts_cores_and_threads_and_reads_hypervisor_flag():
    block = "processor\t: {n}\nmodel name\t: AMD EPYC\nphysical id\t: 0\ncore id\t: {c}\n" \
            "flags\t: fpu hypervisor\n"
    text = "\n".join(block.format(n=n, c=n // 2) for n in range(4))
    info = linux.parse_cpuinfo(text)
    assert (info.threads, info.cores, info.hypervisor_flag) == (4, 2, True)


@pytest.mark.parametrize(
    ("supplies", "expected"),
    [
        ({}, "ac"),
        ({"AC": {"type": "Mains", "online": "1"}, "BAT0": {"type": "Battery",
                                                          "status": "Charging"}}, "ac"),
        ({"AC": {"type": "Mains", "online": "0"}, "BAT0": {"type": "Battery",
                                                          "status": "Discharging"}}, "battery"),
        ({"BAT0": {"type": "Battery", "status": "Discharging"}}, "battery"),
        ({"BAT0": {"type": "Battery", "status": "Unknown"}}, None),
    ],
)
def test_power_supplies(supplies, expected):
    assert linux.parse_power_supplies(supplies) == expected


def test_virtualization_order():
    bare = linux.CpuInfo(hypervisor_flag=False)
    guest = linux.CpuInfo(hypervisor_flag=True)
    assert linux.virtualization("kvm\n", bare, None) == "kvm"
    assert linux.virtualization(None, guest, None) == "hypervisor"
    assert linux.virtualization(None, bare, "Standard PC (Q35 + ICH9, 2009)") == "qemu"
    assert linux.virtualization(None, bare, None) == "none"
    assert linux.virtualization(None, linux.CpuInfo(), None) is None


# --- Windows ---------------------------------------------------------------------------


def test_cim_single_object_and_array_are_the_same():
    controller = {"Name": "NVIDIA GeForce RTX 4090", "AdapterRAM": 4293918720,
                  "AdapterCompatibility": "NVIDIA"}
    single = windows.parse_cim(json.dumps({"VideoController": controller}))
    array = windows.parse_cim(json.dumps({"VideoController": [controller]}))
    assert single == array
    assert windows.parse_cim(json.dumps({"VideoController": None})) == {"VideoController": []}


def test_adapter_ram_cap_is_not_taken_as_vram_and_nvidia_smi_wins():
    controller = {"Name": "NVIDIA GeForce RTX 4090", "AdapterRAM": 4293918720}
    capped = windows.video_controllers([controller], [])
    assert capped[0].memory_bytes is None
    smi = gpu_tools.parse_nvidia_smi("NVIDIA GeForce RTX 4090, 24564, 552.22")
    real = windows.video_controllers([controller], smi)
    assert real[0].memory_bytes == 24564 * 2**20 and real[0].driver == "552.22"


def test_windows_host_name_is_not_read_even_when_present():
    cim = windows.parse_cim(json.dumps({"ComputerSystem": {"Name": "DESKTOP-SECRET",
                                                           "Model": "MS-7D25"}}))
    fingerprint = windows.build(HostInfo("Windows", "ARM64"), cim, [])
    assert "DESKTOP-SECRET" not in fingerprint.model_dump_json()
    assert fingerprint.cpu.arch == "arm64"


# --- Ollama backend from /api/ps (cmd/cmd.go PROCESSOR rules) -----------------------------


def _ps(size, size_vram, name="qwen3:8b"):
    return {"models": [{"name": name, "model": name, "size": size, "size_vram": size_vram}]}


@pytest.mark.parametrize(
    ("size", "size_vram", "expected"),
    [
        (1000, 1000, ("100% GPU", 1.0)),
        (1000, 0, ("100% CPU", 0.0)),
        (0, 0, ("100% CPU", 0.0)),  # size_vram == 0 is checked first
        (1000, 750, ("25%/75% CPU/GPU", 0.75)),
        (1000, 333, ("67%/33% CPU/GPU", 0.333)),
        (1000, 1200, (None, None)),  # "Unknown"
        (0, 10, (None, None)),
    ],
)
def test_backend_from_ps(size, size_vram, expected):
    assert backend_from_ps(_ps(size, size_vram), "qwen3:8b") == expected


def test_backend_from_ps_matches_latest_tag_and_other_models_are_ignored():
    ps = {"models": [_ps(10, 0, "other:1b")["models"][0],
                     _ps(10, 10, "llama3.2:latest")["models"][0]]}
    assert backend_from_ps(ps, "llama3.2") == ("100% GPU", 1.0)
    assert backend_from_ps(ps, "mistral") == (None, None)
    assert backend_from_ps({"models": [{"name": "m", "size": 5}]}, "m") == (None, None)
    assert backend_from_ps({}, "m") == (None, None)


# --- odd output never crashes -------------------------------------------------------------

ODD_TEXT = st.one_of(
    st.text(max_size=400),
    st.lists(st.sampled_from([
        "model name\t: ", "processor\t: 1", "core id\t: x", "CPU part\t: 0xzz",
        "MemTotal:  12 kB", "hw.memsize: -1", "{", "}", '{"card0": 5}', "[N/A]", ",,,",
        '{"SPHardwareDataType": [1], "SPDisplaysDataType": {}}', '"Processor": null',
        "Now drawing from '", "ProductVersion:", "\x00",
    ]), max_size=12).map("\n".join),
)


@given(ODD_TEXT)
def test_parsers_never_raise_on_odd_output(text):
    macos.parse_sysctl(text)
    macos.parse_system_profiler(text)
    macos.parse_sw_vers(text)
    macos.parse_pmset(text)
    linux.parse_cpuinfo(text)
    linux.parse_meminfo(text)
    gpu_tools.parse_nvidia_smi(text)
    gpu_tools.parse_rocm_smi(text)
    windows.parse_cim(text)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["card0", "card1", "system", "Card Series", "VRAM Total Memory (B)",
                         "SPHardwareDataType", "SPDisplaysDataType", "chip_type", "sppci_cores",
                         "Processor", "VideoController", "ComputerSystem", "Name",
                         "AdapterRAM", "Battery", "BatteryStatus", "PhysicalMemory"]),
        inner, max_size=5),
    max_leaves=20))
def test_structured_parsers_never_raise_on_odd_json(data):
    text = json.dumps(data)
    hardware = macos.parse_system_profiler(text)
    macos.build({}, hardware, None, None)
    gpu_tools.parse_rocm_smi(text)
    windows.build(HostInfo("Windows", "AMD64"), windows.parse_cim(text), [])


def test_values_outside_the_wire_bounds_become_not_detected():
    huge = 2**60
    cim = windows.parse_cim(json.dumps({
        "Processor": {"Name": "x" * 500, "NumberOfCores": 99999, "NumberOfLogicalProcessors": -4},
        "ComputerSystem": {"TotalPhysicalMemory": huge},
        "VideoController": [{"Name": "NVIDIA GeForce RTX 4090", "AdapterRAM": -1}] * 20,
    }))
    fingerprint = windows.build(HostInfo("Windows", "Z" * 64), cim, [])
    assert fingerprint.cpu.cores_total is None and fingerprint.cpu.threads is None
    assert fingerprint.memory_bytes is None and fingerprint.memory_gb is None
    assert len(fingerprint.gpus) == 16 and len(fingerprint.cpu.brand_raw) == 200
    assert len(fingerprint.cpu.arch) == 32
    mac = macos.build({"hw.memsize": str(huge), "hw.physicalcpu": "0", "hw.logicalcpu": "9999"},
                      macos.ProfilerHardware(), None, None)
    assert mac.memory_bytes is None and mac.cpu.cores_total is None and mac.cpu.threads is None
    smi = gpu_tools.parse_nvidia_smi(f"NVIDIA GeForce RTX 4090, {2**45}, 1\n")
    assert smi[0].memory_bytes is None
    many = [(0x41, part) for part in range(0x100, 0x200)]
    assert len(names.arm_cpu_name(many)) == 200
    cpuinfo = "\n\n".join(f"processor\t: {n}\nmodel name\t: X" for n in range(9000))
    fingerprint = linux.build(HostInfo("Linux", "x86_64"), linux.parse_cpuinfo(cpuinfo), None, [],
                              kernel=None, vendor=None, product=None, power_source=None, virt=None)
    assert fingerprint.cpu.threads is None


def test_public_surface_is_pinned():
    import specsubmit.fingerprint as fingerprint

    assert sorted(fingerprint.__all__) == [
        "HostInfo", "Probe", "SystemProbe", "backend_from_ps", "collect_fingerprint"]
    for name in fingerprint.__all__:
        assert getattr(fingerprint, name) is not None


def test_a_missing_sysctl_key_cannot_hide_the_others():
    from pathlib import Path

    recorded = Path(__file__).parent / "fixtures" / "macos-intel" / "sysctl.txt"
    values = macos.parse_sysctl(recorded.read_text())
    assert "hw.perflevel0.physicalcpu" not in values and "kern.hv_vmm_present" in values

    def aborting_sysctl(argv):  # a sysctl that stops at the first unknown oid
        lines = []
        for key in argv[1:]:
            if key not in values:
                break
            lines.append(f"{key}: {values[key]}")
        return "\n".join(lines)

    merged = macos.parse_sysctl("\n".join(aborting_sysctl(a) for a in macos.SYSCTL_ARGVS))
    assert merged == values
