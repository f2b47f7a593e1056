"""The read side's service: leaderboard aggregates with a small cache, keyed on data version.

Every public read first asks the store for its *data version* (``queries.data_version``: a
few counts and maxima, about a millisecond). Aggregates are cached under that version, so
a write (an ingested submission, a hide, a ban) invalidates them without any hook into the
writer, and this works the same with several server processes on PostgreSQL. The same
version makes the ETag of every public GET, so a 304 costs one tiny query.

Under heavy ingest the version changes all the time; ``max_stale_s`` (setting
``SPECSERVER_READ_MAX_STALE_S``, default 0 = always exact) lets reads reuse a version for
that long, so the leaderboard is recomputed at most that often. ETags, cached aggregates
and bodies all follow the version used, so a response is never labelled newer than it is.

Cold aggregation reduces each contributor's draft results per group in SQL (one row per
group and contributor, never trials; ``sql.contributor_results``) and applies the pure
rules of ``aggregate`` to those rows; concurrent cold requests wait for one computation
instead of repeating it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection, Engine

from specserver.board import aggregate, incremental, newkeys
from specserver.board.aggregate import GroupAggregate, View
from specserver.store import queries

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self.items[key] = value
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)

    def clear(self) -> None:
        self.items.clear()


@dataclass(frozen=True)
class Board:
    """One view of the leaderboard (or of /v1/aggregates) for one set of filters."""

    version: str
    view: View
    dimensions: tuple[str, ...]
    groups: list[GroupAggregate]  # in key order; callers sort
    verdict_counts: dict[str, int]  # over every draft result the filters match
    results: int  # draft results in this view
    # Over every draft result the filters match, per specschema.evidence level: confirmed
    # rows only "reported" or "implausible" are counted here and on no board.
    evidence_counts: dict[str, int] = field(default_factory=dict)


class ReadService:
    """Holds the engine the public side reads from and the aggregate cache."""

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
        incremental_boards: int = incremental.DEFAULT_BOARDS,  # 0: every board in full
    ) -> None:
        self.engine = engine
        self.rules = newkeys.CohortRules.of(probation_days, cohort_window_hours,
                                            graduations_per_day)
        self.min_contributors = min_contributors
        self.max_stale_s = max_stale_s
        # The boards read most recently, kept up to date from the store's change log.
        self._incremental_boards = incremental_boards
        self._maintainer = self._new_maintainer()
        self._version: str | None = None
        self._known: tuple[str, dict[str, list[Any]]] | None = None
        # The keys' cohorts and probation for one data version: the same for every filter
        # and view, so computed once per version (~0.2 s of CPU at 100k submissions).
        self._standing: tuple[str, newkeys.Standing] | None = None
        self._version_at = float("-inf")
        self._boards: _Lru[tuple[str, queries.Filters, tuple[str, ...], View], Board] = _Lru(
            cache_size)
        # Rendered bodies by ETag (which covers the data version and the whole URL).
        self._bodies: _Lru[str, tuple[int, bytes, str]] = _Lru(cache_size)
        self._cache_lock = threading.Lock()
        self._compute_lock = threading.Lock()

    def cached_body(self, key: str) -> tuple[int, bytes, str] | None:
        with self._cache_lock:
            return self._bodies.get(key)

    def remember_body(self, key: str, status: int, body: bytes, media_type: str) -> None:
        with self._cache_lock:
            self._bodies.put(key, (status, body, media_type))

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

    def known_values(self, version: str) -> dict[str, list[Any]]:
        """``queries.known_filter_values`` for this data version (cached for the latest)."""
        with self._cache_lock:
            if self._known is not None and self._known[0] == version:
                return self._known[1]
        with self.engine.connect() as conn:
            known = queries.known_filter_values(conn)
        with self._cache_lock:
            self._known = (version, known)
        return known

    def _new_maintainer(self) -> incremental.Maintainer | None:
        if self._incremental_boards <= 0:
            return None
        return incremental.Maintainer(self.rules, self.min_contributors,
                                      self._incremental_boards)

    def clear_cache(self) -> None:
        """Forget every computed board: the next read computes in full."""
        with self._compute_lock:
            self._maintainer = self._new_maintainer()
        with self._cache_lock:
            self._boards.clear()
            self._bodies.clear()
            self._known = None
            self._standing = None

    def _standing_for(self, conn: Connection, version: str) -> newkeys.Standing:
        """``newkeys.standing`` of the store at ``version`` (the caller holds the compute
        lock), reused for every board of that version."""
        if not self.rules.active:
            return newkeys.Standing({}, frozenset(), {})
        if self._standing is not None and self._standing[0] == version:
            return self._standing[1]
        held = newkeys.standing(newkeys.arrivals(conn), newkeys.newest_receipt(conn),
                                self.rules)
        self._standing = (version, held)
        return held

    def _compute(self, filters: queries.Filters, dimensions: tuple[str, ...], view: View,
                 version: str) -> incremental.Computed:
        """The one place a board is computed: maintained by change (``incremental``), or
        in full when ``incremental`` is off. Sybil resistance (newkeys.py) either way."""
        if self._maintainer is not None:
            with incremental.snapshot(self.engine) as conn:
                return self._maintainer.board(conn, filters, dimensions, view)
        with self.engine.connect() as conn:
            return incremental.compute(conn, filters, dimensions, view, self.rules,
                                       self.min_contributors,
                                       self._standing_for(conn, version))

    def board(self, filters: queries.Filters, dimensions: Sequence[str], view: View,
              version: str | None = None) -> Board:
        version = self.version() if version is None else version
        key = (version, filters, tuple(dimensions), view)
        with self._cache_lock:
            cached = self._boards.get(key)
        if cached is not None:
            return cached
        with self._compute_lock:  # one computation at a time; the others find it cached
            with self._cache_lock:
                cached = self._boards.get(key)
            if cached is not None:
                return cached
            computed = self._compute(filters, tuple(dimensions), view, version)
            board = Board(
                version=version,
                view=view,
                dimensions=tuple(dimensions),
                groups=computed.groups,
                verdict_counts=computed.verdict_counts,
                results=sum(sum(g.verdicts.values()) for g in computed.groups),
                evidence_counts=computed.evidence_counts,
            )
            with self._cache_lock:
                self._boards.put(key, board)
            return board
