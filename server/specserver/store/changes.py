"""The change log: which contributors each write touched, for the board maintained by change.

Every transaction that stores submissions or writes an audit row (hide, unhide, reject, ban,
unban, import, an ad-hoc query) calls ``mark`` as its last step, in the same transaction:
it bumps ``board_clock.seq`` and writes one ``board_changes`` row per touched contributor
under that number. The clock's row lock is held until the commit, so on PostgreSQL a second
replica's write waits there and takes the next number after the first one committed:
sequence numbers follow commit order, and a reader that sees the clock at n sees every
change numbered up to n (``since``). On DuckDB, where one writer thread makes every write
(a file admits one process), the number is the log's largest plus one, in one statement.

A contributor is what the board reduces to one voice before its rules: the key id, or
``imported:<submission id>`` for a row without one (``board.sql.contributor_of``).

What the log cannot see, a reader checks: every stored submission and every audit row is
counted in the log (``submissions``, ``audits``), so a write that bypassed it (a test's
direct insert, a restored backup) shows as counts that do not add up, and the reader
recomputes everything instead of trusting the log (``board/incremental.py``). What no
count shows is an UPDATE made by hand without an audit row (every product path writes one;
a migration changes the schema version, which also makes readers recompute): a maintained
board then stays stale until the server restarts.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, delete, func, insert, select, text

from specserver.store import tables
from specserver.store.backend import backend_of

IMPORTED = "imported:"
# Every PRUNE_EVERY-th logging transaction of a process deletes the entries numbered more
# than KEEP below the newest. A reader further behind than that finds counts the log no
# longer accounts for and rebuilds (every entry counts a submission or an audit row), so
# pruning never makes a board wrong; it bounds the log (about one row per contributor and
# batch) to the last KEEP transactions.
PRUNE_EVERY = 1000
KEEP = 100_000
_marks = itertools.count(1)
_BUMP = "UPDATE board_clock SET seq = seq + 1 WHERE id = 1 RETURNING seq"
_START = "INSERT INTO board_clock (id, seq) VALUES (1, 0) ON CONFLICT DO NOTHING"


def contributor_of(submission_id: str, key_id: str | None) -> str:
    return key_id if key_id is not None else IMPORTED + submission_id


def stored_contributors(submission_rows: Iterable[tuple[object, ...]]) -> Counter[str]:
    """Submissions per contributor among ``submissions`` table rows (id first, key second)."""
    return Counter(contributor_of(str(row[0]), None if row[1] is None else str(row[1]))
                   for row in submission_rows)


def start_clock(conn: Connection) -> None:
    """The clock's one row (the migrations create it with the table)."""
    conn.execute(text(_START))


def mark(conn: Connection, submissions: Mapping[str, int] | None = None,
         audits: Mapping[str | None, int] | None = None) -> None:
    """Log this transaction's changes: submissions stored and audit rows written, per
    contributor (``None``: an audit row that touches no contributor)."""
    if not submissions and not audits:
        return
    stored = submissions or {}
    audited = audits or {}
    rows = [(who, stored.get(who, 0) if who else 0, audited.get(who, 0))
            for who in {*stored, *audited}]
    if next(_marks) % PRUNE_EVERY == 0:
        conn.execute(delete(tables.board_changes).where(
            tables.board_changes.c.seq < select(func.max(tables.board_changes.c.seq))
            .scalar_subquery() - KEEP))
    if backend_of(conn).one_writer:
        # One statement (each costs the writer ~0.5 ms of CPU on DuckDB): the number is the
        # log's largest plus one, safe because one writer thread makes every write to a
        # DuckDB store (a file admits one process), so there is no commit order to keep.
        values = ", ".join(["(CAST(? AS VARCHAR), CAST(? AS INTEGER), CAST(? AS INTEGER))"]
                           * len(rows))
        conn.exec_driver_sql(
            "INSERT INTO board_changes (seq, contributor, submissions, audits) "
            "SELECT (SELECT coalesce(max(seq), 0) + 1 FROM board_changes), * "
            f"FROM (VALUES {values})", tuple(v for row in rows for v in row))
        return
    seq = conn.exec_driver_sql(_BUMP).scalar()
    if seq is None:  # a store created from the table definitions alone (tests)
        start_clock(conn)
        seq = conn.exec_driver_sql(_BUMP).scalar()
    if seq is None:
        raise RuntimeError("board_clock has no row after starting it")
    conn.execute(insert(tables.board_changes), [
        {"seq": seq, "contributor": who, "submissions": n, "audits": a} for who, n, a in rows])


def audit_contributor(conn: Connection, action: str, target: str) -> str | None:
    """The contributor an audit row's action touches: a ban's key, an accepted cohort's
    first key, a hidden or imported submission's contributor; none for an ad-hoc query."""
    if action in ("ban", "unban", "accept_cohort"):
        return target
    if action == "query":
        return None
    sub = tables.submissions
    found = conn.execute(select(sub.c.key_id).where(sub.c.submission_id == target)).first()
    return contributor_of(target, found[0] if found is not None else None)


@dataclass(frozen=True)
class Position:
    """Where the log stands in one snapshot, with the counts the log must account for."""

    seq: int
    submissions: int
    audits: int


def position(conn: Connection) -> Position:
    clock = (select(func.max(tables.board_changes.c.seq)) if backend_of(conn).one_writer
             else select(tables.board_clock.c.seq).where(tables.board_clock.c.id == 1))
    row = conn.execute(select(
        clock.scalar_subquery(),
        select(func.count()).select_from(tables.submissions).scalar_subquery(),
        select(func.count()).select_from(tables.audit_log).scalar_subquery(),
    )).one()
    return Position(int(row[0] or 0), int(row[1]), int(row[2]))


@dataclass(frozen=True)
class Changes:
    contributors: frozenset[str]
    submissions: int  # stored in the range
    audits: int


def since(conn: Connection, after: int, upto: int) -> Changes:
    """The changes numbered after ``after`` up to ``upto`` (a ``position``'s seq)."""
    log = tables.board_changes
    rows = conn.execute(select(log.c.contributor, log.c.submissions, log.c.audits)
                        .where(log.c.seq > after, log.c.seq <= upto)).all()
    return Changes(frozenset(str(r[0]) for r in rows if r[0] is not None),
                   sum(int(r[1]) for r in rows), sum(int(r[2]) for r in rows))
