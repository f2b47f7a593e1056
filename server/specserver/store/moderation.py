"""Maintainer actions on an open connection: hide, unhide, ban, unban, import, accepting a
cohort, hiding a set of keys' results, and the audit row of an ad-hoc query.

Each action changes state and writes one ``audit_log`` row in the same transaction, so the
history on ``GET /v1/submissions/{id}`` and on the page never misses one. An action that
changes nothing (hiding a hidden submission) writes nothing and reports ``changed=False``.
The callers run these through the store's single writer (``store.write``), whether the
request came from the admin API or from the CLI on a store no server holds.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from specserver.errors import Conflict, Invalid, NotFound
from specserver.store import changes, tables
from specserver.store.adhoc import audit_target
from specserver.store.appenders import core_insert
from specserver.store.logentries import log_moderation
from specserver.store.rowset import QUARANTINE_PREFIX, RowSet
from specserver.store.tables import INGEST_TABLES

KEY_ID = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ActionResult:
    action: str
    target: str
    changed: bool

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "target": self.target, "changed": self.changed}


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def record(conn: Connection, action: str, target: str, reason: str | None, actor: str) -> None:
    """The audit row, the change log's entry for what the action touched (an import also
    stored its submission), and the decision's entry in the transparency log."""
    row = {"audit_id": str(uuid.uuid4()), "at": _now(), "action": action, "target": target,
           "reason": reason, "actor": actor}
    conn.execute(insert(tables.audit_log).values(**row))
    who = changes.audit_contributor(conn, action, target)
    changes.mark(conn, {who: 1} if action == "import" and who is not None else None,
                 {who: 1})
    log_moderation(conn, row)  # the transparency log's entry for the decision


def _hidden(conn: Connection, submission_id: str) -> bool:
    sub = tables.submissions
    value = conn.execute(select(sub.c.hidden).where(sub.c.submission_id == submission_id)).first()
    if value is None:
        raise NotFound(f"no submission {submission_id}", {"submission_id": submission_id})
    return bool(value[0])


def hide(conn: Connection, submission_id: str, reason: str, actor: str) -> ActionResult:
    if not reason.strip():
        raise Invalid("hiding needs a reason", code="reason_required")
    if _hidden(conn, submission_id):
        return ActionResult("hide", submission_id, False)
    sub = tables.submissions
    conn.execute(update(sub).where(sub.c.submission_id == submission_id).values(
        hidden=True, hidden_reason=reason))
    record(conn, "hide", submission_id, reason, actor)
    return ActionResult("hide", submission_id, True)


def unhide(conn: Connection, submission_id: str, reason: str | None, actor: str) -> ActionResult:
    if not _hidden(conn, submission_id):
        return ActionResult("unhide", submission_id, False)
    sub = tables.submissions
    conn.execute(update(sub).where(sub.c.submission_id == submission_id).values(
        hidden=False, hidden_reason=None))
    record(conn, "unhide", submission_id, reason, actor)
    return ActionResult("unhide", submission_id, True)


# A submission stored quarantined (ingest.plausibility) is hidden with a reason starting
# with ``QUARANTINE_PREFIX``; a maintainer releases it (unhide) or rejects it (``reject``:
# it stays hidden, its reason starting so).
REJECTED_PREFIX = "rejected: "


def quarantined(conn: Connection) -> list[dict[str, Any]]:
    """The review view: submissions waiting in quarantine, oldest first, with the reason."""
    sub = tables.submissions
    stmt = (select(sub.c.submission_id, sub.c.key_id, sub.c.received_at, sub.c.chip,
                   sub.c.target_model, sub.c.hidden_reason)
            .where(sub.c.hidden.is_(True), sub.c.hidden_reason.startswith(QUARANTINE_PREFIX))
            .order_by(sub.c.received_at, sub.c.submission_id))
    return [{**dict(r._mapping), "received_at": r.received_at.isoformat() + "Z",
             "reason": r.hidden_reason} for r in conn.execute(stmt)]


def reject(conn: Connection, submission_id: str, reason: str, actor: str) -> ActionResult:
    """Keep a quarantined submission off the boards for good (it stays stored, hidden)."""
    if not reason.strip():
        raise Invalid("rejecting needs a reason", code="reason_required")
    sub = tables.submissions
    row = conn.execute(select(sub.c.hidden, sub.c.hidden_reason).where(
        sub.c.submission_id == submission_id)).first()
    if row is None:
        raise NotFound(f"no submission {submission_id}", {"submission_id": submission_id})
    if not (row.hidden and str(row.hidden_reason or "").startswith(QUARANTINE_PREFIX)):
        raise Invalid(f"submission {submission_id} is not in quarantine",
                      {"submission_id": submission_id}, code="not_quarantined")
    conn.execute(update(sub).where(sub.c.submission_id == submission_id).values(
        hidden_reason=f"{REJECTED_PREFIX}{reason} ({row.hidden_reason})"))
    record(conn, "reject", submission_id, reason, actor)
    return ActionResult("reject", submission_id, True)


def _check_key(key_id: str) -> None:
    if not KEY_ID.match(key_id):
        raise Invalid("a key id is 64 lowercase hex characters (sha256 of the public key)",
                            {"key_id": key_id}, code="bad_key_id")


def ban(conn: Connection, key_id: str, reason: str, actor: str) -> ActionResult:
    _check_key(key_id)
    if not reason.strip():
        raise Invalid("banning needs a reason", code="reason_required")
    bans = tables.bans
    if conn.execute(select(bans.c.key_id).where(bans.c.key_id == key_id)).first():
        return ActionResult("ban", key_id, False)
    conn.execute(insert(bans).values(key_id=key_id, reason=reason, banned_at=_now()))
    record(conn, "ban", key_id, reason, actor)
    return ActionResult("ban", key_id, True)


def unban(conn: Connection, key_id: str, reason: str | None, actor: str) -> ActionResult:
    _check_key(key_id)
    bans = tables.bans
    removed = conn.execute(delete(bans).where(bans.c.key_id == key_id)).rowcount
    if not removed:
        return ActionResult("unban", key_id, False)
    record(conn, "unban", key_id, reason, actor)
    return ActionResult("unban", key_id, True)


# The audit action by which a maintainer accepts a cohort (named by its first key): the
# board counts it as established at once (board/newkeys.py, rule 6).
ACCEPT_COHORT = "accept_cohort"


def accept_cohort(conn: Connection, key_id: str, reason: str, actor: str) -> ActionResult:
    """Record that a maintainer accepts the cohort whose first key is ``key_id`` (the caller
    checked that it is one)."""
    _check_key(key_id)
    if not reason.strip():
        raise Invalid("accepting a cohort needs a reason", code="reason_required")
    audit = tables.audit_log
    if conn.execute(select(audit.c.audit_id).where(
            audit.c.action == ACCEPT_COHORT, audit.c.target == key_id).limit(1)).first():
        return ActionResult(ACCEPT_COHORT, key_id, False)
    record(conn, ACCEPT_COHORT, key_id, reason, actor)
    return ActionResult(ACCEPT_COHORT, key_id, True)


def hide_keys(conn: Connection, key_ids: list[str], reason: str, actor: str) -> list[str]:
    """Hide every visible submission of these keys, each with its audit row (``hide``);
    the ids hidden."""
    if not reason.strip():
        raise Invalid("hiding needs a reason", code="reason_required")
    sub = tables.submissions
    visible = conn.execute(select(sub.c.submission_id).where(
        sub.c.key_id.in_(sorted(key_ids)), sub.c.hidden.is_(False))
        .order_by(sub.c.submission_id)).scalars().all()
    return [sid for sid in map(str, visible) if hide(conn, sid, reason, actor).changed]


def store_import(conn: Connection, rows: RowSet, submission_id: str, source: str,
                 actor: str) -> ActionResult:
    """Store an imported submission's rows and its audit row; refuse a second import."""
    sub = tables.submissions
    holder = conn.execute(select(sub.c.key_id, sub.c.source).where(
        sub.c.submission_id == submission_id)).first()
    if holder is not None and holder.key_id is not None:
        # Signed ids cannot be version-5 UUIDs any more (ingest.rules,
        # submission_id_not_reserved); one stored before that rule still holds it: say so.
        raise Conflict(f"submission id {submission_id} is held by a signed submission of key "
                       f"{holder.key_id}, not by an import",
                       {"submission_id": submission_id, "held_by": "signed",
                        "key_id": holder.key_id}, code="id_held_by_signed")
    if holder is not None:
        raise Conflict(f"already imported as submission {submission_id}",
                       {"submission_id": submission_id, "held_by": "import"},
                       code="already_imported")
    for table in INGEST_TABLES:
        if rows.rows[table.name]:
            core_insert(conn, table, rows.rows[table.name])
    record(conn, "import", submission_id, source, actor)
    return ActionResult("import", submission_id, True)


# --- the ad-hoc query's audit row (the query itself: store/adhoc.py) ------------------------


def record_query(conn: Connection, sql: str, actor: str) -> None:
    """Audit an ad-hoc query before it runs: target the sha256 of its text, reason the text."""
    record(conn, "query", audit_target(sql), sql, actor)
