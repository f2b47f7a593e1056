"""Pick the probes for this operating system and build the fingerprint."""

from __future__ import annotations

from pydantic import ValidationError

from specschema import Fingerprint, OsInfo
from specsubmit.fingerprint import linux, macos, windows
from specsubmit.fingerprint.probe import HostInfo, Probe, SystemProbe

_OS_NAMES = {"Darwin": "macos", "Linux": "linux", "Windows": "windows"}


def collect_fingerprint(probe: Probe | None = None, host: HostInfo | None = None) -> Fingerprint:
    """Probe the machine (the live one unless a probe and host are given)."""
    probe = probe if probe is not None else SystemProbe()
    host = host if host is not None else HostInfo.live()
    collectors = {"Darwin": macos.collect, "Linux": linux.collect, "Windows": windows.collect}
    collector = collectors.get(host.system)
    os_info = OsInfo(name=_OS_NAMES.get(host.system, "other"),  # type: ignore[arg-type]
                     arch=linux.normalize_arch(host.machine))
    if collector is None:
        return Fingerprint(os=os_info)
    try:
        return collector(probe, host)
    except ValidationError:
        # Parsers bound every value to the wire format's limits; should one slip through,
        # the run still gets a fingerprint (with less in it) rather than a crash.
        return Fingerprint(os=os_info)
