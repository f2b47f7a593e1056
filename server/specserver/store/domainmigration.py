"""Store version 15: ``domain_results``, filled for the results stored before it.

Only a submission whose protocol has a prompt set has rows; its per-domain results are
computed from the signed trials in its stored envelope by ingestion's own rule
(``store.domainrows``), so a stored result reads on the board as a new one would. Such
submissions are found by their protocol id (the shipped protocols with a prompt set), a
handful on any store, and read one by one.
"""

from __future__ import annotations

from sqlalchemy import Connection, insert, inspect, select

from specschema.protocol_files import all_protocols
from specserver.store import tables
from specserver.store.domainrows import DOMAIN_COLUMNS, domain_rows
from specserver.store.rowset import id_digest
from specserver.store.storedsubmission import stored_submission

__all__ = ["add_domain_results"]


def _with_prompt_sets() -> list[str]:
    return sorted({p.id for p in all_protocols() if p.prompts})


def add_domain_results(conn: Connection) -> None:
    """The table (unless there), and the rows of the stored results with a prompt set. An
    envelope that no longer parses (none should) keeps its result "unspecified"."""
    table = tables.domain_results
    if not inspect(conn).has_table(table.name):
        table.create(conn)
    sub = tables.submissions
    ids = [r[0] for r in conn.execute(
        select(sub.c.submission_id).where(sub.c.protocol_id.in_(_with_prompt_sets()))
        .order_by(sub.c.submission_id))]
    done = {r[0] for r in conn.execute(select(table.c.submission_id).distinct())}
    for submission_id in ids:
        if submission_id in done:
            continue
        submission = stored_submission(conn, submission_id)
        if submission is None:
            continue
        rows = domain_rows(submission, submission_id, id_digest(submission_id))
        if rows:
            conn.execute(insert(table), [dict(zip(DOMAIN_COLUMNS, row, strict=True))
                                         for row in rows])
