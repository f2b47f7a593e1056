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
6. **Recent graduates.** A cohort that left probation less than ``settle``
   (``SPECSERVER_COHORT_SETTLE_DAYS``, default 28) ago is *recent*; one a maintainer
   accepted (an ``accept_cohort`` audit row naming its first key) is neither new nor recent.
   Where a group's recent cohorts disagree with its established contributors, the group is
   disputed rather than taken over (``board.columns.dispute``, docs/aggregation.md).

What remains possible (many ranges, documented with numbers in docs/aggregation.md): each
range is one cohort per window, and each becomes a vote after probation; a group its recent
graduates disagree with is disputed for ``settle`` (rule 6), not taken over.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import ColumnElement, Connection, and_, func, select

from specserver.board.columns import NAT, Hashes, Ints, micros, time_column, when
from specserver.board.sql import fetch_columns
from specserver.errors import NotFound
from specserver.store import Backend, backend_of, moderation, queries, tables

DEFAULT_PROBATION_DAYS = 7.0
DEFAULT_WINDOW_HOURS = 24.0
DEFAULT_GRADUATIONS_PER_DAY = 2
DEFAULT_SETTLE_DAYS = 28.0
NEW_KEYS = "new-keys"  # the folded contributor's name
_DAY = timedelta(days=1)
_NEVER = np.iinfo(np.int64).max  # a cohort none of whose members has started to age


@dataclass(frozen=True)
class CohortRules:
    probation: timedelta
    window: timedelta  # zero: no cohorts (each key its own)
    graduations_per_day: int  # 0: no cap
    settle: timedelta = timedelta(0)  # rule 6; zero: no cohort is recent (no disputes)

    @property
    def active(self) -> bool:
        """False when probation, cohorts and recency are all off: every key is its own
        voice."""
        return (self.probation > timedelta(0) or self.window > timedelta(0)
                or self.settle > timedelta(0))

    @classmethod
    def of(cls, probation_days: float, window_hours: float = DEFAULT_WINDOW_HOURS,
           graduations_per_day: int = DEFAULT_GRADUATIONS_PER_DAY,
           settle_days: float = 0.0) -> CohortRules:
        return cls(timedelta(days=probation_days), timedelta(hours=window_hours),
                   graduations_per_day, timedelta(days=settle_days))


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
    recent: AbstractSet[str] = frozenset()  # cohort ids (rule 6)


def accepted_keys(conn: Connection) -> frozenset[str]:
    """The key ids maintainers accepted as their cohorts' first keys (rule 6)."""
    audit = tables.audit_log
    return frozenset(str(t) for t in conn.execute(
        select(audit.c.target).where(audit.c.action == moderation.ACCEPT_COHORT)
        .distinct()).scalars())


def newest_receipt(conn: Connection) -> datetime | None:
    """The store's clock: its newest submission's receipt time."""
    newest: datetime | None = conn.execute(
        select(func.max(tables.submissions.c.received_at))).scalar()
    return newest


@dataclass(frozen=True)
class ArrivalColumns:
    """``Arrival`` of many keys as columns: times as int64 microseconds since the epoch
    (``columns.NAT``: none)."""

    key_ids: Sequence[str]
    first_seen: Ints
    origin: Sequence[str | None]
    aged_from: Ints
    key_hashes: Hashes | None = None  # DuckDB's hash of each key id (``Codes``)

    def __len__(self) -> int:
        return len(self.key_ids)

    def rows(self) -> list[Arrival]:
        return [Arrival(key, when(first), origin, when(aged) if aged != NAT else None)
                for key, first, origin, aged in zip(
                    self.key_ids, self.first_seen.tolist(), self.origin,
                    self.aged_from.tolist(), strict=True)]

    @classmethod
    def of(cls, found: Iterable[Arrival]) -> ArrivalColumns:
        found = list(found)
        return cls([a.key_id for a in found],
                   np.array([micros(a.first_seen) for a in found], dtype=np.int64),
                   [a.origin for a in found],
                   np.array([micros(a.aged_from) for a in found], dtype=np.int64))


def ageing_clause(backend: Backend) -> ColumnElement[bool]:
    """Rule 2: a submission that ages its key (complete, visible, a draft result on a board).
    Whether a submission reached a board is recorded with it at ingest (store.verdicts): a
    semi-join on its summaries cost a quarter of ``arrival_columns``' query. On PostgreSQL a
    replica of the version before may have recorded nothing (tables): there the summaries
    answer for those rows."""
    sub = tables.submissions
    reached: ColumnElement[bool] = sub.c.reaches_board.is_(True)
    if backend.rolling_upgrades:
        draft = tables.summaries.alias("d")
        reached = func.coalesce(sub.c.reaches_board, sub.c.submission_id.in_(
            select(draft.c.submission_id).where(queries.reaches_board_clause(draft))))
    return sub.c.complete.is_(True) & sub.c.hidden.is_(False) & reached


def arrival_columns(conn: Connection, submission_ids: Collection[str] | None = None
                    ) -> ArrivalColumns:
    """Every key's arrival, range and ageing start, in two grouped queries; or only those
    of the keys of ``submission_ids``, which must then hold every submission of theirs."""
    sub = tables.submissions
    which: ColumnElement[bool] = sub.c.key_id.is_not(None)
    if submission_ids is not None:
        which = and_(which, sub.c.submission_id.in_(sorted(submission_ids)))
    counted = ageing_clause(backend_of(conn))
    # A key's range is that of its first submission (the smallest range among several
    # stored at that same instant), known only when that submission had one: the first
    # (receipt, range) among its submissions that have a range, if it is that early.
    ranged = sub.c.origin_hash.is_not(None)
    head = [sub.c.key_id, func.min(sub.c.received_at),
            func.min(sub.c.received_at).filter(counted)]
    if backend_of(conn).hashes_keys:
        found = fetch_columns(conn, select(
            *head, func.min(sub.c.received_at).filter(ranged),
            func.arg_min(sub.c.origin_hash, func.row(sub.c.received_at, sub.c.origin_hash)
                         ).filter(ranged), func.hash(sub.c.key_id))
            .where(which).group_by(sub.c.key_id).order_by(sub.c.key_id))
        key_ids, first_seen = [str(k) for k in found[0]], time_column(found[1])
        ranged_at, origins = time_column(found[3]), np.asarray(found[4], dtype=object)
        hashes: Hashes | None = np.asarray(found[5], dtype=np.uint64)
    else:
        found = fetch_columns(conn, select(*head).where(which).group_by(sub.c.key_id))
        key_ids, first_seen = [str(k) for k in found[0]], time_column(found[1])
        origin_at: dict[str, tuple[int, str]] = {}
        by_range = fetch_columns(conn, select(sub.c.key_id, sub.c.origin_hash,
                                              func.min(sub.c.received_at))
                                 .where(which, ranged).group_by(sub.c.key_id, sub.c.origin_hash))
        for key_id, origin, first in zip(by_range[0], by_range[1],
                                         time_column(by_range[2]).tolist(), strict=True):
            held = origin_at.get(key_id)
            if held is None or (first, origin) < held:
                origin_at[key_id] = (first, origin)
        firsts = [origin_at.get(key, (int(NAT), None)) for key in key_ids]
        ranged_at = np.array([f[0] for f in firsts], dtype=np.int64)
        origins = np.array([f[1] for f in firsts], dtype=object)
        hashes = None
    origins[ranged_at != first_seen] = None
    return ArrivalColumns(key_ids, first_seen, origins.tolist(), time_column(found[2]), hashes)


def arrivals(conn: Connection, submission_ids: Collection[str] | None = None
             ) -> list[Arrival]:
    """``arrival_columns`` as one ``Arrival`` per key."""
    return arrival_columns(conn, submission_ids).rows()


@dataclass(frozen=True)
class Cohorts:
    """Rules 1, 2 and 4 over some ranges' keys: each key's cohort, when each cohort arrived
    and when it leaves probation (None: it has not started to age)."""

    cohort_of: dict[str, str]
    arrived: dict[str, datetime]
    graduation: dict[str, datetime | None]


def standing(found: Iterable[Arrival], newest: datetime | None, rules: CohortRules,
             accepted: AbstractSet[str] = frozenset()) -> Standing:
    """Rules 1-4 and 6 over every key's arrival (pure); ``accepted``: cohorts (first keys)
    a maintainer accepted."""
    formed = cohorts(found, rules)
    new: set[str] = set()
    recent: set[str] = set()
    if rules.probation > timedelta(0) and newest is not None:
        new = {c for c, at in formed.graduation.items() if at is None or at > newest}
    if rules.settle > timedelta(0) and newest is not None:
        recent = {c for c, at in formed.graduation.items()
                  if at is not None and newest - rules.settle < at <= newest}
    return Standing(formed.cohort_of, frozenset(new - accepted), formed.arrived,
                    frozenset(recent - accepted))


def cohort_members(conn: Connection, rules: CohortRules, head: str) -> list[str]:
    """The key ids of the cohort whose first key is ``head`` (rule 1), for a maintainer
    settling a dispute; ``NotFound`` when ``head`` starts none (naming the cohort it
    belongs to, if any)."""
    cohort = cohorts(arrivals(conn), rules).cohort_of
    if cohort.get(head) != head:
        where = f": it belongs to the cohort {cohort[head]}" if head in cohort else ""
        raise NotFound(f"no cohort starts with the key {head}{where}",
                       {"cohort": head, "belongs_to": cohort.get(head)}, code="no_such_cohort")
    return sorted(k for k, c in cohort.items() if c == head)


def cohorts(found: Iterable[Arrival], rules: CohortRules) -> Cohorts:
    """``form_cohorts`` with names and datetimes."""
    arrived = ArrivalColumns.of(found)
    formed = form_cohorts(arrived, rules)
    cohort_of: dict[str, str] = {}
    arrival: dict[str, datetime] = {}
    graduation: dict[str, datetime | None] = {}
    for key, first, at in zip(arrived.key_ids, formed.first.tolist(),
                              formed.graduation.tolist(), strict=True):
        cohort = arrived.key_ids[first]
        cohort_of[key] = cohort
        if cohort == key:
            arrival[cohort] = when(int(arrived.first_seen[first]))
            graduation[cohort] = None if at == NAT else when(at)
    return Cohorts(cohort_of, arrival, graduation)


@dataclass(frozen=True)
class FormedCohorts:
    """``form_cohorts``' answer, aligned with its arrivals: each key's cohort (the index of
    the cohort's first member, whose key id names it) and that cohort's graduation
    (``NAT``: it has not started to age)."""

    first: Ints
    graduation: Ints


def form_cohorts(arrived: ArrivalColumns, rules: CohortRules,
                 ranges: Ints | None = None) -> FormedCohorts:
    """Rules 1, 2 and 4 (pure). Per range (keys without one each alone), keys in order of
    arrival (then of key id) chain into one cohort while each arrives within ``window`` of
    the one before; a cohort starts to age with its members' first ageing; of one range's
    cohorts at most ``graduations_per_day`` graduate per day. Ranges are independent of each
    other: ``board.incremental`` forms again only the ranges a change touched. ``ranges``:
    the keys' ranges already numbered (-1: none), one number per distinct range."""
    n = len(arrived)
    if n == 0:
        return FormedCohorts(np.zeros(0, np.int64), np.zeros(0, np.int64))
    if ranges is None:
        numbers: dict[str, int] = {}
        ranges = np.fromiter((-1 if o is None else numbers.setdefault(o, len(numbers))
                              for o in arrived.origin), dtype=np.int64, count=n)
    origin = ranges
    id_rank = _id_rank(arrived.key_ids)
    order = np.lexsort((id_rank, arrived.first_seen, origin))
    in_range, seen = origin[order], arrived.first_seen[order]
    chained = np.zeros(n, np.bool_)
    window = micros(rules.window)
    if window > 0:
        chained[1:] = ((in_range[1:] == in_range[:-1]) & (in_range[1:] >= 0)
                       & (seen[1:] - seen[:-1] <= window))
    starts = np.flatnonzero(~chained)
    first_position = np.maximum.accumulate(np.where(chained, 0, np.arange(n)))
    first = np.empty(n, np.int64)
    first[order] = order[first_position]
    # A cohort starts to age with the first of its members to age.
    aged = arrived.aged_from[order]
    aged = np.minimum.reduceat(np.where(aged == NAT, _NEVER, aged), starts)
    heads = order[starts]
    graduation = np.where(aged == _NEVER, NAT, aged + micros(rules.probation))
    cap = rules.graduations_per_day
    if cap > 0:
        _cap_graduations(graduation, origin[heads], id_rank[heads], cap)
    by_head = np.full(n, NAT, np.int64)
    by_head[heads] = graduation
    return FormedCohorts(first, by_head[first])


def _id_rank(key_ids: Sequence[str]) -> Ints:
    """Each key id's place among them in the order Python compares str (code points).
    ``arrival_columns`` reads them in that order on DuckDB (its VARCHAR order is UTF-8's
    bytes, which is code point order), so a check in C is all it costs there; otherwise
    (PostgreSQL's collations, a range's keys in code order) a fixed-width array is sorted."""
    n = len(key_ids)
    if all(map(operator.lt, key_ids, itertools.islice(key_ids, 1, None))):
        return np.arange(n, dtype=np.int64)
    id_rank = np.empty(n, np.int64)
    id_rank[np.argsort(np.array(key_ids, dtype=str), kind="stable")] = np.arange(n)
    return id_rank


def _cap_graduations(graduation: Ints, origin: Ints, id_rank: Ints, cap: int) -> None:
    """Rule 4 in place over cohorts (their eligibility, range and id's rank): within a
    range, in order of eligibility (then id), the i-th graduates no earlier than one day
    after the (i - cap)-th did. Only ranges with more than ``cap`` ageing cohorts change."""
    ageing = (graduation != NAT) & (origin >= 0)
    per_range = np.bincount(origin[ageing], minlength=1) if ageing.any() else np.zeros(1)
    crowded = np.flatnonzero(per_range > cap)
    day = micros(_DAY)
    for crowd in crowded.tolist():
        members = np.flatnonzero(ageing & (origin == crowd))
        members = members[np.lexsort((id_rank[members], graduation[members]))]
        times: list[int] = []
        for at_index in members.tolist():
            at = int(graduation[at_index])
            if len(times) >= cap:
                at = max(at, times[-cap] + day)
            times.append(at)
            graduation[at_index] = at
