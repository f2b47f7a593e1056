"""board."""

from typing import TYPE_CHECKING

from specserver.frontdoor import lazy_names

# --- front door: what other rooms import from this one, and only this
# (tests/architecture/test_front_doors.py). Names load on first use, so that
# importing one does not import the whole room.

if TYPE_CHECKING:
    from specserver.board.acceptance import GroupAcceptance, KeyTuple, acceptance_words
    from specserver.board.aggregate import GroupAggregate, View
    from specserver.board.leaderboard import ReadService
    from specserver.board.snapshots import Board, Freshness, Lru, Snapshot

_LAZY: dict[str, str] = {
    "acceptance_words": "specserver.board.acceptance",
    "Board": "specserver.board.snapshots",
    "Freshness": "specserver.board.snapshots",
    "GroupAcceptance": "specserver.board.acceptance",
    "GroupAggregate": "specserver.board.aggregate",
    "KeyTuple": "specserver.board.acceptance",
    "Lru": "specserver.board.snapshots",
    "ReadService": "specserver.board.leaderboard",
    "Snapshot": "specserver.board.snapshots",
    "View": "specserver.board.aggregate",
}

__all__ = [
    "Board",
    "Freshness",
    "GroupAcceptance",
    "GroupAggregate",
    "KeyTuple",
    "Lru",
    "ReadService",
    "Snapshot",
    "View",
    "acceptance_words",
    "aggregate",
    "newkeys",
]

__getattr__ = lazy_names(__name__, _LAZY)
