"""Maintainer actions on an open connection: hide, unhide, ban, unban, import, read-only SQL.

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
from specserver.store import tables
from specserver.store.tables import INGEST_TABLES, RowSet
from specserver.store.writer import core_insert

KEY_ID = re.compile(r"^[0-9a-f]{64}$")
QUERY_ROW_LIMIT = 10_000


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
    conn.execute(insert(tables.audit_log).values(
        audit_id=str(uuid.uuid4()), at=_now(), action=action, target=target, reason=reason,
        actor=actor))


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


def store_import(conn: Connection, rows: RowSet, submission_id: str, source: str,
                 actor: str) -> ActionResult:
    """Store an imported submission's rows and its audit row; refuse a second import."""
    sub = tables.submissions
    if conn.execute(select(sub.c.submission_id).where(
            sub.c.submission_id == submission_id)).first():
        raise Conflict(f"already imported as submission {submission_id}",
                       {"submission_id": submission_id}, code="already_imported")
    for table in INGEST_TABLES:
        if rows.rows[table.name]:
            core_insert(conn, table, rows.rows[table.name])
    record(conn, "import", submission_id, source, actor)
    return ActionResult("import", submission_id, True)


# --- read-only SQL ------------------------------------------------------------------------

READ_STARTS = ("select", "with", "show", "describe", "explain", "summarize", "values", "table",
               "from")
WRITE_WORDS = frozenset({
    "insert", "update", "delete", "merge", "upsert", "truncate", "drop", "create",
    "alter", "copy", "attach", "detach", "install", "load", "pragma", "set", "reset", "call",
    "export", "import", "checkpoint", "force", "vacuum", "grant", "revoke", "comment", "begin",
    "commit", "rollback", "abort", "lock", "prepare", "execute", "deallocate", "use",
    "nextval", "setval", "into",
})
_STRINGS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/", re.S)


class WriteRefused(Invalid):
    code = "not_read_only"


def check_read_only(sql: str) -> str:
    """The statement, stripped, if it is one read-only statement; else WriteRefused.

    A keyword screen (outside string literals and comments) first; the query then runs in
    a transaction that is rolled back (and is READ ONLY on PostgreSQL).
    """
    statement = sql.strip().rstrip(";").strip()
    bare = _STRINGS.sub(" ", statement).lower()
    if not statement:
        raise WriteRefused("empty query")
    if ";" in bare:
        raise WriteRefused("one statement only")
    words = re.findall(r"[a-z_]+", bare)
    if not words or words[0] not in READ_STARTS:
        raise WriteRefused(f"only read-only queries are allowed (start with one of: "
                           f"{', '.join(READ_STARTS)})")
    writes = sorted(WRITE_WORDS.intersection(words))
    if writes:
        raise WriteRefused(f"refusing a query containing {', '.join(writes)}: read-only only",
                           {"words": writes})
    return statement


def run_read_only(conn: Connection, sql: str, limit: int = QUERY_ROW_LIMIT) -> dict[str, Any]:
    """Columns and rows (at most ``limit``); nothing the query does is kept.

    Runs in its own transaction on ``conn`` (which must have none open), rolled back.
    """
    from sqlalchemy import text

    statement = check_read_only(sql)
    if conn.in_transaction():
        raise ValueError("run_read_only needs a connection without an open transaction")
    transaction = conn.begin()
    try:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SET TRANSACTION READ ONLY"))
        result = conn.execute(text(statement))
        columns = list(result.keys())
        rows = [list(r) for r in result.fetchmany(limit + 1)]
    finally:
        transaction.rollback()
    return {"columns": columns, "rows": rows[:limit], "truncated": len(rows) > limit}
