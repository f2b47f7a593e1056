"""The board's draft results per kind of work: the rows a board reads when the ``domain``
dimension is grouped on or filtered by.

Without it a draft result is one submission x draft config (a ``summaries`` row). With it,
it is one submission x draft config x domain: ``draft_rows(True)`` is ``summaries`` joined
to ``domain_results`` (store version 15), under the same alias and column names, so every
query of the board (``board.sql``, ``board.groupkeys``) reads it as it reads ``summaries``:

- a config of a protocol with a prompt set gives one row per domain, whose decode-rate
  speedup, baseline tok/s, rounds and per-position counts are the domain's; its wall-time
  speedup is null (only the decode rate is computed per domain); its verdict and evidence
  are the config's, so exactly the rows the speedup board takes today reach it per domain;
- a config of a protocol without one gives one row, domain ``UNSPECIFIED``, with the
  config's own figures: an older result never reads as a kind of work it did not label.

``plain_clause`` is the ``domain`` filter on a plain ``summaries`` row (the submission list
and the export keep one row per config, the baseline's too): the result was measured on
that domain (or, for ``UNSPECIFIED``, its protocol has no prompt set: no row at all).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, String, and_, case, exists, literal_column, null, select

from specserver.store import tables
from specserver.store.domainrows import UNSPECIFIED

__all__ = ["BOARD_SUMMARY_COLUMNS", "PER_DOMAIN", "draft_rows", "plain_clause"]

summ = tables.summaries
dom = tables.domain_results

# The summaries columns a board reads (the restricted read's shadow copies them).
BOARD_SUMMARY_COLUMNS = ("submission_id", "id_digest", "config_name", "role", "draft_model",
                         "draft_digest", "draft_quant", "mechanism", "observed", "evidence",
                         "spec_type", "depth", "speedup_tps", "speedup_wall", "baseline_tps",
                         "rounds", "accepted_per_position")
# Those a domain's row replaces (None: no per-domain value; the row reads null).
PER_DOMAIN: dict[str, str | None] = {
    "speedup_tps": "speedup_tps", "speedup_wall": None, "baseline_tps": "baseline_tps",
    "rounds": "rounds", "accepted_per_position": "accepted_per_position"}
# Inlined, not bound: a SELECT's expression and its GROUP BY render alike (PostgreSQL).
_UNSPECIFIED = literal_column(f"'{UNSPECIFIED}'", String)


def draft_rows(by_domain: bool, name: str = "d") -> Any:
    """The board's draft results under alias ``name``: ``summaries``, or with
    ``by_domain`` one row per domain (module docstring), with a ``domain`` column."""
    if not by_domain:
        return summ.alias(name)
    found = dom.c.domain.is_not(None)
    columns: list[Any] = []
    for column in BOARD_SUMMARY_COLUMNS:
        if column not in PER_DOMAIN:
            columns.append(summ.c[column])
            continue
        own = PER_DOMAIN[column]
        columns.append(case((found, null() if own is None else dom.c[own]),
                            else_=summ.c[column]).label(column))
    columns.append(case((found, dom.c.domain), else_=_UNSPECIFIED).label("domain"))
    joined = summ.outerjoin(dom, and_(dom.c.submission_id == summ.c.submission_id,
                                      dom.c.config_name == summ.c.config_name))
    return select(*columns).select_from(joined).subquery(name)


def plain_clause(summary: Any, value: object) -> ColumnElement[bool]:
    """The ``domain`` filter on a plain ``summaries`` alias (module docstring)."""
    mine = [dom.c.submission_id == summary.c.submission_id]
    if value == UNSPECIFIED:
        return ~exists().where(*mine)
    return exists().where(*mine, dom.c.domain == value)
