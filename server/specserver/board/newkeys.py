"""Sybil resistance on the board: cohorts that stay one voice, keys that must age to count.

Keys are free, and waiting is free too. The first rule (new keys weigh as one contributor
until they age) stopped a hasty flood; a patient one aged 30 keys from one address with one
hidden submission each and read 2.96x after probation. The rules now (docs/aggregation.md,
"Many keys"), all computed from stored data only, so one data version gives one board on
every replica:

1. **Cohorts.** Each key *arrives* with its first stored submission, from an address range
   (``submissions.origin_hash``: a keyed hash of the IPv4 /24 or IPv6 /48, store/origins.py).
   Keys of one range whose arrivals follow each other within ``window``
   (``SPECSERVER_COHORT_WINDOW_HOURS``, default 24) form one *cohort*, chained: a key
   arriving within the window of any earlier member joins. A cohort is **one contributor
   for good**, after probation too: its members' per-contributor medians are reduced to
   one median per group. Keys with no known range (stored before the rule, imports) are
   each their own cohort.
2. **Ageing counts only what reached a board.** A cohort starts to age with its first
   complete, visible submission that has a draft result on the speedup board or the noise
   floor; a hidden, quarantined or incomplete submission ages nothing.
3. **Probation.** A cohort is *new* until ``probation`` (``SPECSERVER_NEW_KEY_PROBATION_
   DAYS``, default 7) has passed since it started to age, measured to the store's newest
   submission. All new cohorts of a group together are one contributor, the *block of new
   keys*, whose result is the median of the cohorts' medians (each cohort one voice inside
   it too: on a fresh store, 50 keys of one range do not outvote 5 newcomers of 5 ranges).
4. **Graduation cap.** Of one range's cohorts, at most ``graduations_per_day``
   (``SPECSERVER_RANGE_GRADUATIONS_PER_DAY``, default 2) leave probation per day: the
   i-th cohort to become eligible graduates no earlier than one day after the
   (i - cap)-th did. Keys spaced out to form many cohorts still gain votes only slowly.
5. **Arrived together.** A group of at least ``min_contributors`` contributors (cohorts and
   imported rows) where more than half of the cohorts arrived within one window is flagged
   (``arrived_together``): a reader sees that its voices appeared at once.

What remains possible (many ranges, documented with numbers in docs/aggregation.md): each
range is one cohort per window, and each becomes a vote after probation.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Connection, and_, func, select

from specschema.stats import median
from specserver.board.aggregate import (
    BOARD_VERDICTS,
    NOISE_VERDICTS,
    ContributorResult,
    KeyValue,
)
from specserver.board.sql import board_clause, plain_rows
from specserver.store import tables

DEFAULT_PROBATION_DAYS = 7.0
DEFAULT_WINDOW_HOURS = 24.0
DEFAULT_GRADUATIONS_PER_DAY = 2
NEW_KEYS = "new-keys"  # the folded contributor's name
# ContributorResult's leading fields; every field after them is a count, summed when folding.
_HEAD = ("key", "contributor", "submissions", "speedup", "speedup_wall", "baseline_tps")
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class CohortRules:
    probation: timedelta
    window: timedelta  # zero: no cohorts (each key its own)
    graduations_per_day: int  # 0: no cap

    @property
    def active(self) -> bool:
        """False when probation and cohorts are both off: every key is its own voice."""
        return self.probation > timedelta(0) or self.window > timedelta(0)

    @classmethod
    def of(cls, probation_days: float, window_hours: float = DEFAULT_WINDOW_HOURS,
           graduations_per_day: int = DEFAULT_GRADUATIONS_PER_DAY) -> CohortRules:
        return cls(timedelta(days=probation_days), timedelta(hours=window_hours),
                   graduations_per_day)


@dataclass(frozen=True)
class Arrival:
    """One key as the rules see it."""

    key_id: str
    first_seen: datetime  # its first stored submission, of any kind
    origin: str | None  # that submission's origin_hash
    aged_from: datetime | None  # its first complete, visible submission on a board


@dataclass(frozen=True)
class Standing:
    """Each key's cohort, which cohorts are new, and when each cohort arrived."""

    cohort_of: Mapping[str, str]
    new: AbstractSet[str]  # cohort ids
    arrived: Mapping[str, datetime]  # cohort id -> its first member's first_seen


def newest_receipt(conn: Connection) -> datetime | None:
    """The store's clock: its newest submission's receipt time."""
    newest: datetime | None = conn.execute(
        select(func.max(tables.submissions.c.received_at))).scalar()
    return newest


def arrivals(conn: Connection, submission_ids: Collection[str] | None = None
             ) -> list[Arrival]:
    """Every key's arrival, range and ageing start, in two grouped queries; or only those
    of the keys of ``submission_ids``, which must then hold every submission of theirs."""
    sub = tables.submissions
    draft = tables.summaries.alias("d")
    reached = (select(draft.c.submission_id)
               .where(draft.c.role == "draft",
                      draft.c.observed.in_(sorted(BOARD_VERDICTS | NOISE_VERDICTS)),
                      board_clause(draft)))
    which: ColumnElement[bool] = sub.c.key_id.is_not(None)
    if submission_ids is not None:
        ids = sorted(submission_ids)
        which = and_(which, sub.c.submission_id.in_(ids))
        reached = reached.where(draft.c.submission_id.in_(ids))
    counted = (sub.c.complete.is_(True) & sub.c.hidden.is_(False)
               & sub.c.submission_id.in_(reached))
    keys = plain_rows(conn.execute(
        select(sub.c.key_id, func.min(sub.c.received_at),
               func.min(sub.c.received_at).filter(counted))
        .where(which).group_by(sub.c.key_id)))
    origin_at: dict[str, tuple[datetime, str]] = {}
    for key_id, origin, first in plain_rows(conn.execute(
            select(sub.c.key_id, sub.c.origin_hash, func.min(sub.c.received_at))
            .where(which, sub.c.origin_hash.is_not(None))
            .group_by(sub.c.key_id, sub.c.origin_hash))):
        held = origin_at.get(key_id)
        if held is None or (first, origin) < held:
            origin_at[key_id] = (first, origin)
    found = []
    for key_id, first_seen, aged_from in keys:
        origin = origin_at.get(key_id)
        found.append(Arrival(str(key_id), first_seen,
                             origin[1] if origin is not None and origin[0] == first_seen
                             else None, aged_from))
    return found


@dataclass(frozen=True)
class Cohorts:
    """Rules 1, 2 and 4 over some ranges' keys: each key's cohort, when each cohort arrived
    and when it leaves probation (None: it has not started to age)."""

    cohort_of: dict[str, str]
    arrived: dict[str, datetime]
    graduation: dict[str, datetime | None]


def standing(found: Iterable[Arrival], newest: datetime | None, rules: CohortRules
             ) -> Standing:
    """Rules 1-4 over every key's arrival (pure)."""
    formed = cohorts(found, rules)
    new: set[str] = set()
    if rules.probation > timedelta(0) and newest is not None:
        new = {c for c, at in formed.graduation.items() if at is None or at > newest}
    return Standing(formed.cohort_of, frozenset(new), formed.arrived)


def cohorts(found: Iterable[Arrival], rules: CohortRules) -> Cohorts:
    """Rules 1, 2 and 4 (pure). Ranges are independent of each other, and so is each key
    without a range: ``board.incremental`` recomputes only the ranges a change touched."""
    by_origin: dict[str | None, list[Arrival]] = {}
    for arrival in found:
        by_origin.setdefault(arrival.origin, []).append(arrival)
    cohort_of: dict[str, str] = {}
    arrived: dict[str, datetime] = {}
    aged: dict[str, datetime | None] = {}
    origin_of: dict[str, str | None] = {}
    for origin, members in by_origin.items():
        members.sort(key=lambda a: (a.first_seen, a.key_id))
        cohort: str | None = None
        last: datetime | None = None
        for arrival in members:
            chained = (origin is not None and rules.window > timedelta(0) and last is not None
                       and arrival.first_seen - last <= rules.window)
            if not chained or cohort is None:
                cohort = arrival.key_id
                arrived[cohort] = arrival.first_seen
                aged[cohort] = None
                origin_of[cohort] = origin
            cohort_of[arrival.key_id] = cohort
            last = arrival.first_seen
            start = aged[cohort]
            if arrival.aged_from is not None and (start is None or arrival.aged_from < start):
                aged[cohort] = arrival.aged_from
    graduation = _graduations(aged, origin_of, rules)
    return Cohorts(cohort_of, arrived, {c: graduation.get(c) for c in arrived})


def _graduations(aged: dict[str, datetime | None], origin_of: dict[str, str | None],
                 rules: CohortRules) -> dict[str, datetime]:
    """When each cohort that has started to age leaves probation (rule 4's cap per range)."""
    ranges: dict[str | None, list[tuple[datetime, str]]] = {}
    for cohort, start in aged.items():
        if start is not None:
            ranges.setdefault(origin_of[cohort], []).append((start + rules.probation, cohort))
    graduation: dict[str, datetime] = {}
    cap = rules.graduations_per_day
    for origin, eligible in ranges.items():
        eligible.sort()
        times: list[datetime] = []
        for at, cohort in eligible:
            if origin is not None and cap > 0 and len(times) >= cap:
                at = max(at, times[-cap] + _DAY)
            times.append(at)
            graduation[cohort] = at
    return graduation


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def _merged(key: tuple[KeyValue, ...], name: str, members: Sequence[ContributorResult]
            ) -> ContributorResult:
    if len(members) == 1 and members[0].contributor == name:
        return members[0]
    if tuple(ContributorResult._fields[:len(_HEAD)]) != _HEAD:
        raise TypeError("ContributorResult's leading fields changed: update newkeys._HEAD")
    counts = ContributorResult._fields[len(_HEAD):]
    return ContributorResult(
        key, name, sum(m.submissions for m in members),
        _median([m.speedup for m in members]), _median([m.speedup_wall for m in members]),
        _median([m.baseline_tps for m in members]),
        *(sum(getattr(m, field) for m in members) for field in counts),
    )


def fold(reduced: Iterable[ContributorResult], held: Standing) -> list[ContributorResult]:
    """Per group: each cohort's keys as one contributor (named by the cohort), and every
    new cohort together as one more (``NEW_KEYS``, the median of the cohorts' medians).
    Imported rows and keys outside ``held`` are unchanged. Established contributors keep
    their first member's position; the block comes last."""
    order: list[tuple[tuple[KeyValue, ...], str]] = []
    cohorts: dict[tuple[tuple[KeyValue, ...], str], list[ContributorResult]] = {}
    for item in reduced:
        cohort = held.cohort_of.get(item.contributor, item.contributor)
        slot = (item.key, cohort)
        if slot not in cohorts:
            cohorts[slot] = []
            order.append(slot)
        cohorts[slot].append(item)
    kept: list[ContributorResult] = []
    blocks: dict[tuple[KeyValue, ...], list[ContributorResult]] = {}
    for slot in order:
        key, cohort = slot
        one = _merged(key, cohort, cohorts[slot])
        if cohort in held.new:
            blocks.setdefault(key, []).append(one)
        else:
            kept.append(one)
    kept.extend(_merged(key, NEW_KEYS, members) for key, members in blocks.items())
    return kept


def arrived_together(reduced: Iterable[ContributorResult], held: Standing, window: timedelta,
                     min_contributors: int) -> frozenset[tuple[KeyValue, ...]]:
    """Rule 5: the keys of the groups where more than half of the contributors (cohorts
    and imported rows) are cohorts that arrived within one window."""
    units: dict[tuple[KeyValue, ...], dict[str, datetime | None]] = {}
    for item in reduced:
        cohort = held.cohort_of.get(item.contributor)
        name = cohort if cohort is not None else item.contributor
        units.setdefault(item.key, {})[name] = (
            held.arrived.get(cohort) if cohort is not None else None)
    flagged = set()
    for key, members in units.items():
        if len(members) < max(min_contributors, 2):
            continue
        times = sorted(t for t in members.values() if t is not None)
        most, start = 0, 0
        for end, at in enumerate(times):
            while at - times[start] > window:
                start += 1
            most = max(most, end - start + 1)
        if 2 * most > len(members):
            flagged.add(key)
    return frozenset(flagged)
