"""board."""

from typing import TYPE_CHECKING

from specserver.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specserver.board.aggregate import GroupAggregate, View
    from specserver.board.leaderboard import Board, Freshness, ReadService, Snapshot

_LAZY: dict[str, str] = {
    "Board": "specserver.board.leaderboard",
    "Freshness": "specserver.board.leaderboard",
    "GroupAggregate": "specserver.board.aggregate",
    "ReadService": "specserver.board.leaderboard",
    "Snapshot": "specserver.board.leaderboard",
    "View": "specserver.board.aggregate",
}

__all__ = [
    "Board",
    "Freshness",
    "GroupAggregate",
    "ReadService",
    "Snapshot",
    "View",
    "aggregate",
    "newkeys",
]

__getattr__ = lazy_names(__name__, _LAZY)
