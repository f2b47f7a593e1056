"""A computed board and the snapshots the read service keeps (``leaderboard``): values
computed from one state of the store, with the data version they show."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection

from specserver.board.acceptance import GroupAcceptance, KeyTuple
from specserver.board.aggregate import GroupAggregate, View

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class Lru(Generic[K, V]):
    """A dict of at most ``size`` items that forgets the least recently used first."""

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
    # Each group's acceptance per draft position (``acceptance``), by its key
    # (``aggregate.flat_key``); a group without per-position counts has none. None: not
    # computed (only the reads that ask for it compute it).
    acceptance: dict[KeyTuple, GroupAcceptance] | None = None
    # The speedup board's groups of chips kept apart until corroborated (``chips``).
    uncorroborated: list[GroupAggregate] = field(default_factory=list)


@dataclass(frozen=True)
class Snapshot(Generic[T]):
    """A value computed from one state of the store."""

    version: str  # the data version of that state
    read_at: float  # time.time() when that state was read: the value shows the data of then
    value: T

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.read_at)


Compute = Callable[[Connection, str], T]


@dataclass
class _Entry:
    snapshot: Snapshot[Any]
    compute: Compute[Any]
    computed: float  # time.monotonic() when its computation started
    read: float  # time.monotonic() of its last read
    failed: float = float("-inf")  # time.monotonic() of its last failed recomputation
    wanted: bool = False  # a read found it behind the store: the refresher recomputes it


# Called by the refresher with each snapshot it computed (its key, the snapshot), before
# that snapshot is served: whatever is derived from a snapshot can be made ready for the
# first read after a recomputation (``ReadService.before_serving``).
BeforeServing = Callable[[Hashable, Snapshot[Any]], None]
READ_LATELY_S = 30.0  # a snapshot not read for this long is not looked at for being behind


@dataclass(frozen=True)
class Freshness:
    """How fresh a served snapshot is, for the response's headers."""

    version: str
    read_at: float
    age_s: float
    current: bool  # every write committed ``window`` before the read is in it (``of``)

    @classmethod
    def of(cls, snapshot: Snapshot[Any], look: tuple[float, str] | None, asked: float,
           window: float) -> Freshness:
        """``snapshot``'s freshness for a read asked at ``asked`` (time.monotonic()), from
        the latest ``look`` at the store's data version (time.monotonic() it began,
        version): current only when a look that began at most ``window`` before the read
        found the snapshot's version. An older look (after a quiet spell: the refresher
        looks only when reads ask) says nothing of the writes since."""
        current = look is not None and look[1] == snapshot.version and look[0] >= asked - window
        return cls(snapshot.version, snapshot.read_at, snapshot.age_s(), current)
