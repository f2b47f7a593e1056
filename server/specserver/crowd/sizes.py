"""The file sizes of models as results reported them, for a draft whose own step was never
probed on the asked chip (``specschema.forecast`` then estimates it from the sizes).

The store keeps no model size beside its digest; a result's signed ``models[]`` does
(``ModelInfo.size_bytes``). One stored envelope per draft model is read: the first result
that ran it, which reports the target's size too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from sqlalchemy import Connection, select

from specschema.envelope import parse_envelope
from specschema.errors import SpecSchemaError
from specschema.payload import parse_submission
from specserver.store import tables

__all__ = ["model_sizes"]


def model_sizes(conn: Connection, submission_ids: Iterable[str]) -> dict[str, int]:
    """Per model digest, the size in bytes the first of these results that names it
    reported (results whose envelope no longer parses are passed over)."""
    env = tables.envelopes
    sizes: dict[str, int] = {}
    for submission_id in submission_ids:
        body = conn.execute(select(env.c.body).where(env.c.submission_id == submission_id)
                            ).scalar()
        if body is None:
            continue
        try:
            _, payload, _, _ = parse_envelope(json.loads(bytes(body)))
            submission = parse_submission(payload)
        except (SpecSchemaError, ValueError):
            continue
        for model in submission.models:
            if model.digest is not None and model.size_bytes:
                sizes.setdefault(model.digest, model.size_bytes)
    return sizes
