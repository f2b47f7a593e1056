"""Chips the known-chip table does not list stay off the speedup board until corroborated.

Anyone can name a chip nobody has: one contributor who invents "Apple M9 Ultra" opens a
group of their own that no one else can contest (no honest result ever lands in it), and
plausibility judges such a chip at the fastest memory there is, which bounds little. So a
chip the table lists (``known_chips.json``, ``listed``) is on the speedup board at once; an
unlisted one only once results on it reached a board (``newkeys.ageing_clause``: complete,
visible, a draft result on the speedup board or the noise floor, from a key that is not
banned) from at least the board's ``min_contributors`` address ranges
(``submissions.origin_hash``, the keyed hash of a sender's IPv4 /24 or IPv6 /48 that cohorts
are formed by: ``newkeys`` rule 1). A key stored without a range (before ranges were kept)
counts as a range of its own, as does each imported result. Until then its groups are
listed apart, flagged ``uncorroborated`` (docs/aggregation.md, "Chips nobody else has").

A chip without a name (a fingerprint that found none) is no invented name: every such
result shares that one group, so it stays on the board.

A board grouped by the chip (the default, the page) is split by each group's key after it
is computed, so a chip becoming corroborated costs no recomputation. A board grouped
without it is read as two, split by a pair of filters (``Filters.split``) so that its
groups do not count the apart chips' rows; those filters name the chips on the board, so a
new invented chip changes neither side (only a chip becoming corroborated, or losing it,
does, and then those boards are computed again in full). The board maintained by change
and a full computation split alike (``incremental.Maintainer``).
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import Connection, func, literal, select

from specserver.board.newkeys import ageing_clause
from specserver.store import backend_of, tables, visible_clause


def corroborated(conn: Connection, listed: Collection[str], min_contributors: int
                 ) -> tuple[str, ...]:
    """The unlisted chips with results on a board from ``min_contributors`` address
    ranges or more, sorted."""
    sub = tables.submissions
    # Most stores hold few rows of unlisted chips: a scan of the chip column alone finds
    # them (4 ms of CPU at a million submissions), and the voices are counted over their
    # rows only (the whole count scanned every row's flags: 90 ms there).
    unlisted = sorted(str(chip) for chip in conn.execute(
        select(sub.c.chip).where(sub.c.chip.is_not(None), sub.c.chip.not_in(sorted(listed)))
        .distinct()).scalars())
    if not unlisted:
        return ()
    voice = func.coalesce(literal("range:") + sub.c.origin_hash,
                          literal("key:") + sub.c.key_id,
                          literal("import:") + sub.c.submission_id)
    found = conn.execute(
        select(sub.c.chip)
        .where(sub.c.chip.in_(unlisted), visible_clause(), ageing_clause(backend_of(conn)))
        .group_by(sub.c.chip)
        .having(func.count(voice.distinct()) >= min_contributors)
    ).scalars()
    return tuple(sorted(str(chip) for chip in found))


def on_board(conn: Connection, listed: Collection[str], min_contributors: int
             ) -> tuple[str, ...]:
    """The named chips whose groups are on the speedup board: the listed and the
    corroborated ones."""
    return tuple(sorted({*listed, *corroborated(conn, listed, min_contributors)}))
