"""Pick the probes for this operating system and build the fingerprint."""

from __future__ import annotations

from specschema import Fingerprint, OsInfo
from specsubmit.fingerprint import linux, macos, windows
from specsubmit.fingerprint.probe import HostInfo, Probe, SystemProbe


def collect_fingerprint(probe: Probe | None = None, host: HostInfo | None = None) -> Fingerprint:
    """Probe the machine (the live one unless a probe and host are given)."""
    probe = probe if probe is not None else SystemProbe()
    host = host if host is not None else HostInfo.live()
    if host.system == "Darwin":
        return macos.collect(probe, host)
    if host.system == "Linux":
        return linux.collect(probe, host)
    if host.system == "Windows":
        return windows.collect(probe, host)
    return Fingerprint(os=OsInfo(name="other", arch=linux.normalize_arch(host.machine)))
