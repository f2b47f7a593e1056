"""What each transparency-log entry names, for auditors: the log's public index.

The log holds hashes only (``logentries``). An auditor who recomputes the tree also needs
to know what each entry stands for: an envelope entry names its submission (whose bytes
``GET /v1/submissions/{id}/envelope`` serves while it is public, and whose hash the
submission's page shows when it is hidden); a moderation entry is a maintainer's decision,
the audit row as the public history shows it plus the indexes it affects, from which
anyone recomputes the entry's hash.

A moderation entry is stored without the id of its audit row. Its row is found again from
the two timestamps the decision's transaction wrote on one clock: the audit row's ``at``,
then the entry's ``logged_at`` a moment later (``logentries.log_moderation``). Each audit
row of that moment is tried with what it named before the entry (``affected_indexes`` with
``below``) until one hashes to the entry. None does when the row was edited or deleted:
the index then says ``decision: null``, which an auditor reports.

A refused entry names nothing: the envelope was never stored, and its sender, not the
public, holds its bytes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select

from specschema.tlog import ENVELOPE, MODERATION, PROBE, REFUSED
from specserver.store import tables
from specserver.store.logentries import affected_indexes, moderation_entry

# How long before its entry's ``logged_at`` a decision's audit row may have been stamped:
# both in one transaction, so far less; a wide window costs a few more rows tried.
MATCH_WINDOW = timedelta(seconds=60)


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """An audit row as the public history shows it (ISO 8601 times with ``Z``)."""
    return {key: value.isoformat() + "Z" if isinstance(value, datetime) else value
            for key, value in row.items()}


def _decision(conn: Connection, index: int, entry: bytes, logged_at: datetime
              ) -> dict[str, Any] | None:
    audit = tables.audit_log
    rows = conn.execute(select(audit).where(audit.c.at <= logged_at,
                                            audit.c.at >= logged_at - MATCH_WINDOW)
                        .order_by(audit.c.at.desc(), audit.c.audit_id)).all()
    for found in rows:
        row = dict(found._mapping)
        affects = affected_indexes(conn, str(row["action"]), str(row["target"]), below=index)
        if moderation_entry(row, affects) == entry:
            return {"decision": _shown(row), "affects": affects}
    return None


def index_of(conn: Connection, start: int, end: int) -> list[dict[str, Any]]:
    """What entries ``start``..``end - 1`` name, in order: ``{"index", "kind": "envelope",
    "submission_id"}``, ``{"index", "kind": "moderation", "decision", "affects"}`` (both
    null when no audit row hashes to the entry), ``{"index", "kind": "refused"}`` (its
    hash is the entry itself) or ``{"index", "kind": "probe", "probe_id"}``."""
    log = tables.log_entries
    rows = conn.execute(select(log.c.idx, log.c.entry, log.c.submission_id, log.c.logged_at)
                        .where(log.c.idx >= start, log.c.idx < end)
                        .order_by(log.c.idx)).all()
    items: list[dict[str, Any]] = []
    for idx, raw, submission_id, logged_at in rows:
        index, entry = int(idx), bytes(raw)
        if entry[:1] == bytes([ENVELOPE]):
            items.append({"index": index, "kind": "envelope", "submission_id": submission_id})
        elif entry[:1] == bytes([MODERATION]):
            found = _decision(conn, index, entry, logged_at)
            items.append({"index": index, "kind": "moderation",
                          **(found or {"decision": None, "affects": None})})
        elif entry[:1] == bytes([REFUSED]):  # nothing more: a refused envelope is not public
            items.append({"index": index, "kind": "refused"})
        elif entry[:1] == bytes([PROBE]):
            items.append({"index": index, "kind": "probe", "probe_id": submission_id})
        else:
            items.append({"index": index, "kind": "unknown"})
    return items
