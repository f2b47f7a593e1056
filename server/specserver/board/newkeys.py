"""Sybil resistance on the board: new keys weigh as one contributor until they age.

Keys are free. Issue 15: one address, 50 freshly generated keys, 0.6 s, and the Apple M2 /
spec_4 median moved from 1.10x (5 honest contributors) to 3.01x, because rule 3 ("one
contributor cannot dominate") counted every key as a contributor.

The rule (docs/aggregation.md, "Many keys"): a key is *new* while its first stored
submission is less than ``probation_days`` (``SPECSERVER_NEW_KEY_PROBATION_DAYS``, default
7) older than the store's newest submission. Within a group, every new key's per-contributor
result is folded into **one** contributor, the block of new keys, whose speedup is the
median of theirs. Established contributors keep one vote each. So 50 new keys are one vote
against 5 established ones, and a flood can move the median by at most what one contributor
can. On a board where every key is new (a fresh deployment) the block is the only
contributor of each group and holds the median of all of them; such groups say
``few_results``, which is true.

Why the newest submission and not the wall clock: the board is cached per data version
(``leaderboard``); a rule that depends only on the stored data gives the same board for the
same data, on every replica. Why not refuse keys: an honest newcomer's result is still shown
(in the block) at once; it gains its own vote by waiting, not by asking anyone.

What this does not stop (documented there): keys aged in advance (submitted once, harmlessly,
``probation_days`` before an attack) count one each afterwards; nothing here limits how many
keys one address range creates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta

from sqlalchemy import Connection, func, select

from specschema.stats import median
from specserver.board.aggregate import ContributorResult, KeyValue
from specserver.store import tables

DEFAULT_PROBATION_DAYS = 7.0
NEW_KEYS = "new-keys"  # the folded contributor's name
# ContributorResult's leading fields; every field after them is a count, summed when folding.
_HEAD = ("key", "contributor", "submissions", "speedup", "speedup_wall", "baseline_tps")


def new_key_ids(conn: Connection, probation_days: float) -> frozenset[str]:
    """Keys whose first stored submission is within ``probation_days`` of the newest one."""
    if probation_days <= 0:
        return frozenset()
    sub = tables.submissions
    newest = conn.execute(select(func.max(sub.c.received_at))).scalar()
    if newest is None:
        return frozenset()
    cutoff = newest - timedelta(days=probation_days)
    stmt = (select(sub.c.key_id).where(sub.c.key_id.is_not(None)).group_by(sub.c.key_id)
            .having(func.min(sub.c.received_at) > cutoff))
    return frozenset(str(row[0]) for row in conn.execute(stmt))


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def fold_new_keys(reduced: Iterable[ContributorResult], new_keys: frozenset[str]
                  ) -> list[ContributorResult]:
    """Per group, the new keys' results as one contributor (medians of their medians,
    counts summed); every other contributor unchanged, in its original order."""
    if not new_keys:
        return list(reduced)
    kept: list[ContributorResult] = []
    blocks: dict[tuple[KeyValue, ...], list[ContributorResult]] = {}
    for item in reduced:
        if item.contributor in new_keys:
            blocks.setdefault(item.key, []).append(item)
        else:
            kept.append(item)
    if tuple(ContributorResult._fields[:len(_HEAD)]) != _HEAD:
        raise TypeError("ContributorResult's leading fields changed: update newkeys._HEAD")
    counts = ContributorResult._fields[len(_HEAD):]
    for key, members in blocks.items():
        kept.append(ContributorResult(
            key, NEW_KEYS, sum(m.submissions for m in members),
            _median([m.speedup for m in members]), _median([m.speedup_wall for m in members]),
            _median([m.baseline_tps for m in members]),
            *(sum(getattr(m, name) for m in members) for name in counts),
        ))
    return kept
