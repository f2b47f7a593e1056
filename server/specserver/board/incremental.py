"""The leaderboard maintained by change: a read after a write costs what the write touched.

``Maintainer`` keeps, per board (filters, dimensions, view), each group's per-contributor
rows (``columns.Rows``: the first step of the rules, ``sql.contributor_columns``) and its
aggregate, the keys' standing (``columns.Standing``, formed by ``newkeys``) and, per set of
filters, each contributor's verdict and evidence counts; it brings them up to date from the
store's change log (``store/changes.py``):

1. the log names the contributors whose rows changed since the last refresh (ingest,
   hide, unhide, ban, unban, import, quarantine and its release: every write logs them);
2. the store restricted to their submissions (``sql.restricted_to``) is read once: their
   arrivals, their per-contributor rows for each board and their counts, by the same
   queries as the full computation (so the same medians to the last bit);
3. the cohorts of their address ranges are formed again (ranges are independent), and the
   store's clock (its newest receipt) moving past a cohort's graduation ends its probation
   (time passing is a change too);
4. only the groups holding a changed contributor or a key whose standing changed are
   aggregated again (``columns.group_aggregate``).

The first read of a board computes it in full; so does every read when there is nothing to
build on: the first one, a new schema version (a migration), counts the log does not
account for (a write that bypassed it: every stored submission and every audit row must
appear in the log), or more changed contributors than a restricted read is worth
(``FULL_ABOVE``). ``compute`` is that full computation alone. A test holds the maintained
board equal to ``compute`` after random writes, on DuckDB and PostgreSQL
(``tests/server/board/test_incremental.py``).

Under concurrency: a refresh reads the log's position, the changes and the restricted
rows in one snapshot (``snapshot``: PostgreSQL's REPEATABLE READ; DuckDB's transaction),
and the log's numbers follow commit order (``store/changes.py``), so a change is either
in the snapshot with its number or numbered after the position read. Several server
processes each maintain their own boards from the one log.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
from sqlalchemy import Connection, Engine

from specserver.board import aggregate, chips, columns, newkeys, sql
from specserver.board.aggregate import GroupAggregate, View
from specserver.board.columns import NAT, Codes, Ints, Rows, micros
from specserver.board.heldboards import HeldBoard, KeyTuple, Spec, Tallies
from specserver.board.keystanding import KeyStanding, Voices
from specserver.store import backend_of, changes, current_version, queries

DEFAULT_BOARDS = 8  # boards maintained at once (each holds a row per group and contributor)
# Past this many changed contributors in one refresh, everything is computed in full: the
# restricted read would hold most of the store, and its IN lists grow with it.
FULL_ABOVE = 20_000


@dataclass(frozen=True)
class Computed:
    """What a board read needs: its groups (key order, labelled) and the filters' counts;
    on the speedup board, the groups of chips kept apart (``chips``, each by chip too,
    flagged ``uncorroborated``) and the filters its groups were read with."""

    groups: list[GroupAggregate]
    verdict_counts: dict[str, int]
    evidence_counts: dict[str, int]
    apart: list[GroupAggregate] = field(default_factory=list)
    filters: queries.Filters | None = None


@contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """A connection whose reads all see one snapshot of the store."""
    with engine.connect() as conn:
        isolation = backend_of(conn).snapshot_isolation
        if isolation is not None:
            conn = conn.execution_options(isolation_level=isolation)
        yield conn


def compute(conn: Connection, filters: queries.Filters, dimensions: Sequence[str],
            view: View, rules: newkeys.CohortRules, min_contributors: int,
            listed_chips: frozenset[str] | None = None) -> Computed:
    """The full computation of one board from the store (what a first read computes)."""
    return Maintainer(rules, min_contributors, max_boards=2, listed_chips=listed_chips
                      ).board(conn, filters, tuple(dimensions), view)


# --- the maintainer ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Change:
    """What the change log says changed since the boards' state (``Maintainer._refresh``)."""

    at: changes.Position  # the state now
    logged: changes.Changes  # since the boards' state
    newest: int  # the newest receipt, in microseconds (NAT: the rules are off)


@dataclass(frozen=True)
class _ReadAgain:
    """The changed contributors read again: whose keys' standing moved (codes), their
    counts per filters, and their rows on each board held, by group."""

    restanded: Ints
    tallies: dict[queries.Filters, tuple[Sequence[str], Ints]]
    fresh: dict[Spec, dict[KeyTuple, Rows]]


class Maintainer:
    """The boards read most recently, kept up to date from the change log."""

    def __init__(self, rules: newkeys.CohortRules, min_contributors: int,
                 max_boards: int = DEFAULT_BOARDS,
                 listed_chips: frozenset[str] | None = None) -> None:
        self.rules = rules
        # The known-chip table's names (``chips``); None: every chip is on the board. The
        # chips on the board as of a position of the change log (``_specs``).
        self.listed_chips = listed_chips
        self._chips: tuple[changes.Position | None, tuple[str, ...]] | None = None
        self.min_contributors = min_contributors
        self.max_boards = max_boards
        self.window_us = micros(rules.window)
        self._lock = threading.Lock()
        self._at: changes.Position | None = None
        self._schema: int | None = None
        self._codes = Codes()
        self._standing = KeyStanding(rules, self._codes)
        self._boards: OrderedDict[Spec, HeldBoard] = OrderedDict()
        self._tallies: dict[queries.Filters, Tallies] = {}
        self._unbuilt = True  # the keys' standing is to be formed (after a rebuild)
        # What the refreshes did (tests and the bench read them): full rebuilds, and
        # refreshes from the log with the contributors they read again.
        self.rebuilds = 0
        self.refreshes = 0
        self.contributors_read = 0

    def board(self, conn: Connection, filters: queries.Filters,
              dimensions: tuple[str, ...], view: View) -> Computed:
        """The board on ``conn``'s snapshot (see ``snapshot``). A failure part way (the
        database going away) leaves nothing half updated to build on: the next read
        computes in full."""
        with self._lock:
            try:
                self._refresh(conn)
                specs = self._specs(conn, filters, tuple(dimensions), view)
                held = [self._held(conn, spec, filters) for spec in specs]
            except BaseException:
                self._at = None
                raise
            for spec in specs:
                self._boards.move_to_end(spec)
            tallies = self._tallies[filters]
            groups = held[0].shown()
            if len(held) > 1:  # grouped without the chip: split by the filters
                apart = held[1].shown()
            elif self.listed_chips is not None and view == "speedup":
                # grouped by the chip: split by each group's key, so that a chip becoming
                # corroborated never makes the board be computed again in full
                on_board = frozenset(self._chips_on_board(conn))
                off = [g.key["chip"]["chip"] not in on_board | {None} for g in groups]
                apart = [g for g, out in zip(groups, off, strict=True) if out]
                groups = [g for g, out in zip(groups, off, strict=True) if not out]
            else:
                apart = []
            return Computed(groups, tallies.verdicts(), tallies.levels(),
                            [replace(g, uncorroborated=True) for g in apart], specs[0][0])

    def voices(self) -> Voices:
        """Who speaks for each contributor on the boards held (``KeyStanding.voices``):
        read right after ``board``, the standing that board was computed with."""
        with self._lock:
            return self._standing.voices()

    def _specs(self, conn: Connection, filters: queries.Filters, dimensions: tuple[str, ...],
               view: View) -> list[Spec]:
        """The boards one read shows: a speedup board grouped without the chip is read as
        two, split by chip in SQL (``chips``, ``Filters.split``)."""
        if self.listed_chips is None or view != "speedup" or "chip" in dimensions:
            return [(filters, dimensions, view)]
        on_board = self._chips_on_board(conn)
        return [(filters.split(on_board, False), dimensions, view),
                (filters.split(on_board, True), (*dimensions, "chip"), view)]

    def _chips_on_board(self, conn: Connection) -> tuple[str, ...]:
        """``chips.on_board`` once per state of the store (``_at``). Without a decision
        since the last count (hide, ban, quarantine release: audit rows) a chip that was
        corroborated still is (new submissions only add voices), so only the others are
        counted again; a rebuild forgets it (``_rebuild``)."""
        assert self.listed_chips is not None
        at, held = self._at, self._chips
        if held is not None and held[0] == at:
            return held[1]
        known = self.listed_chips
        if (held is not None and held[0] is not None and at is not None
                and held[0].audits == at.audits and held[0].seq <= at.seq):
            known = known | set(held[1])
        found = chips.on_board(conn, known, self.min_contributors)
        self._chips = (at, found)
        return found

    def _held(self, conn: Connection, spec: Spec, tallied: queries.Filters) -> HeldBoard:
        """The maintained board of ``spec``, computed in full when there is none; the
        counts of ``tallied`` (the filters as read) with it."""
        board, tallies = self._boards.get(spec), self._tallies.get(tallied)
        if board is None or tallies is None or self._unbuilt:
            board, tallies = self._compute(conn, spec, board, tallies, tallied)
        return board

    def _compute(self, conn: Connection, spec: Spec, board: HeldBoard | None,
                 tallies: Tallies | None, tallied: queries.Filters
                 ) -> tuple[HeldBoard, Tallies]:
        """What is missing, computed in full: the board's rows, the keys' standing after a
        rebuild, the filters' counts. The queries run one after another on the snapshot's
        connection (one transaction serves one query at a time), in a thread of their own,
        while this one works on each answer as the next query runs (a query releases the
        interpreter's lock): at a million submissions the board's rows are reduced while
        the keys' arrivals are read, and the keys' standing is formed and the board
        aggregated while the counts are read. The rows come first: their query is the
        largest, and runs with both cores to itself."""
        filters, dimensions, view = spec
        # Keys by hash if no two key ids are known to share one; the keys read below are
        # checked, and a clash among them reads the rows again by name.
        by_key_hash = self._by_key_hash(conn)
        with ThreadPoolExecutor(1, thread_name_prefix="board-queries") as queries_:
            rows = (queries_.submit(sql.contributor_rows, conn, filters, dimensions,
                                    aggregate.VIEW_VERDICTS[view], by_key_hash)
                    if board is None else None)
            arrivals = (queries_.submit(self._standing.fetch, conn)
                        if self._unbuilt and self.rules.active else None)
            totals = (queries_.submit(sql.draft_totals, conn, tallied)
                      if tallies is None else None)
            found = rows.result() if rows is not None else None
            reduced = found.reduced() if found is not None else None
            if arrivals is not None:
                newest, arrived, accepted = arrivals.result()
                self._standing.build(newest, arrived, self._standing.learn(arrived), accepted)
            self._unbuilt = False
            if reduced is not None and not (by_key_hash and self._codes.clash):
                board = self._place(spec, reduced)
                reduced = None
            if totals is not None:
                tallies = self._tallies[tallied] = Tallies(totals.result())
        if reduced is not None:  # two keys share a hash: the rows again, by name
            board = self._place(spec, sql.contributor_columns(
                conn, filters, dimensions, aggregate.VIEW_VERDICTS[view], False))
        assert board is not None and tallies is not None
        return board, tallies

    def _by_key_hash(self, conn: Connection) -> bool:
        """Whether the board's rows may name keys by their hash: every key of the snapshot
        has had its hash learnt from the keys' arrivals (read with the rules on, in full
        and then for every changed key), and no two share one."""
        return (backend_of(conn).hashes_keys and self.rules.active
                and not self._codes.clash)

    def _place(self, spec: Spec, reduced: columns.Reduced) -> HeldBoard:
        board = HeldBoard(spec, reduced.by_group(self._codes))
        self._fit()
        for key in list(board.rows):
            board.aggregate(key, self._standing.arrays, self.window_us, self.min_contributors)
        self._boards[spec] = board
        while len(self._boards) > self.max_boards:
            self._boards.popitem(last=False)
            self._tallies = {f: t for f, t in self._tallies.items()
                             if any(s[0].whole() == f for s in self._boards)}
        return board

    def _fit(self) -> None:
        self._standing.fit(len(self._codes))

    def _rebuild(self, at: changes.Position, schema: int | None) -> None:
        """Forget everything: the next board is computed in full (``_compute``)."""
        self.rebuilds += 1
        self._boards.clear()
        self._tallies.clear()
        self._codes = Codes()
        self._standing = KeyStanding(self.rules, self._codes)
        self._unbuilt = True
        self._chips = None
        self._at, self._schema = at, schema

    def _refresh(self, conn: Connection) -> None:
        """Bring the boards held to the state ``conn`` sees: the contributors the change
        log names since the last state are read again, and their groups aggregated again;
        everything is forgotten instead when the log cannot account for the writes."""
        change = self._logged_change(conn)
        if change is None:
            return
        started = self._tally_per_contributor(conn)
        read = self._read_again(conn, change, started)
        self._apply(change, read)
        self._at = change.at

    def _logged_change(self, conn: Connection) -> _Change | None:
        """What changed since the boards' state (``_at``), by the change log; None when
        nothing did, or when a rebuild was chosen instead (``_rebuild``): no state yet,
        another schema, a log that went back or does not account for every write, more
        contributors than ``FULL_ABOVE``, or the keys' clock started or went back."""
        at = changes.position(conn)
        schema = current_version(conn)
        previous = self._at
        if previous is None or schema != self._schema or at.seq < previous.seq:
            self._rebuild(at, schema)
            return None
        if at == previous:
            return None
        logged = changes.since(conn, previous.seq, at.seq)
        if (at.submissions - previous.submissions != logged.submissions
                or at.audits - previous.audits != logged.audits
                or len(logged.contributors) > FULL_ABOVE):
            self._rebuild(at, schema)  # a write the log did not see: trust nothing
            return None
        newest = micros(newkeys.newest_receipt(conn)) if self.rules.active else int(NAT)
        if newest != NAT and (self._standing.newest == NAT or newest < self._standing.newest):
            self._rebuild(at, schema)  # the clock started (or went back)
            return None
        return _Change(at, logged, newest)

    def _tally_per_contributor(self, conn: Connection) -> set[queries.Filters]:
        """Counts kept in total only (since a first read) are read per contributor now, in
        full on this snapshot (the changed contributors' included), before the store is
        restricted; the filters of the others, brought up to date by ``_read_again``."""
        started = {f for f, held in self._tallies.items() if held.per is not None}
        for filters, held in self._tallies.items():
            if held.per is None:
                held.start(self._codes, sql.contributor_tallies(conn, filters))
        return started

    def _read_again(self, conn: Connection, change: _Change, started: set[queries.Filters]
                    ) -> _ReadAgain:
        """With the store restricted to the changed contributors: their keys' standing,
        their counts under ``started`` filters, and their rows on every board held."""
        logged = change.logged
        with sql.restricted_to(conn, logged.contributors):
            restanded = (self._standing.update(conn, change.newest, logged.audits > 0)
                         if self.rules.active
                         else np.zeros(0, np.int64))
            tallies = {f: sql.contributor_tallies(conn, f) for f in started}
            by_key_hash = self._by_key_hash(conn)
            fresh = {spec: sql.contributor_columns(
                conn, spec[0], spec[1], aggregate.VIEW_VERDICTS[spec[2]], by_key_hash
            ).by_group(self._codes) for spec in self._boards}
        return _ReadAgain(restanded, tallies, fresh)

    def _apply(self, change: _Change, read: _ReadAgain) -> None:
        """The contributors read again replace theirs in the counts and on the boards."""
        contributors = change.logged.contributors
        self.refreshes += 1
        self.contributors_read += len(contributors)
        touched_codes = self._codes.encode(sorted(contributors))
        self._fit()
        size = len(self._standing.arrays.cohort)
        touched = columns.membership(touched_codes.tolist(), size)
        standing_moved = (columns.membership(read.restanded.tolist(), size)
                          if len(read.restanded) else None)
        for filters, counts in read.tallies.items():
            self._tallies[filters].update(self._codes, touched_codes, counts)
        for spec, board in self._boards.items():
            board.update(touched, read.fresh[spec], standing_moved, self._standing.arrays,
                         self.window_us, self.min_contributors)
