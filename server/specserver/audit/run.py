"""One audit of a public server, start to end (``specserver audit --from URL``): copy and
check the log (``logaudit``), check the public data against it (``dataaudit``), then the
newest signed snapshot against both (``snapshotaudit``)."""

from __future__ import annotations

from specserver.audit.dataaudit import audit_public_data
from specserver.audit.findings import AuditReport
from specserver.audit.logaudit import check_kept, copy_log
from specserver.audit.snapshotaudit import audit_snapshot
from specserver.audit.source import PublicSource


def audit(source: PublicSource, log_key: str | None = None,
          kept: bytes | None = None) -> AuditReport:
    """Every check; ``log_key`` pins the log's verifier key (else ``/log/key`` is taken,
    which proves only that the server agrees with itself); ``kept``, the checkpoint an
    earlier audit verified, which the log must extend. ``report.checkpoint`` is the one
    verified now (to keep when the audit passes)."""
    report = AuditReport()
    log = copy_log(source, log_key, report)
    if log is None:
        report.note("the log could not be copied whole: the public data was not checked "
                    "against it")
        return report
    report.checkpoint = log.note
    if kept is not None:
        check_kept(log, kept, report)
    public = audit_public_data(source, log, report)
    audit_snapshot(source, log, public, report)
    return report
