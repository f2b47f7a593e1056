"""The leaderboard maintained by change: a read after a write costs what the write touched.

The full computation (``compute``) reduces every contributor's rows per group in SQL, forms
every key's cohort, and applies the rules of ``aggregate`` and ``newkeys``. ``Maintainer``
keeps, per board (filters, dimensions, view), what that computation builds — each group's
per-contributor results and aggregate, each contributor's verdict and evidence counts —
and brings it up to date from the store's change log (``store/changes.py``):

1. the log names the contributors whose rows changed since the last refresh (ingest,
   hide, unhide, ban, unban, import, quarantine and its release: every write logs them);
2. their per-contributor results are read again, in SQL restricted to them (the same
   query as the full computation, so the same medians to the last bit);
3. the cohorts of their address ranges are formed again (``newkeys.cohorts``: ranges are
   independent), and the store's clock (its newest receipt) moving past a cohort's
   graduation ends its probation (time passing is a change too);
4. only the groups holding a changed contributor or a key whose standing changed are
   aggregated again, by the same functions as the full computation.

The full computation runs instead when there is nothing to build on: the first read, a new
schema version (a migration), or counts the log does not account for (a write that
bypassed it: every stored submission and every audit row must appear in the log). A test
holds the maintained board equal to ``compute`` after random writes, on DuckDB and
PostgreSQL (``tests/server/board/test_incremental.py``).

Under concurrency: a refresh reads the log's position, the changes and the restricted
rows in one snapshot (``snapshot``: PostgreSQL's REPEATABLE READ; DuckDB's transaction),
and the log's numbers follow commit order (``store/changes.py``), so a change is either
in the snapshot with its number or numbered after the position read. Several server
processes each maintain their own boards from the one log.
"""

from __future__ import annotations

import heapq
import threading
from collections import Counter, OrderedDict
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, func, literal, select

from specschema.evidence import LEVELS
from specserver.board import aggregate, newkeys, sql
from specserver.board.aggregate import ContributorResult, GroupAggregate, KeyValue, View
from specserver.store import changes, current_version, queries, tables

KeyTuple = tuple[KeyValue, ...]
Spec = tuple[queries.Filters, tuple[str, ...], View]
DEFAULT_BOARDS = 8  # boards maintained at once (each holds a row per group and contributor)


@dataclass(frozen=True)
class Computed:
    """What a board read needs: its groups (key order, labelled) and the filters' counts."""

    groups: list[GroupAggregate]
    verdict_counts: dict[str, int]
    evidence_counts: dict[str, int]


@contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """A connection whose reads all see one snapshot of the store."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        yield conn


def finish(reduced: list[ContributorResult], dimensions: tuple[str, ...],
           held: newkeys.Standing, rules: newkeys.CohortRules,
           min_contributors: int) -> list[GroupAggregate]:
    """Per-contributor results to the board's groups: cohorts and the block of new keys
    folded (newkeys.py), groups aggregated and flagged, labels told apart."""
    together = newkeys.arrived_together(reduced, held, rules.window, min_contributors)
    folded = newkeys.fold(reduced, held)
    groups = aggregate.aggregate_contributors(folded, dimensions, min_contributors)
    groups = [replace(g, arrived_together=True) if aggregate.flat_key(g) in together else g
              for g in groups]
    return aggregate.distinct_labels(groups)  # one name, several models: told apart


def compute(conn: Connection, filters: queries.Filters, dimensions: tuple[str, ...],
            view: View, rules: newkeys.CohortRules, min_contributors: int,
            held: newkeys.Standing | None = None) -> Computed:
    """The full computation of one board from the store."""
    if held is None:
        held = (newkeys.standing(newkeys.arrivals(conn), newkeys.newest_receipt(conn), rules)
                if rules.active else newkeys.Standing({}, frozenset(), {}))
    reduced = sql.contributor_results(conn, filters, dimensions,
                                      aggregate.VIEW_VERDICTS[view])
    return Computed(finish(reduced, dimensions, held, rules, min_contributors),
                    sql.verdict_totals(conn, filters), sql.evidence_totals(conn, filters))


# --- the keys' standing, by range ----------------------------------------------------------


def _status(state: _Standing, key: str) -> tuple[str | None, bool, datetime | None]:
    cohort = state.cohort_of.get(key)
    return (cohort, cohort in state.new,
            state.arrived.get(cohort) if cohort is not None else None)


class _Standing:
    """``newkeys.standing`` kept per address range (keys without one each alone)."""

    def __init__(self, rules: newkeys.CohortRules) -> None:
        self.rules = rules
        self.arrivals: dict[str, newkeys.Arrival] = {}
        self.slot_keys: dict[str, set[str]] = {}
        self.cohort_of: dict[str, str] = {}
        self.arrived: dict[str, datetime] = {}
        self.graduation: dict[str, datetime | None] = {}
        self.members: dict[str, set[str]] = {}
        self.new: set[str] = set()
        self.newest: datetime | None = None
        self._due: list[tuple[datetime, str]] = []  # (graduation, cohort) of new cohorts

    @staticmethod
    def _slot(arrival: newkeys.Arrival) -> str:
        return f"o:{arrival.origin}" if arrival.origin is not None else f"k:{arrival.key_id}"

    def held(self) -> newkeys.Standing:
        return newkeys.Standing(self.cohort_of, self.new, self.arrived)

    def _is_new(self, graduation: datetime | None) -> bool:
        return (self.rules.probation > timedelta(0) and self.newest is not None
                and (graduation is None or graduation > self.newest))

    def build(self, conn: Connection) -> None:
        self.newest = newkeys.newest_receipt(conn)
        found = newkeys.arrivals(conn)
        for arrival in found:
            self.arrivals[arrival.key_id] = arrival
            self.slot_keys.setdefault(self._slot(arrival), set()).add(arrival.key_id)
        # Ranges (and keys without one) are independent: every slot formed in one call is
        # what forming each alone gives (~2 s less CPU at 200,000 keys).
        self._adopt(newkeys.cohorts(found, self.rules))

    def _form(self, slot: str) -> None:
        """(Re)form the cohorts of one range's keys."""
        keys = self.slot_keys.get(slot, set())
        for cohort in {self.cohort_of[k] for k in keys if k in self.cohort_of}:
            for member in self.members.pop(cohort, set()):
                if self.cohort_of.get(member) == cohort:
                    del self.cohort_of[member]
            self.arrived.pop(cohort, None)
            self.graduation.pop(cohort, None)
            self.new.discard(cohort)
        if not keys:
            self.slot_keys.pop(slot, None)
            return
        self._adopt(newkeys.cohorts([self.arrivals[k] for k in keys], self.rules))

    def _adopt(self, formed: newkeys.Cohorts) -> None:
        """Take in cohorts formed afresh (their slots' old cohorts already dropped)."""
        self.cohort_of.update(formed.cohort_of)
        for key, cohort in formed.cohort_of.items():
            self.members.setdefault(cohort, set()).add(key)
        self.arrived.update(formed.arrived)
        self.graduation.update(formed.graduation)
        for cohort, at in formed.graduation.items():
            if self._is_new(at):
                self.new.add(cohort)
                if at is not None:
                    heapq.heappush(self._due, (at, cohort))

    def update(self, conn: Connection, submission_ids: Collection[str],
               newest: datetime | None) -> set[str]:
        """After writes touching the keys of ``submission_ids`` (every submission of
        theirs): the keys whose cohort, probation or cohort arrival changed."""
        slots: set[str] = set()
        for arrival in newkeys.arrivals(conn, submission_ids) if submission_ids else []:
            held = self.arrivals.get(arrival.key_id)
            if held == arrival:
                continue
            if held is not None:
                slots.add(self._slot(held))
                self.slot_keys[self._slot(held)].discard(arrival.key_id)
            self.arrivals[arrival.key_id] = arrival
            slots.add(self._slot(arrival))
            self.slot_keys.setdefault(self._slot(arrival), set()).add(arrival.key_id)
        affected = {k for slot in slots for k in self.slot_keys.get(slot, set())}
        affected |= {k for slot in slots for c in self._cohorts_of(slot)
                     for k in self.members.get(c, set())}
        before = {k: _status(self, k) for k in affected}
        changed = self._advance(newest)
        for slot in slots:
            self._form(slot)
        changed |= {k for k in affected if _status(self, k) != before[k]}
        return changed

    def _cohorts_of(self, slot: str) -> set[str]:
        return {self.cohort_of[k] for k in self.slot_keys.get(slot, set())
                if k in self.cohort_of}

    def _advance(self, newest: datetime | None) -> set[str]:
        """The store's clock moved to ``newest``: cohorts whose probation ended since."""
        self.newest = newest
        changed: set[str] = set()
        while self._due and newest is not None and self._due[0][0] <= newest:
            at, cohort = heapq.heappop(self._due)
            if cohort in self.new and self.graduation.get(cohort) == at:
                self.new.discard(cohort)
                changed |= self.members.get(cohort, set())
        return changed


# --- one maintained board --------------------------------------------------------------------


Tally = dict[tuple[str, str], int]  # (verdict, evidence level) -> draft results


def submissions_of(conn: Connection, contributors: Collection[str]) -> list[str]:
    """Every submission of these contributors (key ids, or ``imported:<submission id>``):
    one scan of the key column, after which every query reads them by id."""
    keys = sorted(c for c in contributors if not c.startswith(changes.IMPORTED))
    imported = [c[len(changes.IMPORTED):] for c in contributors
                if c.startswith(changes.IMPORTED)]
    sub = tables.submissions
    found = (list(conn.execute(select(sub.c.submission_id).where(sub.c.key_id.in_(keys)))
                  .scalars()) if keys else [])
    return [*found, *imported]  # an imported id that is not stored matches no row


def _contributor_counts(conn: Connection, filters: queries.Filters,
                        submission_ids: Collection[str] | None) -> dict[str, Tally]:
    """Per contributor: draft results per (verdict, evidence level) among visible
    submissions matching the filters (``sql.verdict_totals`` and ``evidence_totals``)."""
    sub, draft = tables.submissions, tables.summaries.alias("d")
    who = func.coalesce(sub.c.key_id, literal(changes.IMPORTED) + sub.c.submission_id)
    level = func.coalesce(draft.c.evidence, "none")
    where = [draft.c.role == "draft", queries.visible_clause(),
             *queries.submission_clauses(filters), *queries.draft_clauses(filters, draft)]
    if submission_ids is not None:
        where.append(sql.only_submissions(submission_ids, draft))
    stmt = (select(who, draft.c.observed, level, func.count())
            .select_from(draft.join(sub, sub.c.submission_id == draft.c.submission_id))
            .where(*where).group_by(who, draft.c.observed, level))
    found: dict[str, Tally] = {}
    # Plain dicts and rows: a cold board at a million submissions reads ~470,000 of them.
    for contributor, verdict, evidence, count in sql.plain_rows(conn.execute(stmt)):
        tally = found.get(contributor)
        if tally is None:
            tally = found[contributor] = {}
        tally[(verdict, evidence)] = count
    return found


@dataclass
class _Counts:
    """Verdict and evidence counts of one set of filters, per contributor and in total."""

    per: dict[str, Tally]
    total: Counter[tuple[str, str]] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        total: Tally = {}
        for tally in self.per.values():
            for pair, count in tally.items():
                total[pair] = total.get(pair, 0) + count
        self.total.update(total)

    def update(self, conn: Connection, filters: queries.Filters, touched: Collection[str],
               submission_ids: Collection[str]) -> None:
        fresh = _contributor_counts(conn, filters, submission_ids)
        for contributor in touched:
            self.total.subtract(self.per.pop(contributor, {}))
            if contributor in fresh:
                self.per[contributor] = fresh[contributor]
                self.total.update(fresh[contributor])

    def verdicts(self) -> dict[str, int]:
        return {v: sum(n for (verdict, _), n in self.total.items() if verdict == v)
                for v in queries.VERDICTS}

    def levels(self) -> dict[str, int]:
        return {name: sum(n for (_, level), n in self.total.items() if level == name)
                for name in LEVELS}


class _Board:
    def __init__(self, spec: Spec, reduced: Iterable[ContributorResult]) -> None:
        self.filters, self.dimensions, self.view = spec
        self.members: dict[KeyTuple, dict[str, ContributorResult]] = {}
        self.groups_of: dict[str, set[KeyTuple]] = {}
        self.groups: dict[KeyTuple, GroupAggregate] = {}
        self._place(reduced)
        self._shown: list[GroupAggregate] | None = None

    def _place(self, reduced: Iterable[ContributorResult]) -> set[KeyTuple]:
        placed = set()
        for item in reduced:
            self.members.setdefault(item.key, {})[item.contributor] = item
            self.groups_of.setdefault(item.contributor, set()).add(item.key)
            placed.add(item.key)
        return placed

    def update(self, conn: Connection, touched: Collection[str], submission_ids: list[str],
               restanded: Collection[str], held: newkeys.Standing,
               rules: newkeys.CohortRules, min_contributors: int) -> None:
        dirty: set[KeyTuple] = set()
        for contributor in touched:
            for key in self.groups_of.pop(contributor, set()):
                self.members[key].pop(contributor, None)
                dirty.add(key)
        if touched:
            dirty |= self._place(sql.contributor_results(
                conn, self.filters, self.dimensions, aggregate.VIEW_VERDICTS[self.view],
                submission_ids=submission_ids))
        for key_id in restanded:
            dirty |= self.groups_of.get(key_id, set())
        for key in dirty:
            self.aggregate(key, held, rules, min_contributors)
        if dirty:
            self._shown = None

    def aggregate(self, key: KeyTuple, held: newkeys.Standing, rules: newkeys.CohortRules,
                  min_contributors: int) -> None:
        members = self.members.get(key)
        if not members:
            self.members.pop(key, None)
            self.groups.pop(key, None)
            return
        reduced = list(members.values())
        together = newkeys.arrived_together(reduced, held, rules.window, min_contributors)
        [group] = aggregate.aggregate_contributors(newkeys.fold(reduced, held),
                                                   self.dimensions, min_contributors)
        self.groups[key] = replace(group, arrived_together=True) if key in together else group

    def shown(self) -> list[GroupAggregate]:
        if self._shown is None:
            self._shown = aggregate.distinct_labels(
                aggregate.sort_groups(list(self.groups.values()), "key"))
        return self._shown


# --- the maintainer ----------------------------------------------------------------------------


class Maintainer:
    """The boards read most recently, kept up to date from the change log."""

    def __init__(self, rules: newkeys.CohortRules, min_contributors: int,
                 max_boards: int = DEFAULT_BOARDS) -> None:
        self.rules = rules
        self.min_contributors = min_contributors
        self.max_boards = max_boards
        self._lock = threading.Lock()
        self._at: changes.Position | None = None
        self._schema: int | None = None
        self._standing = _Standing(rules)
        self._boards: OrderedDict[Spec, _Board] = OrderedDict()
        self._counts: dict[queries.Filters, _Counts] = {}
        # What the refreshes did (tests and the bench read them): full rebuilds, and
        # refreshes from the log with the contributors they read again.
        self.rebuilds = 0
        self.refreshes = 0
        self.contributors_read = 0

    def board(self, conn: Connection, filters: queries.Filters,
              dimensions: tuple[str, ...], view: View) -> Computed:
        """The board on ``conn``'s snapshot (see ``snapshot``)."""
        with self._lock:
            self._refresh(conn)
            spec = (filters, tuple(dimensions), view)
            held = self._standing.held()
            board = self._boards.get(spec)
            if board is None:
                board = _Board(spec, sql.contributor_results(
                    conn, filters, spec[1], aggregate.VIEW_VERDICTS[view]))
                for key in board.members:
                    board.aggregate(key, held, self.rules, self.min_contributors)
                self._boards[spec] = board
                while len(self._boards) > self.max_boards:
                    self._boards.popitem(last=False)
                    self._counts = {f: c for f, c in self._counts.items()
                                    if any(s[0] == f for s in self._boards)}
            self._boards.move_to_end(spec)
            counts = self._counts.get(filters)
            if counts is None:
                counts = self._counts[filters] = _Counts(
                    _contributor_counts(conn, filters, None))
            return Computed(board.shown(), counts.verdicts(), counts.levels())

    def _rebuild(self, conn: Connection, at: changes.Position, schema: int | None) -> None:
        self.rebuilds += 1
        self._boards.clear()
        self._counts.clear()
        self._standing = _Standing(self.rules)
        if self.rules.active:
            self._standing.build(conn)
        self._at, self._schema = at, schema

    def _refresh(self, conn: Connection) -> None:
        at = changes.position(conn)
        schema = current_version(conn)
        previous = self._at
        if previous is None or schema != self._schema or at.seq < previous.seq:
            self._rebuild(conn, at, schema)
            return
        if at == previous:
            return
        logged = changes.since(conn, previous.seq, at.seq)
        if (at.submissions - previous.submissions != logged.submissions
                or at.audits - previous.audits != logged.audits):
            self._rebuild(conn, at, schema)  # a write the log did not see: trust nothing
            return
        newest = newkeys.newest_receipt(conn) if self.rules.active else None
        held_newest = self._standing.newest
        if newest is not None and (held_newest is None or newest < held_newest):
            self._rebuild(conn, at, schema)  # the clock started (or went back)
            return
        ids = submissions_of(conn, logged.contributors) if logged.contributors else []
        restanded = self._standing.update(conn, ids, newest) if self.rules.active else set()
        self.refreshes += 1
        self.contributors_read += len(logged.contributors)
        held = self._standing.held()
        for filters, counts in self._counts.items():
            if logged.contributors:
                counts.update(conn, filters, logged.contributors, ids)
        for board in self._boards.values():
            board.update(conn, logged.contributors, ids, restanded, held, self.rules,
                         self.min_contributors)
        self._at = at

