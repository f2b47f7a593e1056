"""A group's acceptance per draft position: of the rounds that reached position i, the
share that accepted the token there too (a_i, ``specschema.breakdown``).

Counted as the board counts speedups (``aggregate``, rule 3, and ``newkeys``' fold): each
voice is one contributor, or one cohort of keys from one address range, or the block of
every new key (the board's ``leaderboard`` passes the maintained standing's ``Voices``). A
voice's rows in a group (configs, or configs x domains with the ``domain`` dimension:
``store.domainview``) pool their rounds and per-position counts, which gives its a_i
exactly as a config's own trials give it (``store.positions``); the group's a_i at each
position is the median of its voices' at that position, over those whose drafts reached it
(a deeper config has more positions). A disputed group (``aggregate``, rule 8) counts its
established side alone, as its speedup does (the block of new keys stays). Only the
board's own rows count (the view's verdicts, on a board: ``sql``'s clauses) and only those
whose engine reported both counts (llama-server's /metrics): a group without any has none,
which the words say rather than showing zeros.

The pooling runs in the database (``acceptancesql``: one row per group and position comes
back), in full for each board that asks for it (``acceptance=true``); the board's snapshot
holds it like the rest of the board (``leaderboard``). BENCHMARKS.md has its cost at a
million draft results that all have counts, beside the pass in Python it replaced.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection

from specserver.board.acceptancesql import Side, pooled_sides
from specserver.board.aggregate import GroupAggregate, KeyValue, flat_key
from specserver.board.keystanding import Voices
from specserver.store import VERDICTS, Filters

__all__ = ["GroupAcceptance", "acceptance_words", "disputed_keys", "group_acceptance"]

KeyTuple = tuple[KeyValue, ...]


@dataclass(frozen=True)
class GroupAcceptance:
    per_position: tuple[float, ...]  # a_i, the median over contributors at each position
    contributors: tuple[int, ...]  # how many contributors' drafts reached each position
    rounds: int  # the rounds of every contributor, summed


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def acceptance_words(found: GroupAcceptance | None) -> str:
    """``accepted at draft position 1st 88 %, 2nd 74 %, 3rd 51 % (median of 3
    contributors, 1,204 rounds)``: the API's and the page's words for a group's a_i."""
    if found is None or not found.per_position:
        return "no per-position counts: the engines of this group's results reported none"
    shares = ", ".join(f"{_ordinal(i + 1)} {rate:.0%}"
                       for i, rate in enumerate(found.per_position))
    voices = found.contributors[0]
    who = "1 contributor" if voices == 1 else f"median of {voices} contributors"
    return f"accepted at draft position {shares} ({who}, {found.rounds:,} rounds)"


def disputed_keys(groups: Iterable[GroupAggregate]) -> frozenset[KeyTuple]:
    """The keys of a board's disputed groups (``aggregate``, rule 8)."""
    return frozenset(flat_key(g) for g in groups if g.dispute is not None)


def _group(side: Side | None) -> GroupAcceptance | None:
    """A group's acceptance from its voices' ``Side`` (None: it has no voice)."""
    if side is None:
        return None
    # the median of an even count is the mean of the two middles (specschema.stats.median)
    return GroupAcceptance(tuple((low + high) / 2.0 for low, high, _ in side.middles),
                           tuple(n for _, _, n in side.middles), side.rounds)


def group_acceptance(conn: Connection, filters: Filters, dimensions: Sequence[str],
                     verdicts: Iterable[str], voices: Voices | None = None,
                     disputed: Collection[KeyTuple] = ()) -> dict[KeyTuple, GroupAcceptance]:
    """Each group's acceptance per position on a board of these filters, dimensions and
    verdicts (keys as ``aggregate.flat_key``); ``voices``: who speaks for whom (none: each
    contributor alone), ``disputed``: the keys of the groups whose established side alone
    counts. Groups without counts are left out."""
    counted = [v for v in VERDICTS if v in set(verdicts)]
    # the established side is only worth its columns when a voice is recent
    settled = bool(disputed) and voices is not None and any(voices.recent)
    found: dict[KeyTuple, GroupAcceptance] = {}
    for key, (every, established) in pooled_sides(conn, filters, dimensions, counted,
                                                  voices, settled).items():
        group = _group(established if settled and key in disputed else every)
        if group is not None:
            found[key] = group
    return found
