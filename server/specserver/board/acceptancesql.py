"""A board's acceptance per draft position pooled in SQL (``acceptance``'s query), on DuckDB
and PostgreSQL alike: the database returns one row per group, never a row per draft result
or per contributor.

From the board's rows with both counts (``sql.board_rows``, rounds > 0), in one statement:

1. each row's stored counts (``store.positions``: ``[13,8,3]``) split into one column per
   draft position, up to the longest list stored (NULL past a row's own end), and its
   voice: the contributor, or the one ``Voices`` names (a cohort's first key, the block of
   new keys), with whether that voice is recent (``aggregate`` rule 8);
2. per group and voice, the sums: the voice's pooled rounds and per-position counts
   (``specschema.breakdown.position_totals``: a shorter list adds nothing past its end);
3. per position, the voice's rate: its count over the one before it (the rounds, at the
   first), 0 where none reached it (``position_rates``);
4. per group, the rounds summed and, per position, the two middle rates across the voices
   that reached it (``percentile_disc`` of the rates and of their negatives) and how many
   did; with ``settled``, the same over the group's established voices alone.

Columns rather than a row per position: unnesting the lists made ~13 million rows at a
million draft results, three times the CPU of these sums. On DuckDB a group is named by
the board's checked hashes of its key's sides (``groupkeys``) instead of its fourteen key
fields, as the board's own rows are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Connection,
    Double,
    String,
    case,
    cast,
    false,
    func,
    literal,
    select,
    type_coerce,
)

from specserver.board.aggregate import DIMENSIONS, KeyValue
from specserver.board.groupkeys import GroupKeys
from specserver.board.keystanding import Voices
from specserver.board.sql import board_rows, contributor_of, joined_source, plain_rows
from specserver.store import Filters, backend_of, draft_rows, field_column, tables

__all__ = ["Side", "pooled_sides"]

KeyTuple = tuple[KeyValue, ...]


@dataclass(frozen=True)
class Side:
    """A group's voices, or its established ones: their rounds summed and, per draft
    position that any of them reached, the lower and upper middle of their a_i and how
    many reached it."""

    rounds: int
    middles: tuple[tuple[float, float, int], ...]


def longest_list(conn: Connection) -> int:
    """How many positions the longest stored list of counts holds (at most; the configs'
    and the kinds of work's: a board reads either). 0 when none is stored."""
    def longest(table: Any) -> Any:
        text = table.c.accepted_per_position
        commas = func.length(text) - func.length(func.replace(text, ",", ""))
        return select(func.max(commas + 1)).scalar_subquery()
    found = conn.execute(select(longest(tables.summaries),
                                longest(tables.domain_results))).one()
    return max((int(n) for n in found if n is not None), default=0)


def _positions(text: Any) -> Any:
    """The stored text of a list of counts as an array of its numbers' texts."""
    bare = func.replace(func.replace(text, "[", ""), "]", "")
    return type_coerce(func.string_to_array(bare, ","), ARRAY(String))


def _voices_table(voices: Voices) -> Any:
    """``voices`` as rows (name, voice, recent), from three array parameters."""
    def column(name: str, values: list[Any], kind: Any) -> Any:
        return func.unnest(cast(literal(values, ARRAY(kind)), ARRAY(kind))).label(name)
    return select(column("name", voices.names, String), column("voice", voices.voices, String),
                  column("recent", voices.recent, Boolean)).subquery("voices")


def _side(found: Any, rounds: Any, rates: Sequence[Any]) -> list[Any]:
    """The aggregates of one side over ``found`` (its rates NULL for the other side)."""
    columns: list[Any] = [func.sum(rounds)]
    for rate in rates:
        columns += [func.percentile_disc(0.5).within_group(rate),
                    -func.percentile_disc(0.5).within_group(-rate), func.count(rate)]
    return columns


def _read_side(values: Sequence[Any]) -> Side | None:
    if values[0] is None:
        return None
    middles = [(float(values[i]), float(values[i + 1]), int(values[i + 2]))
               for i in range(1, len(values), 3) if values[i + 2]]
    return Side(int(values[0]), tuple(middles))


def pooled_sides(conn: Connection, filters: Filters, dimensions: Sequence[str],
                 counted: Sequence[str], voices: Voices | None, settled: bool
                 ) -> dict[KeyTuple, tuple[Side | None, Side | None]]:
    """Each group's ``Side`` of all its voices, and with ``settled`` of its established
    ones (None: it has none; without ``settled``, None)."""
    width = longest_list(conn)
    if not width:
        return {}
    backend = backend_of(conn)
    draft = draft_rows(filters, dimensions)
    source = joined_source(draft, backend)
    keys: GroupKeys | None = None
    if backend.hashes_keys:
        keys = GroupKeys.read(conn, draft, filters, dimensions, counted)
        source, named = keys.grouped(source)
    else:
        named = [field_column(f, draft) for d in dimensions for f in DIMENSIONS[d]]
    named = [c.label(f"k{i}") for i, c in enumerate(named)]
    who = contributor_of()
    voice: Any = who
    recent: Any = false()
    if voices is not None and voices.names:
        table = _voices_table(voices)
        source = source.outerjoin(table, table.c.name == who)
        voice = func.coalesce(table.c.voice, who)
        recent = func.coalesce(table.c.recent, false())
    rows = (select(*named, voice.label("voice"), recent.label("recent"), draft.c.rounds,
                   _positions(draft.c.accepted_per_position).label("cells"))
            .select_from(source)
            .where(*board_rows(draft, filters, counted), draft.c.rounds.is_not(None),
                   draft.c.rounds > 0, draft.c.accepted_per_position.is_not(None))
            .subquery("rows"))
    group = [rows.c[c.name] for c in named]
    sums = [cast(func.sum(rows.c.rounds), Double).label("s0"), *(
        cast(func.sum(cast(func.nullif(rows.c.cells[i], ""), BigInteger)), Double
             ).label(f"s{i}") for i in range(1, width + 1))]
    pooled = (select(*group, rows.c.recent, *sums)
              .group_by(*group, rows.c.voice, rows.c.recent).subquery("pooled"))
    totals = [pooled.c[f"s{i}"] for i in range(width + 1)]
    rates = [case((total.is_(None), None), (before == 0, literal(0.0, Double)),
                  else_=total / before)
             for before, total in zip(totals, totals[1:], strict=False)]
    stated = [pooled.c[c.name] for c in named]
    columns = _side(pooled, totals[0], rates)
    if settled:
        kept = ~pooled.c.recent
        columns += _side(pooled, case((kept, totals[0])), [case((kept, r)) for r in rates])
    found = plain_rows(conn.execute(select(*stated, *columns).group_by(*stated)))
    size = 1 + 3 * width
    sides: dict[KeyTuple, tuple[Side | None, Side | None]] = {}
    for row in found:
        values = row[len(named):]
        key = keys.key(row[:len(named)]) if keys is not None else tuple(row[:len(named)])
        sides[key] = (_read_side(values[:size]),
                      _read_side(values[size:]) if settled else None)
    return sides
