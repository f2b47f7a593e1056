"""The hardware fingerprint: what machine produced a number, and nothing that names its owner.

Probes run per OS through one injectable ``Probe`` (commands with a short timeout, small
files); parsers are pure functions over their text. A missing tool or odd output leaves
fields as None ("not detected"). Never collected: host name, user name, serial numbers,
hardware UUIDs, MAC or IP addresses.
"""

from specsubmit.fingerprint.backend import backend_from_ps
from specsubmit.fingerprint.collect import collect_fingerprint
from specsubmit.fingerprint.probe import HostInfo, Probe, SystemProbe

__all__ = ["HostInfo", "Probe", "SystemProbe", "backend_from_ps", "collect_fingerprint"]
