"""Per-position acceptance as the store keeps it (pure; no SQLAlchemy: the check workers
build rows with it).

A trial's ``accepted_per_position`` (its counters' list: per draft position i from 0, the
rounds whose first i + 1 drafted tokens were all accepted) is stored as compact JSON text,
``[13,8,3]``, beside its ``rounds``; a config's ``summaries`` row holds its trials' sums
the same way. Text, not a list column: DuckDB's lists and PostgreSQL's arrays differ, no
read filters on it in SQL, and the exports carry it as it is stored.

``stored_profile`` is the acceptance per position of stored rows, with
``specschema.breakdown``'s rule (one copy: the submission page computes it from the signed
trials with ``acceptance_of``, which uses the same two steps).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from specschema.breakdown import position_rates, position_totals

__all__ = ["positions_of", "positions_text", "stored_profile", "stored_totals"]

StoredUnit = tuple[int | None, str | None]  # (rounds, accepted_per_position) as stored


def positions_text(counts: Sequence[int] | None) -> str | None:
    """The stored text of a list of counts (None stays None). For whole numbers, what
    ``json.dumps(counts, separators=(",", ":"))`` writes, at a fifth of its cost (a list's
    repr without its spaces): it runs for every trial with counters on the ingest path."""
    if counts is None:
        return None
    return repr(counts if type(counts) is list else list(counts)).replace(" ", "")


def positions_of(text: str | None) -> list[int] | None:
    """The list stored as ``text`` (None stays None)."""
    if text is None:
        return None
    value = json.loads(text)
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"not a stored list of counts: {text[:80]!r}")
    return value


def stored_totals(rows: Iterable[StoredUnit]) -> tuple[int, tuple[int, ...]] | None:
    """``position_totals`` of stored (rounds, accepted_per_position) rows."""
    return position_totals((rounds, positions_of(text)) for rounds, text in rows)


def stored_profile(rows: Iterable[StoredUnit]) -> tuple[float, ...] | None:
    """The acceptance per draft position (a_i, ``specschema.breakdown``) of the stored rows
    of a set of trials (their ``trials`` rows with counters) or of configs (their
    ``summaries`` rows, each its trials' sums: the same a_i as all their trials'). None
    when a row did not record both values, as ``acceptance_of`` says for trials: for a
    group, pass the rows whose ``rounds`` is not null to get the profile of the configs
    that recorded one."""
    totals = stored_totals(rows)
    return None if totals is None else position_rates(*totals)
