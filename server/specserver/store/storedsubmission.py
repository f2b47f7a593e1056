"""A stored submission as its envelope says it: the signed bytes parsed again, for the reads
that need what the rows do not keep (a model's size, a map result's per-domain rows)."""

from __future__ import annotations

import json

from sqlalchemy import Connection, select

from specschema import Submission
from specschema.envelope import parse_envelope
from specschema.errors import SpecSchemaError
from specschema.payload import parse_submission
from specserver.store import tables

__all__ = ["stored_submission"]


def stored_submission(conn: Connection, submission_id: str) -> Submission | None:
    """The submission its stored envelope holds; None when no envelope is stored or its
    bytes no longer parse (a wire rule tightened since: such a result is passed over)."""
    env = tables.envelopes
    body = conn.execute(select(env.c.body).where(env.c.submission_id == submission_id)).scalar()
    if body is None:
        return None
    try:
        _, payload, _, _ = parse_envelope(json.loads(bytes(body)))
        return parse_submission(payload)
    except (SpecSchemaError, ValueError):
        return None
