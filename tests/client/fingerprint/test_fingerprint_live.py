"""The live probe on the machine running the tests (Linux here): it must not crash, and
whatever this machine lets it read is present."""

from __future__ import annotations

import os
import platform
import re
import socket
import sys

import pytest

from specschema import Fingerprint
from specsubmit.fingerprint import SystemProbe, collect_fingerprint


@pytest.mark.skipif(sys.platform != "linux", reason="the live check is written for Linux")
def test_live_probe_on_this_linux_machine():
    fingerprint = collect_fingerprint()
    assert Fingerprint.model_validate_json(fingerprint.model_dump_json()) == fingerprint
    assert fingerprint.os.name == "linux"
    assert fingerprint.os.version == platform.release()
    assert fingerprint.cpu.arch in ("x86_64", "arm64", platform.machine().lower())
    assert fingerprint.cpu.threads == os.cpu_count()
    with open("/proc/meminfo") as handle:
        kib = int(re.search(r"MemTotal:\s+(\d+)", handle.read()).group(1))
    assert fingerprint.memory_bytes == kib * 1024
    assert fingerprint.memory_gb is not None and fingerprint.memory_gb * 1024**3 >= kib * 1024
    with open("/proc/cpuinfo") as handle:
        has_model_name = "model name" in handle.read()
    if has_model_name:
        assert fingerprint.cpu.brand_raw and fingerprint.chip
    text = fingerprint.model_dump_json()
    assert socket.gethostname() not in text
    user = os.environ.get("USER") or os.environ.get("LOGNAME")
    if user and len(user) > 3:
        assert f'"{user}"' not in text


def test_missing_tool_and_timeout_are_none(tmp_path):
    probe = SystemProbe(timeout_s=0.2)
    assert probe.run(["definitely-not-a-tool-specsubmit"]) is None
    assert probe.run([sys.executable, "-c", "import time; time.sleep(5)"]) is None
    patient = SystemProbe(timeout_s=30)
    assert patient.run([sys.executable, "-c", "print('x'); raise SystemExit(3)"]) == "x\n"
    assert probe.read_text(str(tmp_path / "missing")) is None
    assert probe.list_dir(str(tmp_path / "missing")) == []
