"""The file sizes of models as results reported them, for a draft whose own step was never
probed on the asked chip (``specschema.forecast`` then estimates it from the sizes).

The store keeps no model size beside its digest; a result's signed ``models[]`` does
(``ModelInfo.size_bytes``). One stored envelope per draft model is read: the first result
that ran it, which reports the target's size too.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection

from specserver.store import stored_submission

__all__ = ["model_sizes"]


def model_sizes(conn: Connection, submission_ids: Iterable[str]) -> dict[str, int]:
    """Per model digest, the size in bytes the first of these results that names it
    reported (results whose envelope no longer parses are passed over)."""
    sizes: dict[str, int] = {}
    for submission_id in submission_ids:
        submission = stored_submission(conn, submission_id)
        if submission is None:
            continue
        for model in submission.models:
            if model.digest is not None and model.size_bytes:
                sizes.setdefault(model.digest, model.size_bytes)
    return sizes
