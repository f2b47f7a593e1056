"""local."""

from typing import TYPE_CHECKING

from specsubmit.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specsubmit.local.enginelock import engine_lock
    from specsubmit.local.index import list_results
    from specsubmit.local.paths import check_state_home
    from specsubmit.local.probes import load_probe, newest_probe, newest_probe_named, save_probe
    from specsubmit.local.results import load_result, save_result, write_result

_LAZY: dict[str, str] = {
    "check_state_home": "specsubmit.local.paths",
    "engine_lock": "specsubmit.local.enginelock",
    "list_results": "specsubmit.local.index",
    "load_probe": "specsubmit.local.probes",
    "newest_probe": "specsubmit.local.probes",
    "newest_probe_named": "specsubmit.local.probes",
    "save_probe": "specsubmit.local.probes",
    "load_result": "specsubmit.local.results",
    "save_result": "specsubmit.local.results",
    "write_result": "specsubmit.local.results",
}

__all__ = [
    "check_state_home",
    "engine_lock",
    "keys",
    "list_results",
    "load_probe",
    "load_result",
    "logstate",
    "newest_probe",
    "newest_probe_named",
    "outbox",
    "save_probe",
    "save_result",
    "write_result",
]

__getattr__ = lazy_names(__name__, _LAZY)
