"""The board's first steps written over plain rows: the reference the store's queries
and the columns are held equal to.

``DraftResult`` is one submission x one draft config as the board sees it (the fields the
dimension table names, ``store/dimensions.py``), read from the store row by row
(``draft_results``); ``reduce_contributors`` reduces each contributor's rows in each group
to their medians (rule 3's first step, ``docs/aggregation.md``), which the board computes
from the store (``board.sql.contributor_columns``: in SQL on PostgreSQL, over numpy columns
on DuckDB); ``aggregate`` runs the rules after it on small sets of rows in memory (every
contributor its own voice). The board used these before its rows became columns; tests
hold the product's fast paths equal to them. Product code never imports this module.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import Connection, null, select

from specschema.evidence import LEVELS
from specschema.stats import median
from specserver.board.aggregate import (
    DEFAULT_MIN_CONTRIBUTORS,
    DIMENSIONS,
    LEVEL_FIELDS,
    GroupAggregate,
    KeyValue,
    View,
    check_dimensions,
    key_dict,
    on_board,
    sort_groups,
    view_of,
)
from specserver.board.columns import (
    COUNT_FIELDS,
    VALUE_FIELDS,
    Codes,
    Reduced,
    Standing,
    group_aggregate,
    group_numbers,
)
from specserver.board.sql import joined_source, sub, visible_drafts
from specserver.store import (
    VERDICTS,
    Filters,
    backend_of,
    by_domain,
    domainview,
    field_column,
    uses_domain,
)


@dataclass(frozen=True, slots=True)
class DraftResult:
    """One submission x one draft config, as the leaderboard sees it."""

    submission_id: str
    key_id: str | None
    protocol_id: str
    protocol_version: int
    protocol_sha256: str
    target_model: str
    target_digest: str | None
    chip: str | None
    memory_gb: int | None
    ollama_version: str | None  # null for llama-server rows
    os: str | None
    backend: str | None
    config_name: str
    draft_model: str | None
    mechanism: str
    verdict: str
    speedup_tps: float | None
    speedup_wall: float | None
    baseline_tps: float | None
    evidence: str | None = None  # specschema.evidence level; None: not assessed
    engine: str = "ollama"
    engine_version: str | None = None
    target_quant: str | None = None
    draft_digest: str | None = None
    draft_quant: str | None = None
    spec_type: str | None = None
    depth: int | None = None
    # The kind of work: set on the per-domain rows (``store.domainview``), None otherwise.
    domain: str | None = None

    @property
    def contributor(self) -> str:
        return self.key_id if self.key_id is not None else f"imported:{self.submission_id}"


def in_view(rows: Iterable[DraftResult], view: View) -> list[DraftResult]:
    return [r for r in rows if view_of(r.verdict) == view and on_board(r.verdict, r.evidence)]


def evidence_counts(rows: Iterable[DraftResult]) -> dict[str, int]:
    counts = Counter(r.evidence or "none" for r in rows)
    return {level: counts.get(level, 0) for level in LEVELS}


def verdict_counts(rows: Iterable[DraftResult]) -> dict[str, int]:
    counts = Counter(r.verdict for r in rows)
    return {v: counts.get(v, 0) for v in VERDICTS}


def _key_getter(dimensions: Sequence[str]) -> Callable[[DraftResult], tuple[KeyValue, ...]]:
    fields = [f for d in dimensions for f in DIMENSIONS[d]]
    if len(fields) > 1:
        return attrgetter(*fields)
    if fields:
        single = attrgetter(fields[0])
        return lambda row: (single(row),)
    return lambda row: ()


def _median_or_none(values: list[float]) -> float | None:
    return median(values) if values else None


class ContributorResult(NamedTuple):
    """Rule 3, first step: one contributor's rows in one group, reduced to medians.

    A NamedTuple: tens of thousands are built per cold aggregation, and tuples build fast.
    """

    key: tuple[KeyValue, ...]  # the group's values, in the order of its dimensions' fields
    contributor: str
    submissions: int
    speedup: float | None  # median of the contributor's speedup_tps in the group
    speedup_wall: float | None
    baseline_tps: float | None
    confirmed: int = 0
    not_observed: int = 0
    not_applied: int = 0
    unknown: int = 0
    baseline_speculated: int = 0
    synthetic: int = 0
    cannot_compare: int = 0
    unstable: int = 0
    incompatible: int = 0
    # Rows per evidence level, in specschema.evidence.LEVELS order (the SQL's too).
    engine_api: int = 0
    log: int = 0
    reported: int = 0
    implausible: int = 0
    no_counters: int = 0  # level "none"

    def evidence(self) -> dict[str, int]:
        return {level: getattr(self, name) for level, name in zip(LEVELS, LEVEL_FIELDS,
                                                                     strict=True)}


def reduce_contributors(rows: Iterable[DraftResult], dimensions: Sequence[str]
                        ) -> list[ContributorResult]:
    """Each contributor's rows in each group, reduced to their medians (None when absent).

    ``board.sql.contributor_columns`` computes the same from the store; a test holds the two
    equal.
    """
    getter = _key_getter(dimensions)
    pools: dict[tuple[tuple[KeyValue, ...], str], list[DraftResult]] = {}
    for row in rows:
        pools.setdefault((getter(row), row.contributor), []).append(row)
    reduced = []
    for (key, who), members in pools.items():
        counts = Counter(r.verdict for r in members)
        levels = evidence_counts(members)
        reduced.append(ContributorResult(
            key=key, contributor=who, submissions=len({r.submission_id for r in members}),
            speedup=_median_or_none([r.speedup_tps for r in members if r.speedup_tps is not None]),
            speedup_wall=_median_or_none(
                [r.speedup_wall for r in members if r.speedup_wall is not None]),
            baseline_tps=_median_or_none(
                [r.baseline_tps for r in members if r.baseline_tps is not None]),
            confirmed=counts["confirmed"], not_observed=counts["not_observed"],
            not_applied=counts["not_applied"], unknown=counts["unknown"],
            baseline_speculated=counts["baseline_speculated"], synthetic=counts["synthetic"],
            cannot_compare=counts["cannot_compare"], unstable=counts["unstable"],
            incompatible=counts["incompatible"],
            engine_api=levels["engine_api"], log=levels["log"], reported=levels["reported"],
            implausible=levels["implausible"], no_counters=levels["none"],
        ))
    return reduced


def _row_columns(draft: Any) -> dict[str, Any]:
    """DraftResult field -> the column it comes from (``draft``: the draft's summary row):
    the dimensions' fields from their table, and the rest (the domain is null on rows that
    are not per domain)."""
    return {
        **{name: field_column(name, draft) for fields in DIMENSIONS.values() for name in fields
           if name != "domain"},
        "domain": draft.c.domain if by_domain(draft) else null(),
        "submission_id": sub.c.submission_id, "key_id": sub.c.key_id,
        "speedup_tps": draft.c.speedup_tps, "speedup_wall": draft.c.speedup_wall,
        "baseline_tps": draft.c.baseline_tps, "evidence": draft.c.evidence,
    }


def draft_results(conn: Connection, filters: Filters, per_domain: bool = False
                  ) -> list[DraftResult]:
    """One row per visible submission x draft config (x domain: ``per_domain``, or a
    ``domain`` filter), with its baseline's median tok/s."""
    draft = domainview.draft_rows(per_domain or uses_domain(filters))
    columns = _row_columns(draft)
    stmt = (
        select(*(columns[f.name] for f in fields(DraftResult)))
        .select_from(joined_source(draft, backend_of(conn)))
        .where(*visible_drafts(draft, filters))
    )
    rows = conn.execute(stmt).all()  # one bulk fetch (iterating fetches row by row)
    return [DraftResult(*row) for row in rows]


def aggregate(rows: Iterable[DraftResult], group_by: Sequence[str],
              min_contributors: int = DEFAULT_MIN_CONTRIBUTORS) -> list[GroupAggregate]:
    """Group ``rows`` by the whitelisted dimensions ``group_by`` (every contributor its own
    voice: no cohorts, no probation); groups in key order. Small sets of rows in memory:
    the board computes the same from the store (``incremental``)."""
    unknown = check_dimensions(group_by)
    if unknown:
        raise ValueError(f"unknown dimensions: {', '.join(unknown)}")
    dimensions = list(dict.fromkeys(group_by))
    reduced = reduce_contributors(rows, dimensions)
    keys, group = group_numbers(r.key for r in reduced)
    found = Reduced(keys, group, [r.contributor for r in reduced],
                    np.array([[math.nan if v is None else v for v in r[3:6]] for r in reduced],
                             dtype=np.float64).reshape(-1, len(VALUE_FIELDS)),
                    np.array([(r.submissions, *r[6:]) for r in reduced],
                             dtype=np.int64).reshape(-1, len(COUNT_FIELDS)))
    codes = Codes()
    standing = Standing.empty()
    by_group = found.by_group(codes)
    standing.fit(len(codes))
    return sort_groups([group_aggregate(key_dict(dimensions, key), rows_, standing, 0,
                                        min_contributors)
                        for key, rows_ in by_group.items()], "key")
