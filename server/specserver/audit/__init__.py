"""audit: check a public server's transparency log, public data and snapshots from the
outside, as anyone can (``specserver audit --from URL``)."""

from typing import TYPE_CHECKING

from specserver.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use.

if TYPE_CHECKING:
    from specserver.audit.dataaudit import decision_entry
    from specserver.audit.findings import AuditReport, Finding
    from specserver.audit.run import audit
    from specserver.audit.source import AuditUnreachable, PublicSource

_LAZY: dict[str, str] = {
    "AuditReport": "specserver.audit.findings",
    "AuditUnreachable": "specserver.audit.source",
    "Finding": "specserver.audit.findings",
    "PublicSource": "specserver.audit.source",
    "audit": "specserver.audit.run",
    "decision_entry": "specserver.audit.dataaudit",
}

__all__ = [
    "AuditReport",
    "AuditUnreachable",
    "Finding",
    "PublicSource",
    "audit",
    "decision_entry",
]

__getattr__ = lazy_names(__name__, _LAZY)
