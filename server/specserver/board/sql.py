"""The leaderboard's SQL: its input rows and the per-contributor reduction, in SQLAlchemy
Core so that they run on DuckDB and PostgreSQL. Filters and visibility are the store's
(``store.queries``); the rules these queries implement are ``board.aggregate``'s.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import fields
from typing import Any

from sqlalchemy import Connection, CursorResult, and_, func, literal, literal_column, or_, select

from specschema.evidence import CORROBORATED, LEVELS
from specserver.board.aggregate import DIMENSIONS, ContributorResult, DraftResult
from specserver.store import (
    VERDICTS,
    Filters,
    draft_clauses,
    field_column,
    submission_clauses,
    tables,
    visible_clause,
)

sub = tables.submissions
summ = tables.summaries


def _row_columns(draft: Any, base: Any) -> dict[str, Any]:
    """DraftResult field -> the column it comes from (``draft``: the draft's summary row,
    ``base``: its baseline's): the dimensions' fields from their table, and the rest."""
    return {
        **{name: field_column(name, draft) for fields in DIMENSIONS.values() for name in fields},
        "submission_id": sub.c.submission_id, "key_id": sub.c.key_id,
        "speedup_tps": draft.c.speedup_tps, "speedup_wall": draft.c.speedup_wall,
        "baseline_tps": base.c.median_tps, "evidence": draft.c.evidence,
    }


def draft_results(conn: Connection, filters: Filters) -> list[DraftResult]:
    """One row per visible submission x draft config, with its baseline's median tok/s."""
    draft = summ.alias("d")
    base = summ.alias("b")
    columns = _row_columns(draft, base)
    stmt = (
        select(*(columns[f.name] for f in fields(DraftResult)))
        .select_from(
            draft.join(sub, sub.c.submission_id == draft.c.submission_id).outerjoin(
                base, and_(base.c.submission_id == draft.c.submission_id,
                           base.c.role == "baseline"))
        )
        .where(draft.c.role == "draft", visible_clause(), *submission_clauses(filters),
               *draft_clauses(filters, draft))
    )
    rows = conn.execute(stmt).all()  # one bulk fetch (iterating fetches row by row)
    return [DraftResult(*row) for row in rows]


def _median(column: Any, dialect: str) -> Any:
    if dialect == "duckdb":
        return func.median(column)  # the same value, computed faster than the ordered-set form
    return func.percentile_cont(literal_column("0.5")).within_group(column)


def contributor_results(
    conn: Connection, filters: Filters, dimensions: Sequence[str], verdicts: Iterable[str],
    submission_ids: Collection[str] | None = None,
) -> list[ContributorResult]:
    """``aggregate.reduce_contributors`` in SQL: one row per group and contributor.

    Same rules: medians ignore missing values (the mean of the middle pair for an even
    count), submissions are counted once, imported rows (no key id) are each their own
    contributor. On DuckDB, groups are formed on a 64-bit hash of the key columns and the
    key values are read by a second, narrow query per hash (about 2.5x faster than grouping
    on the wide string columns at 100k submissions); two distinct keys would have to
    collide in 64 bits to be merged. Both queries run in the connection's one transaction,
    so they see the same snapshot. ``submission_ids``: only these submissions' rows
    (``board.incremental``: every submission of the contributors it reads again).
    """
    dialect = conn.dialect.name
    draft = summ.alias("d")
    base = summ.alias("b")
    keys = [field_column(f, draft) for d in dimensions for f in DIMENSIONS[d]]
    contributor = func.coalesce(sub.c.key_id, literal("imported:") + sub.c.submission_id)
    # With the draft config in the key a submission has at most one row per group.
    submissions = (func.count() if "draft" in dimensions
                   else func.count(draft.c.submission_id.distinct()))
    counts = [func.count().filter(draft.c.observed == v) for v in VERDICTS]
    level = func.coalesce(draft.c.evidence, "none")
    counts += [func.count().filter(level == name) for name in LEVELS]
    source = draft.join(sub, sub.c.submission_id == draft.c.submission_id).outerjoin(
        base, and_(base.c.submission_id == draft.c.submission_id, base.c.role == "baseline"))
    where = [draft.c.role == "draft", draft.c.observed.in_(sorted(verdicts)), visible_clause(),
             board_clause(draft), *submission_clauses(filters), *draft_clauses(filters, draft)]
    if submission_ids is not None:
        where.append(only_submissions(submission_ids, draft))
    hashed = dialect == "duckdb" and bool(keys)
    group_key: list[Any] = [func.hash(*keys)] if hashed else list(keys)
    stmt = (
        select(*group_key, contributor, submissions, _median(draft.c.speedup_tps, dialect),
               _median(draft.c.speedup_wall, dialect), _median(base.c.median_tps, dialect),
               *counts)
        .select_from(source).where(*where).group_by(*group_key, contributor)
    )
    rows = plain_rows(conn.execute(stmt))
    width = len(group_key)
    if hashed:
        # Without the baseline's join, which adds no row (a left join) and no key value:
        # ~0.6 s less CPU at a million submissions.
        joined = draft.join(sub, sub.c.submission_id == draft.c.submission_id)
        key_stmt = (select(group_key[0], *(func.any_value(k) for k in keys))
                    .select_from(joined).where(*where).group_by(group_key[0]))
        key_of = {row[0]: tuple(row[1:]) for row in conn.execute(key_stmt).all()}
        return [ContributorResult(key_of[row[0]], *row[1:]) for row in rows]
    # Medians of DOUBLE columns are floats and counts ints on both dialects: no conversion.
    return [ContributorResult(tuple(row[:width]), *row[width:]) for row in rows]


def plain_rows(result: CursorResult[Any]) -> Sequence[Sequence[Any]]:
    """A result's rows, all at once. DuckDB's own rows are plain tuples of Python values
    already: building SQLAlchemy Row objects for them is skipped."""
    if result.dialect.name == "duckdb":
        rows: Sequence[Sequence[Any]] = result.cursor.fetchall()
        result.close()
        return rows
    return result.all()


def only_submissions(submission_ids: Collection[str], draft: Any) -> Any:
    """These submissions' rows, said of both sides of the join: DuckDB then reads them by
    the submissions' key and filters the summaries while scanning."""
    ids = sorted(submission_ids)
    return and_(sub.c.submission_id.in_(ids), draft.c.submission_id.in_(ids))


def board_clause(draft: Any) -> Any:
    """``aggregate.on_board`` in SQL: a confirmed row needs corroborated counters."""
    return or_(draft.c.observed != "confirmed",
               func.coalesce(draft.c.evidence, "none").in_(sorted(CORROBORATED)))


def evidence_totals(conn: Connection, filters: Filters) -> dict[str, int]:
    """Draft results per evidence level among visible submissions matching the filters
    (those kept off the boards for their evidence included)."""
    draft = summ.alias("d")
    level = func.coalesce(draft.c.evidence, "none")
    stmt = (select(level, func.count())
            .select_from(draft.join(sub, sub.c.submission_id == draft.c.submission_id))
            .where(draft.c.role == "draft", visible_clause(), *submission_clauses(filters),
                   *draft_clauses(filters, draft))
            .group_by(level))
    found = {str(v): int(n) for v, n in conn.execute(stmt).all()}
    return {name: found.get(name, 0) for name in LEVELS}


def verdict_totals(conn: Connection, filters: Filters) -> dict[str, int]:
    """Draft results per verdict among visible submissions matching the filters."""
    draft = summ.alias("d")
    stmt = (select(draft.c.observed, func.count())
            .select_from(draft.join(sub, sub.c.submission_id == draft.c.submission_id))
            .where(draft.c.role == "draft", visible_clause(), *submission_clauses(filters),
                   *draft_clauses(filters, draft))
            .group_by(draft.c.observed))
    found = {str(v): int(n) for v, n in conn.execute(stmt).all()}
    return {v: found.get(v, 0) for v in VERDICTS}
