"""Fingerprints from recorded command outputs, one folder per machine under fixtures/.

Each case.json names the host (platform.system/machine), which recorded file answers which
command or path, the fields expected in the fingerprint (dotted paths; "len:N" for a list
length) and the secrets (serials, UUIDs, host and user names) that the recorded outputs
contain and that must never reach the fingerprint.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specschema import Fingerprint
from specsubmit.fingerprint import HostInfo, collect_fingerprint

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(path.name for path in FIXTURES.iterdir() if (path / "case.json").is_file())


class RecordedProbe:
    """Answers from a case folder; records every command and path it is asked for."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.case = json.loads((folder / "case.json").read_text())
        self.asked: list[str] = []

    def run(self, argv):
        self.asked.append(" ".join(argv))
        name = self.case["commands"].get(argv[0])
        return (self.folder / name).read_text() if name else None

    def read_text(self, path):
        self.asked.append(path)
        name = self.case["files"].get(path)
        return (self.folder / name).read_text() if name else None

    def list_dir(self, path):
        self.asked.append(path)
        prefix = path.rstrip("/") + "/"
        return sorted({key[len(prefix):].split("/")[0] for key in self.case["files"]
                       if key.startswith(prefix)})

    @property
    def host(self) -> HostInfo:
        return HostInfo(system=self.case["system"], machine=self.case["machine"])


def _lookup(data, dotted: str):
    value = data
    for part in dotted.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def _fingerprint(case: str) -> tuple[Fingerprint, RecordedProbe]:
    probe = RecordedProbe(FIXTURES / case)
    return collect_fingerprint(probe, probe.host), probe


def test_the_issue_cases_are_all_recorded():
    required = {"macos-m1", "macos-m2-24gb", "macos-m3-pro", "macos-intel", "macos-rosetta",
                "macos-vm", "linux-x86-rtx4090", "linux-2x3090", "linux-amd-rocm",
                "linux-aarch64-rpi5", "windows-nvidia"}
    assert required <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_recorded_machine_gives_expected_fingerprint(case):
    fingerprint, probe = _fingerprint(case)
    data = json.loads(fingerprint.model_dump_json())
    for dotted, expected in probe.case["expect"].items():
        if isinstance(expected, str) and expected.startswith("len:"):
            assert len(_lookup(data, dotted)) == int(expected[4:]), dotted
        else:
            assert _lookup(data, dotted) == expected, f"{case}: {dotted}"
    # What the wire format accepts: the fingerprint re-validates strictly.
    assert Fingerprint.model_validate_json(fingerprint.model_dump_json()) == fingerprint


@pytest.mark.parametrize("case", CASES)
def test_no_secret_reaches_the_fingerprint(case):
    fingerprint, probe = _fingerprint(case)
    text = fingerprint.model_dump_json()
    recorded = "".join(path.read_text() for path in probe.folder.iterdir())
    for secret in probe.case["secrets"]:
        assert secret in recorded, f"fixture {case} should contain {secret!r}"
        assert secret.lower() not in text.lower(), f"{secret!r} leaked from {case}"
    # Shapes of identifiers: UUIDs, MAC addresses, IPv4 addresses, Apple serials.
    uuid_shape = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    assert not re.search(uuid_shape, text, re.I)
    assert not re.search(r"\b(?:[0-9a-f]{2}[:-]){5}[0-9a-f]{2}\b", text, re.I)
    assert not re.search(r"\b\d{1,3}(?:\.\d{1,3}){3}\b", text)
    for key in ("serial", "uuid", "udid", "hostname", "user"):
        assert key not in text.lower()


@pytest.mark.parametrize("case", CASES)
def test_identifying_files_are_never_opened(case):
    _, probe = _fingerprint(case)
    for asked in probe.asked:
        assert not re.search(r"serial|uuid|hostname|/etc/machine-id|address", asked, re.I), asked


def test_tools_missing_means_not_detected_not_a_crash(tmp_path):
    (tmp_path / "case.json").write_text(json.dumps(
        {"system": "Linux", "machine": "x86_64", "commands": {}, "files": {}}))
    probe = RecordedProbe(tmp_path)
    fingerprint = collect_fingerprint(probe, probe.host)
    assert fingerprint.chip is None
    assert fingerprint.memory_bytes is None and fingerprint.gpus == []
    assert fingerprint.os.name == "linux" and fingerprint.cpu.arch == "x86_64"


@pytest.mark.parametrize("system", ["Darwin", "Linux", "Windows"])
def test_garbage_output_everywhere_is_not_detected(tmp_path, system):
    garbage = "\x00\xff{not json]\nmodel name\t:\nMemTotal: lots kB\n, , ,\n"
    (tmp_path / "junk.txt").write_text(garbage)
    tools = ("sysctl", "system_profiler", "sw_vers", "pmset", "nvidia-smi", "rocm-smi",
             "systemd-detect-virt", "powershell")
    commands = dict.fromkeys(tools, "junk.txt")
    files = dict.fromkeys(("/proc/cpuinfo", "/proc/meminfo"), "junk.txt")
    (tmp_path / "case.json").write_text(json.dumps(
        {"system": system, "machine": "x86_64", "commands": commands, "files": files}))
    probe = RecordedProbe(tmp_path)
    fingerprint = collect_fingerprint(probe, probe.host)
    assert fingerprint.memory_bytes is None
    assert fingerprint.gpus == [] or system == "Darwin"


def test_unknown_system_is_other():
    fingerprint = collect_fingerprint(RecordedProbe.__new__(RecordedProbe),
                                      HostInfo(system="FreeBSD", machine="amd64"))
    assert fingerprint.os.name == "other" and fingerprint.os.arch == "x86_64"


def test_windows_falls_back_to_pwsh(tmp_path):
    source = FIXTURES / "windows-nvidia"
    case = json.loads((source / "case.json").read_text())
    case["commands"] = {"pwsh": "powershell.json"}
    (tmp_path / "powershell.json").write_text((source / "powershell.json").read_text())
    (tmp_path / "case.json").write_text(json.dumps(case))
    probe = RecordedProbe(tmp_path)
    fingerprint = collect_fingerprint(probe, probe.host)
    assert probe.asked[0].startswith("powershell ") and probe.asked[1].startswith("pwsh ")
    assert fingerprint.cpu.name == "13th Gen Intel Core i7-13700K"
    assert fingerprint.gpus[0].memory_bytes is None  # capped AdapterRAM, no nvidia-smi here


def test_an_unforeseen_invalid_value_degrades_instead_of_crashing(tmp_path, monkeypatch):
    from specschema import Cpu
    from specsubmit.fingerprint import linux

    monkeypatch.setattr(linux, "parse_meminfo", lambda text: Cpu(cores_total=0))
    (tmp_path / "case.json").write_text(json.dumps(
        {"system": "Linux", "machine": "aarch64", "commands": {}, "files": {}}))
    probe = RecordedProbe(tmp_path)
    fingerprint = collect_fingerprint(probe, probe.host)
    assert fingerprint.os.name == "linux" and fingerprint.os.arch == "arm64"
    assert fingerprint.chip is None
