"""Which board a draft result is on: rules 5 and 6 of ``board.aggregate``, in plain Python.

Here in the store, apart from the rest of the board's rules, because what is stored
depends on them: ingestion records whether a submission reached a board
(``submissions.reaches_board``, from ``reaches_a_board``; its check workers load neither
SQLAlchemy nor DuckDB, ``tests/architecture/test_imports.py``), a migration fills it for
older rows (``queries.reaches_board_clause``, the same rule in SQL), and ``board.newkeys``
reads it to start a key's ageing.
"""

from __future__ import annotations

from specschema.evidence import CORROBORATED
from specschema.verdicts import BOARDS, Board, listed_on

View = Board
VIEWS: tuple[View, ...] = BOARDS

# Rule 5: the verdicts each view holds, the verdict table's boards (specschema.verdicts). A
# verdict in none of them is on no board.
VIEW_VERDICTS: dict[View, frozenset[str]] = {
    view: frozenset(v.name for v in listed_on(view)) for view in VIEWS}
BOARD_VERDICTS = VIEW_VERDICTS["speedup"]
NOISE_VERDICTS = VIEW_VERDICTS["noise_floor"]
# The verdicts whose results age a key (``board.newkeys``, rule 2): a measured speedup, or
# a measured absence of one.
AGEING_VERDICTS = BOARD_VERDICTS | NOISE_VERDICTS


def on_board(verdict: str, evidence: str | None) -> bool:
    """Rule 6: a confirmed verdict counts only with corroborated counters (None: not
    assessed, which no stored row is after store version 4, counts as not corroborated)."""
    return verdict != "confirmed" or evidence in CORROBORATED


def reaches_a_board(role: str, verdict: str, evidence: str | None) -> bool:
    """Whether a config's result is on the speedup board or the noise floor: what starts
    a key's ageing (``board.newkeys``, rule 2; ``queries.reaches_board_clause`` in SQL)."""
    return role == "draft" and verdict in AGEING_VERDICTS and on_board(verdict, evidence)
