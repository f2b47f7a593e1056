"""A group's acceptance per draft position: of the rounds that reached position i, the
share that accepted the token there too (a_i, ``specschema.breakdown``).

Counted as the board counts speedups (``aggregate``, rule 3, and ``newkeys``' fold): each
voice is one contributor, or one cohort of keys from one address range, or the block of
every new key (the board's ``leaderboard`` passes the maintained standing as ``voice``). A
voice's rows in a group (configs, or configs x domains with the ``domain`` dimension:
``store.domainview``) pool their rounds and per-position counts, which gives its a_i
exactly as a config's own trials give it (``store.positions``); the group's a_i at each
position is the median of its voices' at that position, over those whose drafts reached it
(a deeper config has more positions). A disputed group (``aggregate``, rule 8) is not
split here: its acceptance counts the recent side too. Only the board's own
rows count (the view's verdicts, on a board: ``sql``'s clauses) and only those whose engine
reported both counts (llama-server's /metrics): a group without any has none, which the
words say rather than showing zeros.

One query and a pass in Python per board that asks for it, in full each time (not
maintained by change): 8.4-8.8 s of CPU at a million draft results that all have counts
(BENCHMARKS.md), so only reads that ask for it (``acceptance=true``) compute it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, select

from specschema.breakdown import position_rates, position_totals
from specschema.stats import median
from specserver.board.aggregate import DIMENSIONS, KeyValue
from specserver.board.incremental import Maintainer
from specserver.board.sql import board_rows, contributor_of, joined_source, plain_rows
from specserver.store import VERDICTS, Filters, draft_rows, field_column, positions_of

__all__ = ["GroupAcceptance", "acceptance_words", "group_acceptance"]

KeyTuple = tuple[KeyValue, ...]
# The voice of every key still new (``newkeys``: one block).
NEW_KEYS_VOICE = "new keys"


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


def across_contributors(profiles: Iterable[tuple[int, tuple[float, ...]]]
                        ) -> GroupAcceptance | None:
    """Per position, the median of the contributors' a_i that reach it (pure)."""
    listed = list(profiles)
    if not listed:
        return None
    width = max(len(rates) for _, rates in listed)
    columns = [[rates[i] for _, rates in listed if i < len(rates)] for i in range(width)]
    return GroupAcceptance(tuple(median(c) for c in columns), tuple(len(c) for c in columns),
                           sum(rounds for rounds, _ in listed))


def maintained_voice(maintainer: Maintainer) -> Callable[[str], str]:
    """A contributor's voice on the boards ``maintainer`` holds (``newkeys``' fold): its
    cohort's first key, or one block for every new cohort; read from its standing
    (``incremental``) right after it computed a board, under the same lock."""
    codes = maintainer._codes  # noqa: SLF001 - the standing the board was computed with
    standing = maintainer._standing.arrays  # noqa: SLF001

    def voice(name: str) -> str:
        code = codes.index.get(name)
        if code is None or code >= len(standing.cohort):
            return name
        cohort = int(standing.cohort[code])
        return NEW_KEYS_VOICE if standing.new[cohort] else codes.names[cohort]
    return voice


def reduce_acceptance(rows: Iterable[tuple[KeyTuple, str, int, str]],
                      voice: Callable[[str], str] = str) -> dict[KeyTuple, GroupAcceptance]:
    """(group key, contributor, rounds, stored per-position counts) rows to each group's
    acceptance (pure): pooled per voice (``voice``: a contributor's, by default the
    contributor itself), then across voices."""
    pooled: dict[KeyTuple, dict[str, list[tuple[int, list[int] | None]]]] = {}
    for key, who, rounds, text in rows:
        pooled.setdefault(key, {}).setdefault(voice(who), []).append(
            (rounds, positions_of(text)))
    found: dict[KeyTuple, GroupAcceptance] = {}
    for key, contributors in pooled.items():
        profiles = []
        for units in contributors.values():
            totals = position_totals(units)
            rates = None if totals is None else position_rates(*totals)
            if totals is not None and rates is not None:
                profiles.append((totals[0], rates))
        group = across_contributors(profiles)
        if group is not None:
            found[key] = group
    return found


def group_acceptance(conn: Connection, filters: Filters, dimensions: Sequence[str],
                     verdicts: Iterable[str], voice: Callable[[str], str] = str
                     ) -> dict[KeyTuple, GroupAcceptance]:
    """Each group's acceptance per position on a board of these filters, dimensions and
    verdicts (keys as ``aggregate.flat_key``; ``voice`` as ``reduce_acceptance``); groups
    without counts are left out."""
    counted = [v for v in VERDICTS if v in set(verdicts)]
    draft = draft_rows(filters, dimensions)
    keys = [field_column(f, draft) for d in dimensions for f in DIMENSIONS[d]]
    stmt = (select(*keys, contributor_of(), draft.c.rounds, draft.c.accepted_per_position)
            .select_from(joined_source(draft, conn.dialect.name))
            .where(*board_rows(draft, filters, counted), draft.c.rounds.is_not(None),
                   draft.c.rounds > 0, draft.c.accepted_per_position.is_not(None)))
    width = len(keys)
    return reduce_acceptance(((tuple(row[:width]), str(row[width]), int(row[width + 1]),
                               str(row[width + 2])) for row in plain_rows(conn.execute(stmt))),
                             voice)
