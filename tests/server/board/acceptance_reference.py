"""The reference the board's acceptance per position is held equal to: its first definition,
a pass in Python over every board row with counts (``board.acceptance`` pools them in the
database now). Each voice's rounds and per-position counts pooled
(``specschema.breakdown``), then the median across voices at each position; a disputed
group's recent voices left out."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from sqlalchemy import Connection, select

from specschema.breakdown import position_rates, position_totals
from specschema.stats import median
from specserver.board.acceptance import GroupAcceptance, KeyTuple
from specserver.board.aggregate import DIMENSIONS
from specserver.board.keystanding import Voices
from specserver.board.sql import board_rows, contributor_of, joined_source
from specserver.store import (
    VERDICTS,
    Filters,
    backend_of,
    draft_rows,
    field_column,
    positions_of,
)


def across_contributors(profiles: Iterable[tuple[int, tuple[float, ...]]]
                        ) -> GroupAcceptance | None:
    """Per position, the median of the voices' a_i that reach it."""
    listed = list(profiles)
    if not listed:
        return None
    width = max(len(rates) for _, rates in listed)
    columns = [[rates[i] for _, rates in listed if i < len(rates)] for i in range(width)]
    return GroupAcceptance(tuple(median(c) for c in columns), tuple(len(c) for c in columns),
                           sum(rounds for rounds, _ in listed))


def reduce_acceptance(rows: Iterable[tuple[KeyTuple, str, int, str]],
                      voices: Voices | None = None, disputed: Collection[KeyTuple] = ()
                      ) -> dict[KeyTuple, GroupAcceptance]:
    """(group key, contributor, rounds, stored per-position counts) rows to each group's
    acceptance: pooled per voice, then across voices."""
    spoken = {} if voices is None else {
        name: (voice, recent)
        for name, voice, recent in zip(voices.names, voices.voices, voices.recent, strict=True)}
    pooled: dict[KeyTuple, dict[str, list[tuple[int, list[int] | None]]]] = {}
    for key, who, rounds, text in rows:
        voice, recent = spoken.get(who, (who, False))
        if recent and key in disputed:
            continue
        pooled.setdefault(key, {}).setdefault(voice, []).append((rounds, positions_of(text)))
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


def reference_acceptance(conn: Connection, filters: Filters, dimensions: Sequence[str],
                         verdicts: Iterable[str], voices: Voices | None = None,
                         disputed: Collection[KeyTuple] = ()) -> dict[KeyTuple, GroupAcceptance]:
    """``board.acceptance.group_acceptance`` as it was first computed: every board row with
    counts read, then ``reduce_acceptance``."""
    counted = [v for v in VERDICTS if v in set(verdicts)]
    draft = draft_rows(filters, dimensions)
    keys = [field_column(f, draft) for d in dimensions for f in DIMENSIONS[d]]
    stmt = (select(*keys, contributor_of(), draft.c.rounds, draft.c.accepted_per_position)
            .select_from(joined_source(draft, backend_of(conn)))
            .where(*board_rows(draft, filters, counted), draft.c.rounds.is_not(None),
                   draft.c.rounds > 0, draft.c.accepted_per_position.is_not(None)))
    width = len(keys)
    return reduce_acceptance(((tuple(row[:width]), str(row[width]), int(row[width + 1]),
                               str(row[width + 2])) for row in conn.execute(stmt)),
                             voices, disputed)
