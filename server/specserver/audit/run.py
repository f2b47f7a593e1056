"""One audit of a public server, start to end (``specserver audit --from URL``): copy and
check the log (``logaudit``), check the public data against it (``dataaudit``), then the
newest signed snapshot against both (``snapshotaudit``), each public submission's rows in
today's export against its signed payload (``rowsaudit``)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from specserver.audit.dataaudit import audit_public_data, read_public_list, unlogged
from specserver.audit.findings import AuditReport
from specserver.audit.logaudit import check_kept, copy_log
from specserver.audit.rowsaudit import export_facts
from specserver.audit.snapshotaudit import audit_snapshot
from specserver.audit.source import AuditUnreachable, PublicSource

EXPORT = "/v1/export?format=parquet"


def audit(source: PublicSource, log_key: str | None = None, kept: bytes | None = None,
          settle_s: float = 5.0) -> AuditReport:
    """Every check; ``log_key`` pins the log's verifier key (else ``/log/key`` is taken,
    which proves only that the server agrees with itself); ``kept``, the checkpoint an
    earlier audit verified, which the log must extend. ``report.checkpoint`` is the one
    verified now (to keep when the audit passes).

    The public list is read first, then the log copied. A checkpoint is signed at most
    every few seconds (and may be cached as long), so when the list shows submissions the
    copied log does not name yet, the log is copied once more after ``settle_s``."""
    listed = read_public_list(source)
    report = AuditReport()
    log = copy_log(source, log_key, report)
    if log is not None and unlogged(listed, log):
        time.sleep(settle_s)
        report = AuditReport()
        log = copy_log(source, log_key, report)
    if log is None:
        report.note("the log could not be copied whole: the public data was not checked "
                    "against it")
        return report
    report.checkpoint = log.note
    if kept is not None:
        check_kept(log, kept, report)
    with tempfile.TemporaryDirectory(prefix="specserver-audit-") as folder:
        export = Path(folder) / "export.parquet"
        if not source.download(EXPORT, export):
            raise AuditUnreachable(f"{source.url}{EXPORT} is not served")
        public = audit_public_data(source, log, report, listed, export_facts(export))
        audit_snapshot(source, log, public, export, report)
    return report
