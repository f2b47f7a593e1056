"""The read side's service: the last computed boards at once, recomputed beside the reads.

A public board read (``/v1/leaderboard``, ``/v1/aggregates``, the page) never waits for a
computation, except the very first of its kind: ``latest`` hands back the last *snapshot*
computed for its key (a board, or the page's data) with the data version it was computed
from and when that data was read, and the refresher thread recomputes it beside the reads.
Each read compares the snapshot's version with the store's *data version*
(``queries.data_version``: a few counts and maxima) as last looked at; one that is behind
is marked, and the refresher recomputes the marked snapshots one at a time, most recently
read first. The refresher also looks at the data version, every ``check_s`` while reads
come (a read only asks: after a board's first computation no read queries the store), and
before it serves a new snapshot it hands it to the hooks given to ``before_serving`` (the
HTTP side renders the bodies read most recently, http/caching.py), so that a read after a
recomputation finds its body ready. Nothing
hooks into the writer, so several server processes on PostgreSQL each keep their own
snapshots, all from the one database. A computation that fails is logged and kept out of
the way: the previous snapshot is served and keeps ageing (its age is in every response),
and the next read that finds it behind asks again (after ``retry_s``). ``wait_s``
(``SPECSERVER_READ_WAIT_S``, default 0) lets a read wait that long for the recomputation
it asked for.

Each snapshot is computed on one connection whose reads all see one state of the store
(DuckDB's transaction; PostgreSQL's REPEATABLE READ), and its data version is read first on
that connection, so the version that labels a body (its ETag, ``http/caching.py``) is
exactly the data it shows: never newer, never older. (One part of one snapshot may be
older: the page's filter menus, reused for a while; the page's label then names their
version too, ``http/page/data.py``.)

``refresh_s`` (setting ``SPECSERVER_BOARD_REFRESH_S``, 1 s by default): the least time
between two computations of one snapshot (0: as soon as the data changes, when the
refresher is free). Under steady ingest a refresher that starts again the moment it ends
keeps a core busy and its Python holds the interpreter's lock against the reads: measured
at a million submissions with 50 submissions/s, spacing them a second apart took read p99
from ~70 ms to ~20 ms, and a new result still shows within about 1 s (BENCHMARKS.md).
``max_stale_s`` (setting ``SPECSERVER_READ_MAX_STALE_S``): how long the other public reads
(lists, stats, exports) reuse a data version; boards are not recomputed more often either.

Cold aggregation reduces each contributor's draft results per group from the store (one
row per group and contributor, never trials; ``sql.contributor_columns``) and applies the rules to
those rows as columns (``columns``; ``compute_board``: the one place a board is computed;
``incremental`` keeps the boards read most recently up to date from the store's change
log, so a recomputation after a write costs what the write touched).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from specserver.board import acceptance, aggregate, incremental, newkeys
from specserver.board.aggregate import View
from specserver.board.snapshots import (
    READ_LATELY_S,
    BeforeServing,
    Board,
    Compute,
    Freshness,
    Lru,
    Snapshot,
    _Entry,
)
from specserver.store import queries

T = TypeVar("T")

log = logging.getLogger(__name__)
# Services whose refresher runs: stopped at exit, so no computation is cut off mid-query
# while the interpreter finalizes (a daemon thread inside DuckDB aborts the process).
_LIVE: weakref.WeakSet[ReadService] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for service in list(_LIVE):
        service.close(timeout_s=10.0)

DEFAULT_RETRY_S = 1.0  # the least time before a failed computation is tried again
# Board reads look at the store's data version at most this often (the rest of each
# second's reads are served from memory alone); a change is seen this much later at most.
CHECK_S = 0.1


class ReadService:
    """Holds the engine the public side reads from, the snapshots and their refresher."""

    def __init__(
        self,
        engine: Engine,
        *,
        min_contributors: int = aggregate.DEFAULT_MIN_CONTRIBUTORS,
        cache_size: int = 256,
        max_stale_s: float = 0.0,
        probation_days: float = 0.0,  # off unless configured (create_app: settings)
        cohort_window_hours: float = 0.0,
        graduations_per_day: int = 0,
        settle_days: float = 0.0,
        retry_s: float = DEFAULT_RETRY_S,
        wait_s: float = 0.0,
        check_s: float = CHECK_S,
        refresh_s: float = 0.0,
        incremental_boards: int = incremental.DEFAULT_BOARDS,
        listed_chips: frozenset[str] | None = None,
    ) -> None:
        self.engine, self.listed_chips = engine, listed_chips  # board.chips; None: all on
        self.rules = newkeys.CohortRules.of(probation_days, cohort_window_hours,
                                            graduations_per_day, settle_days)
        self.min_contributors = min_contributors
        self.max_stale_s, self.refresh_s = max_stale_s, refresh_s
        self.retry_s, self.wait_s, self.check_s = retry_s, wait_s, check_s
        self._version: str | None = None
        self._version_at = float("-inf")
        self._known: tuple[str, dict[str, list[Any]]] | None = None
        # The boards read most recently, kept up to date from the store's change log.
        self._incremental_boards = incremental_boards
        self._maintainer = self._new_maintainer()
        self._entries: Lru[Hashable, _Entry] = Lru(cache_size)
        self._before_serving: list[BeforeServing] = []
        self._cache_lock = threading.Lock()
        # One computation at a time (the refresher's, or a first read's).
        self._compute_lock = threading.RLock()
        self._wake = threading.Condition(self._cache_lock)
        self._refresher: threading.Thread | None = None
        self._closed = False
        self._board_checked: tuple[float, str] | None = None  # (look began, version)
        self._check_asked = False  # a board read asked the refresher to look (``_check``)
        # What the refresher did: tests and the bench read these.
        self.refreshes = 0
        self.failures = 0
        self.last_error: BaseException | None = None

    # --- data versions ---------------------------------------------------------------------

    def version(self) -> str:
        """The store's data version; reused for ``max_stale_s`` seconds when that is > 0."""
        if self.max_stale_s > 0:
            with self._cache_lock:
                if (self._version is not None
                        and time.monotonic() - self._version_at < self.max_stale_s):
                    return self._version
        with self.engine.connect() as conn:
            version = queries.data_version(conn)
        with self._cache_lock:
            self._version, self._version_at = version, time.monotonic()
        return version

    def _look(self) -> tuple[float, str]:  # (no later than its look began, ``version``)
        return time.monotonic() - self.max_stale_s, self.version()  # in this order

    def _board_version(self) -> str:
        """``version`` for board reads, as last looked at: the store's data version is read
        at most every ``check_s`` (or ``max_stale_s``), and then by the refresher thread, not
        by the read (``_check``), so that a board read is a lookup in memory, never a query.
        Reads that may wait for a recomputation (``wait_s``), and every read when the window
        is 0, look themselves, every time."""
        window = max(self.check_s, self.max_stale_s)
        with self._cache_lock:
            checked = self._board_checked
            if self.wait_s <= 0 and window > 0 and checked is not None:
                if time.monotonic() - checked[0] >= window and not self._check_asked:
                    self._check_asked = True
                    self._start_refresher()
                    self._wake.notify_all()
                return checked[1]
        look = self._look()
        with self._cache_lock:  # the latest look kept (by when it began)
            self._board_checked = max(look, self._board_checked or look)
        return look[1]

    def _check(self) -> None:
        """In the refresher: read the store's data version for the board reads, and ask for
        every snapshot read lately that it shows to be behind."""
        try:
            look: tuple[float, str] | None = self._look()
        except Exception:  # noqa: BLE001 - the reads go on with the version known before
            log.warning("reading the store's data version failed", exc_info=True)
            look = None
        with self._cache_lock:
            self._check_asked = False
            if look is None:
                return
            version, now = look[1], time.monotonic()
            self._board_checked = max(look, self._board_checked or look)
            for entry in self._entries.items.values():
                if entry.snapshot.version != version and now - entry.read < READ_LATELY_S:
                    entry.wanted = True

    def known_values(self, version: str | None, needed: dict[str, Any] | None = None
                     ) -> dict[str, list[Any]]:
        """``queries.known_filter_values``, cached for the data version ``version``.

        The values last read are enough when they hold every ``needed`` one (filter name
        -> value): a value that was there is not refused for being a few writes old (hidden
        since, it matches nothing, as on a board); one that was not is looked up in the
        store before it is refused. ``version`` None: the store's, whatever it is.
        """
        with self._cache_lock:
            held = self._known
        if held is not None and ((version is not None and held[0] == version) or (
                needed is not None and all(v in held[1][n] for n, v in needed.items()))):
            return held[1]
        with self.engine.connect() as conn:
            known = queries.known_filter_values(conn)
        with self._cache_lock:
            self._known = (version or "", known)
        return known

    def clear_cache(self) -> None:
        """Forget every computed board: the next read computes in full."""
        with self._compute_lock:
            self._maintainer = self._new_maintainer()
        with self._cache_lock:
            self._entries.clear()
            self._known = None
            self._board_checked = None

    # --- snapshots -------------------------------------------------------------------------

    def latest(self, key: Hashable, compute: Compute[T]) -> Snapshot[T]:
        """The last snapshot computed for ``key``, at once; when the store has moved on
        (``version``), the refresher is asked to recompute it. Only the first read of a key
        waits for its computation (``compute(conn, version)``, on one state of the store),
        and a read waits up to ``wait_s`` for a recomputation it asked for."""
        with self._cache_lock:
            entry = self._entries.get(key)
        if entry is None:
            return self._first(key, compute)
        current = self._board_version()
        with self._cache_lock:
            entry.read = time.monotonic()
            if entry.snapshot.version == current:
                return entry.snapshot
            entry.wanted = True
            self._start_refresher()
            self._wake.notify_all()
            if self.wait_s > 0:
                self._wake.wait_for(lambda: not entry.wanted or self._closed, self.wait_s)
            return entry.snapshot

    def _first(self, key: Hashable, compute: Compute[T]) -> Snapshot[T]:
        with self._compute_lock:
            with self._cache_lock:
                entry = self._entries.get(key)
            if entry is not None:  # computed meanwhile
                return entry.snapshot
            started = time.monotonic()
            snapshot = self._compute(compute)
            with self._cache_lock:
                self._entries.put(key, _Entry(snapshot, compute, started, time.monotonic()))
                look = (started, snapshot.version)  # read on its connection since
                self._board_checked = max(look, self._board_checked or look)
            return snapshot

    def freshness(self, snapshot: Snapshot[Any], asked_at: float | None = None) -> Freshness:
        """``Freshness.of`` for a read asked at ``asked_at`` (time.monotonic(); now)."""
        asked = time.monotonic() if asked_at is None else asked_at
        return Freshness.of(snapshot, self._board_checked, asked, self.check_s)

    def _compute(self, compute: Compute[T]) -> Snapshot[T]:
        with self._compute_lock, incremental.snapshot(self.engine) as conn:
            read_at = time.time()
            version = queries.data_version(conn)  # first: the state every read below sees
            value = compute(conn, version)
        return Snapshot(version, read_at, value)

    @staticmethod
    def board_key(filters: queries.Filters, dimensions: Sequence[str], view: View,
                  with_acceptance: bool = False) -> Hashable:
        """The snapshot key of a board (``latest``, ``before_serving``)."""
        key = ("board", filters, tuple(dimensions), view)
        return (*key, "acceptance") if with_acceptance else key

    def board(self, filters: queries.Filters, dimensions: Sequence[str], view: View,
              with_acceptance: bool = False) -> Snapshot[Board]:
        """The last computed board for these filters, dimensions and view (``latest``);
        ``with_acceptance``: with each group's acceptance per draft position."""
        dims = tuple(dimensions)
        return self.latest(self.board_key(filters, dims, view, with_acceptance),
                           lambda conn, version: self.compute_board(
                               conn, version, filters, dims, view, with_acceptance))

    # --- the refresher ---------------------------------------------------------------------

    def _start_refresher(self) -> None:
        """Start the refresher thread once (the caller holds the cache lock)."""
        if self._refresher is None and not self._closed:
            self._refresher = threading.Thread(target=self._refresh_loop, daemon=True,
                                               name="board-refresher")
            self._refresher.start()
            _LIVE.add(self)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the refresher (after its current computation)."""
        with self._cache_lock:
            self._closed = True
            self._wake.notify_all()
            thread = self._refresher
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _due(self, now: float) -> list[tuple[Hashable, _Entry]]:
        """The snapshots a read found behind the store, not computed within
        ``refresh_s`` and not failed within ``retry_s``: most recently read first."""
        due = [(key, entry) for key, entry in self._entries.items.items()
               if entry.wanted and now - entry.computed >= self._spacing()
               and now - entry.failed >= self.retry_s]
        return sorted(due, key=lambda item: -item[1].read)

    def _spacing(self) -> float:
        """The least time between two computations of one snapshot."""
        return max(self.refresh_s, self.max_stale_s)

    def _next_due(self, now: float) -> float | None:
        """Seconds until a wanted snapshot becomes due, or None when none is wanted."""
        waits = [max(entry.computed + self._spacing(), entry.failed + self.retry_s) - now
                 for entry in self._entries.items.values() if entry.wanted]
        return max(0.0, min(waits)) if waits else None

    def _refresh_loop(self) -> None:
        while True:
            with self._cache_lock:
                while not self._closed:
                    now = time.monotonic()
                    check = self._check_asked
                    due = self._due(now)
                    if due or check:
                        break
                    self._wake.wait(self._next_due(now))
                if self._closed:
                    return
            if check:
                self._check()
                with self._cache_lock:
                    due = self._due(time.monotonic())
            for key, entry in due:
                if self._closed:
                    return
                self._refresh(key, entry)

    def before_serving(self, hook: BeforeServing) -> None:
        """Call ``hook(key, snapshot)`` with each snapshot the refresher computes, before
        it is served (the HTTP side renders the bodies read most recently, so that the
        first read after a recomputation finds its body ready: http/caching.py)."""
        with self._cache_lock:
            self._before_serving.append(hook)

    def _announce(self, key: Hashable, snapshot: Snapshot[Any]) -> None:
        with self._cache_lock:
            hooks = list(self._before_serving)
        for hook in hooks:
            try:
                hook(key, snapshot)
            except Exception:  # noqa: BLE001 - the snapshot is served all the same
                log.warning("a hook before serving a new snapshot failed", exc_info=True)

    def _refresh(self, key: Hashable, entry: _Entry) -> None:
        started = time.monotonic()
        try:
            snapshot = self._compute(entry.compute)
        except Exception as exc:
            log.exception("a board computation failed; the last computed board is served "
                          "meanwhile and ages", exc_info=exc)
            with self._cache_lock:
                self.failures += 1
                self.last_error = exc
                entry.failed = time.monotonic()
                entry.wanted = False  # the next read that finds it behind asks again
                self._wake.notify_all()
            return
        self._announce(key, snapshot)
        with self._cache_lock:
            entry.snapshot, entry.computed, entry.wanted = snapshot, started, False
            self.refreshes += 1
            self._wake.notify_all()  # readers waiting up to wait_s

    def settle(self, timeout_s: float = 30.0) -> bool:
        """Wait until the refresher has nothing left to do (tests, benches)."""
        with self._cache_lock:
            return self._wake.wait_for(
                lambda: not any(e.wanted for e in self._entries.items.values()), timeout_s)

    # --- one board -------------------------------------------------------------------------

    def _new_maintainer(self) -> incremental.Maintainer:
        return incremental.Maintainer(self.rules, self.min_contributors,
                                      self._incremental_boards, self.listed_chips)

    def compute_board(self, conn: Connection, version: str, filters: queries.Filters,
                      dimensions: Sequence[str], view: View, with_acceptance: bool = False
                      ) -> Board:
        """The board from the state of the store ``conn`` sees (whose data version is
        ``version``): the one place a board is computed, maintained by change
        (``incremental``: from the store's change log), Sybil resistance (newkeys.py)
        included; ``with_acceptance``: and each group's acceptance per draft position
        (``acceptance``: pooled in the database, for the reads that ask for it)."""
        dims = tuple(dimensions)
        with self._compute_lock:
            computed = self._maintainer.board(conn, filters, dims, view)
            # in the same snapshot, its voices the standing the board was just computed with
            accepted = acceptance.group_acceptance(
                conn, computed.filters or filters, dims, aggregate.VIEW_VERDICTS[view],
                self._maintainer.voices(), acceptance.disputed_keys(computed.groups)
            ) if with_acceptance else None
        return Board(
            version=version,
            view=view,
            dimensions=dims,
            groups=computed.groups,
            verdict_counts=computed.verdict_counts,
            results=sum(sum(g.verdicts.values()) for g in computed.groups),
            evidence_counts=computed.evidence_counts,
            acceptance=accepted,
            uncorroborated=computed.apart,
        )

    def cold_board(self, filters: queries.Filters, dimensions: Sequence[str], view: View,
                   with_acceptance: bool = False) -> Board:
        """A board computed now, from the store as it is (benches: the cold computation)."""
        return self._compute(lambda conn, version: self.compute_board(
            conn, version, filters, dimensions, view, with_acceptance)).value
