"""The default --threads for llama-server: the physical cores less those busy with other
work (the load average before our server starts), at least one; recorded per launch."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsubmit.engines.llama_server import threads
from specsubmit.engines.llama_server.threads import default_threads


@pytest.mark.parametrize(("physical", "logical", "load", "expected"), [
    (8, 16, 0.2, 8),   # quiet: llama.cpp's own choice, the physical cores
    (8, 16, 12.0, 4),  # busy: what is left
    (2, 2, 0.0, 2),
    (2, 2, 1.4, 1),
    (2, 2, 11.2, 1),   # the loaded 2-core machine of the measurements: never below one
    (1, 1, 0.0, 1),
])
def test_the_rule(physical: int, logical: int, load: float, expected: int) -> None:
    assert default_threads(physical=physical, logical=logical, load=load) == expected


def test_physical_cores_from_cpuinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two packages of two cores with two hyper-threads each: 4 physical of 8 logical.
    blocks = [f"processor\t: {i}\nphysical id\t: {i // 4}\ncore id\t\t: {(i // 2) % 2}\n"
              for i in range(8)]
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("\n".join(blocks))
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: real(
        cpuinfo if str(self) == "/proc/cpuinfo" else self, *a, **k))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(threads.sys, "platform", "linux")
    assert threads.physical_cores() == 4
