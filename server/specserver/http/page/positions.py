"""A board group's acceptance per draft position as the page shows it: one small bar per
position, filled to its share, with the share as text on it (readable without the bar)
and the API's words for the whole as its title (``board.acceptance``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specserver.board import (
    GroupAcceptance,
    GroupAggregate,
    KeyTuple,
    acceptance_words,
    aggregate,
)


@dataclass(frozen=True)
class PositionBar:
    position: int  # from 1
    share: float  # a_i
    text: str  # "88%"
    fill: str  # the bar's height, for the style: "0.880"


@dataclass(frozen=True)
class Positions:
    bars: tuple[PositionBar, ...]
    words: str  # acceptance_words: who and how many rounds


def positions_of(group: GroupAggregate,
                 accepted: Mapping[KeyTuple, GroupAcceptance] | None) -> Positions | None:
    """The group's bars, or None: the board was read without acceptance, or the group's
    engines reported no per-position counts."""
    found = None if accepted is None else accepted.get(aggregate.flat_key(group))
    if found is None or not found.per_position:
        return None
    return Positions(tuple(PositionBar(i + 1, a, f"{a:.0%}", f"{a:.3f}")
                           for i, a in enumerate(found.per_position)),
                     acceptance_words(found))
