"""send."""

from typing import TYPE_CHECKING

from specsubmit.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specsubmit.send.consent import cpu_gpu_line, machine_line
    from specsubmit.send.delivery import check_server
    from specsubmit.send.logwatch import check_on_contact, keep_checked
    from specsubmit.send.predictions import fetch_prediction
    from specsubmit.send.probe import offer_probe
    from specsubmit.send.submit import offer_submission, resolve_server

_LAZY: dict[str, str] = {
    "check_on_contact": "specsubmit.send.logwatch",
    "check_server": "specsubmit.send.delivery",
    "cpu_gpu_line": "specsubmit.send.consent",
    "fetch_prediction": "specsubmit.send.predictions",
    "keep_checked": "specsubmit.send.logwatch",
    "machine_line": "specsubmit.send.consent",
    "offer_probe": "specsubmit.send.probe",
    "offer_submission": "specsubmit.send.submit",
    "resolve_server": "specsubmit.send.submit",
}

__all__ = [
    "check_on_contact",
    "check_server",
    "cpu_gpu_line",
    "fetch_prediction",
    "keep_checked",
    "logcheck",
    "machine_line",
    "offer_probe",
    "offer_submission",
    "resolve_server",
    "submit",
]

__getattr__ = lazy_names(__name__, _LAZY)
