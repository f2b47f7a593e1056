"""run."""

from typing import TYPE_CHECKING

from specsubmit.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specsubmit.run.plan import Measured, decide, plan_lines, too_long_message
    from specsubmit.run.report import render_result, report_console
    from specsubmit.run.runner import (
        RunListener,
        RunSettings,
        default_fingerprint,
        resolve_target,
        run_protocol,
    )

_LAZY: dict[str, str] = {
    "Measured": "specsubmit.run.plan",
    "decide": "specsubmit.run.plan",
    "plan_lines": "specsubmit.run.plan",
    "too_long_message": "specsubmit.run.plan",
    "RunListener": "specsubmit.run.runner",
    "RunSettings": "specsubmit.run.runner",
    "default_fingerprint": "specsubmit.run.runner",
    "render_result": "specsubmit.run.report",
    "report_console": "specsubmit.run.report",
    "resolve_target": "specsubmit.run.runner",
    "run_protocol": "specsubmit.run.runner",
}

__all__ = [
    "Measured",
    "RunListener",
    "RunSettings",
    "decide",
    "default_fingerprint",
    "plan_lines",
    "render_result",
    "report_console",
    "resolve_target",
    "run_protocol",
    "too_long_message",
]

__getattr__ = lazy_names(__name__, _LAZY)
