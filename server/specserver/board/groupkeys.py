"""How the board tells its groups apart: a group is its key, the values of its dimensions'
fields, and a group's label is that key, never one of its rows.

On PostgreSQL (and in the tests' reference in memory), groups are formed on the key values
themselves (``GROUP BY``, a dictionary). On DuckDB the board's rows come sorted by group
and are reduced over numpy columns (``sql``), and grouping or sorting ~1,000,000 rows on
fourteen strings each costs 2-2.5x more than on a number. So there a row carries two
64-bit hashes, one of its key's submission fields and one of its draft fields
(``GroupKeys.hashes``), and rows are grouped on the pair. DuckDB's ``hash`` is fast but
invertible: a string with any chosen hash is found in a millisecond, and a review made an
Apple M4 Max result share the hash of an honest Apple M2 group, take its label and move
its median. So the hashes are

- **checked**: every distinct key part each table holds is read first with its hash (one
  ``GROUP BY`` per table, no join: ~50 ms at a million submissions, against ~0.23 s for a
  second pass over the joined rows; the tables' parts are a superset of the board rows'),
  and a hash that two parts share *clashes*. Parts whose hashes are all distinct make
  pairs of hashes that are distinct for distinct keys (one hash of both sides could still
  collide), so the pair is the key. Where parts clash, the rows tell which part they hold
  by value (``grouped``);
- **keyed**: a random number, new for each read, heads every hash, so that no key can be
  prepared to collide with another through the way DuckDB combines columns (a field whose
  own hash collides with another's still does: the check is what makes groups right).

A group's key is put together from its parts as read (``key``). The board maintained by
change (``incremental``), its full computation, every filter and the page read groups
through ``sql.contributor_columns``, on both stores: one rule.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    and_,
    cast,
    column,
    func,
    literal,
    literal_column,
    select,
    values,
)

from specserver.board.aggregate import KeyValue
from specserver.store import (
    Filters,
    dimensions,
    draft_clauses,
    queries,
    tables,
)

KeyTuple = tuple[KeyValue, ...]
SUBMISSION, DRAFT = 0, 1  # the two sides of a key: the submission's fields, the draft's


def side_hash(secret: int, columns: Sequence[Any]) -> Any:
    """The keyed 64-bit hash of one side's columns (a constant when the side has none)."""
    if not columns:
        return literal_column("0")
    return func.hash(cast(literal(secret), BigInteger), *columns)


@dataclass
class GroupKeys:
    """A board's key fields split by side, every part each side's table holds by its hash,
    and the parts whose hash another part shares (``clashing``)."""

    secret: int
    columns: tuple[list[Any], list[Any]]  # per side: its fields' columns, in key order
    places: tuple[list[int], list[int]]  # per side: where each goes in the whole key
    parts: tuple[dict[int, KeyTuple], dict[int, KeyTuple]]  # per side: hash -> its part
    clashing: tuple[list[KeyTuple], list[KeyTuple]]  # per side: parts sharing a hash

    @classmethod
    def read(cls, conn: Connection, draft: Any, filters: Filters,
             dimension_names: Sequence[str], counted: Sequence[str]) -> GroupKeys:
        """The parts the store holds for a board of these dimensions (``draft``: the
        summaries alias its rows join), checked: every submission's (visibility and the
        filters cost more to test than they save: ~40 against ~20 ms at a million), the
        draft results of the view's verdicts on a board that match the filters."""
        columns: tuple[list[Any], list[Any]] = ([], [])
        places: tuple[list[int], list[int]] = ([], [])
        fields = [f for name in dimension_names for f in dimensions.BY_NAME[name].fields]
        for place, found in enumerate(fields):
            side = DRAFT if found.on_draft else SUBMISSION
            columns[side].append(found.column(draft))
            places[side].append(place)
        # A new secret per read: the hashes only need to agree within one snapshot.
        keys = cls(secrets.randbits(63), columns, places, ({}, {}), ([], []))
        if columns[SUBMISSION]:
            keys._learn(SUBMISSION, conn, tables.submissions, [])
        if columns[DRAFT]:
            keys._learn(DRAFT, conn, draft, [
                draft.c.role == "draft", draft.c.observed.in_(list(counted)),
                queries.on_board_clause(draft), *draft_clauses(filters, draft)])
        return keys

    def _learn(self, side: int, conn: Connection, source: Any, where: list[Any]) -> None:
        columns = self.columns[side]  # each distinct part hashed as the board's rows are
        found = conn.execute(select(side_hash(self.secret, columns), *columns)
                             .select_from(source).where(*where).group_by(*columns))
        by_hash: dict[int, list[KeyTuple]] = {}
        for hashed, *part in found.all():
            by_hash.setdefault(hashed, []).append(tuple(part))
        for hashed, parts in by_hash.items():
            if len(parts) == 1:
                self.parts[side][hashed] = parts[0]
            else:
                self.clashing[side].extend(parts)

    def grouped(self, source: Any) -> tuple[Any, list[Any]]:
        """``source`` (the board's rows) and the columns that name a row's group: the hash
        of each side of its key and, for a side where parts clash, the number of its part
        among ``clashing`` (-1: its hash is its own), found by value: a join to those
        parts on every column of the side, in the same pass. With every hash clashing, a
        cold board at a million submissions took 3.4 s of CPU against 3.3 s with none
        (a loaded machine); a second query reading the clashing rows' key values took
        7.3 s."""
        named = [side_hash(self.secret, self.columns[side]).label(f"key_side_{side}")
                 for side in (SUBMISSION, DRAFT)]
        for side in (SUBMISSION, DRAFT):
            if not self.clashing[side]:
                continue
            columns = self.columns[side]
            number = column(f"clash_{side}", Integer)
            table = (values(*(column(f"k{i}", c.type) for i, c in enumerate(columns)),
                            number, name=f"clashing_{side}")
                     .data([(*part, n) for n, part in enumerate(self.clashing[side])]))
            source = source.outerjoin(table, and_(*(
                c.is_not_distinct_from(cast(table.c[f"k{i}"], c.type))
                for i, c in enumerate(columns))))
            named.append(func.coalesce(table.c[f"clash_{side}"], -1).label(f"part_{side}"))
        return source, named

    def key(self, names: Sequence[int]) -> KeyTuple:
        """A group's key from what names it (``grouped``'s columns, in order)."""
        key: list[KeyValue] = [None] * (len(self.places[SUBMISSION])
                                            + len(self.places[DRAFT]))
        numbers = iter(names[2:])
        for side in (SUBMISSION, DRAFT):
            number = next(numbers) if self.clashing[side] else -1
            if self.places[side]:
                part = (self.clashing[side][number] if number >= 0
                        else self.parts[side][names[side]])
                for place, value in zip(self.places[side], part, strict=True):
                    key[place] = value
        return tuple(key)
