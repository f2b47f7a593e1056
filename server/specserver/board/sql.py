"""The leaderboard's SQL: its input rows and the per-contributor reduction, in SQLAlchemy
Core so that they run on DuckDB and PostgreSQL. Filters and visibility are the store's
(``store.queries``); the rules these queries implement are ``board.aggregate``'s.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from functools import cache
from typing import Any

import numpy as np
from sqlalchemy import (
    Connection,
    CursorResult,
    String,
    bindparam,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
)
from sqlalchemy.sql import visitors
from sqlalchemy.sql.expression import ColumnClause

from specschema.evidence import CORROBORATED, LEVELS
from specserver.board.aggregate import DIMENSIONS, DraftResult
from specserver.board.columns import (
    COUNT_FIELDS,
    VALUE_FIELDS,
    KeyTuple,
    Reduced,
    float_column,
    group_numbers,
)
from specserver.store import (
    VERDICTS,
    Filters,
    changes,
    draft_clauses,
    field_column,
    submission_clauses,
    tables,
    visible_clause,
)

sub = tables.submissions
summ = tables.summaries


def _row_columns(draft: Any) -> dict[str, Any]:
    """DraftResult field -> the column it comes from (``draft``: the draft's summary row):
    the dimensions' fields from their table, and the rest."""
    return {
        **{name: field_column(name, draft) for fields in DIMENSIONS.values() for name in fields},
        "submission_id": sub.c.submission_id, "key_id": sub.c.key_id,
        "speedup_tps": draft.c.speedup_tps, "speedup_wall": draft.c.speedup_wall,
        "baseline_tps": draft.c.baseline_tps, "evidence": draft.c.evidence,
    }


def draft_results(conn: Connection, filters: Filters) -> list[DraftResult]:
    """One row per visible submission x draft config, with its baseline's median tok/s."""
    draft = summ.alias("d")
    columns = _row_columns(draft)
    stmt = (
        select(*(columns[f.name] for f in fields(DraftResult)))
        .select_from(draft.join(sub, sub.c.submission_id == draft.c.submission_id))
        .where(draft.c.role == "draft", visible_clause(), *submission_clauses(filters),
               *draft_clauses(filters, draft))
    )
    rows = conn.execute(stmt).all()  # one bulk fetch (iterating fetches row by row)
    return [DraftResult(*row) for row in rows]


def _median(column: Any, dialect: str) -> Any:
    if dialect == "duckdb":
        return func.median(column)  # the same value, computed faster than the ordered-set form
    return func.percentile_cont(literal_column("0.5")).within_group(column)


def contributor_columns(conn: Connection, filters: Filters, dimensions: Sequence[str],
                        verdicts: Iterable[str]) -> Reduced:
    """``aggregate.reduce_contributors`` in SQL: one row per group and contributor, as
    columns (``columns.Reduced``).

    Same rules: medians ignore missing values (the mean of the middle pair for an even
    count), submissions are counted once, imported rows (no key id) are each their own
    contributor. Only the verdicts of the view are counted (the others are zero: the rows
    are those verdicts'). On DuckDB, groups are formed on a 64-bit hash of the key columns
    (about 2.5x faster than grouping on the wide string columns at 100k submissions; two
    distinct keys would have to collide in 64 bits to be merged), and each group's key
    values are read by a second query from one of its rows, found by row id (a second
    grouping of every row cost ~0.2 s at a million submissions). Both queries run in the
    connection's one transaction, so they see the same snapshot and the same row ids.
    """
    dialect = conn.dialect.name
    draft = summ.alias("d")
    keys = [field_column(f, draft) for d in dimensions for f in DIMENSIONS[d]]
    contributor = func.coalesce(sub.c.key_id, literal("imported:") + sub.c.submission_id)
    # With the draft config in the key a submission has at most one row per group.
    submissions = (func.count() if "draft" in dimensions
                   else func.count(draft.c.submission_id.distinct()))
    counted = [v for v in VERDICTS if v in set(verdicts)]
    counts = [func.count().filter(draft.c.observed == v) for v in counted]
    level = func.coalesce(draft.c.evidence, "none")
    counts += [func.count().filter(level == name) for name in LEVELS]
    # Where each selected count goes among COUNT_FIELDS (submissions first).
    places = [0, *(1 + VERDICTS.index(v) for v in counted),
              *range(1 + len(VERDICTS), len(COUNT_FIELDS))]
    source = draft.join(sub, sub.c.submission_id == draft.c.submission_id)
    where = [draft.c.role == "draft", draft.c.observed.in_(counted), visible_clause(),
             board_clause(draft), *submission_clauses(filters), *draft_clauses(filters, draft)]
    hashed = dialect == "duckdb" and bool(keys)
    group_key: list[Any] = [func.hash(*keys)] if hashed else list(keys)
    row_id: Any = literal_column(f"{draft.name}.rowid")  # DuckDB's, within one snapshot
    stmt = (
        select(*group_key, contributor, submissions, _median(draft.c.speedup_tps, dialect),
               _median(draft.c.speedup_wall, dialect), _median(draft.c.baseline_tps, dialect),
               *counts, *([func.min(row_id)] if hashed else []))
        .select_from(source).where(*where).group_by(*group_key, contributor)
    )
    found = fetch_columns(conn, stmt)
    width = len(group_key)
    tallies = np.zeros((len(found[width]), len(COUNT_FIELDS)), np.int64)
    counted_columns = found[width + 5:len(found) - (1 if hashed else 0)]
    for place, column in zip(places, (found[width + 1], *counted_columns), strict=True):
        tallies[:, place] = np.asarray(column, dtype=np.int64)
    values = np.column_stack([float_column(c) for c in found[width + 2:width + 5]]
                             ).reshape(-1, len(VALUE_FIELDS))
    if hashed:
        hashes, first, group = np.unique(np.asarray(found[0]), return_index=True,
                                         return_inverse=True)
        one_row = np.asarray(found[-1], dtype=np.int64)[first].tolist()
        key_of: dict[int, KeyTuple] = {}
        if one_row:
            key_stmt = (select(group_key[0], *keys).select_from(source)
                        .where(row_id.in_(one_row)))
            key_of = {row[0]: tuple(row[1:]) for row in plain_rows(conn.execute(key_stmt))}
        group_keys = [key_of[h] for h in hashes.tolist()]
    else:
        group_keys, group = group_numbers(zip(*found[:width], strict=True) if width
                                          else (() for _ in found[width]))
    names = found[width]
    return Reduced(group_keys, np.asarray(group, dtype=np.int64),
                   names.tolist() if isinstance(names, np.ndarray) else list(names),
                   values, tallies)


def fetch_columns(conn: Connection, stmt: Any) -> list[Any]:
    """A query's result as columns: numpy arrays on DuckDB (its own fast path, no Python
    object per value; NULL numbers come masked), lists of Python values elsewhere."""
    result = conn.execute(stmt)
    if result.dialect.name == "duckdb":
        found = result.cursor.fetchnumpy()
        result.close()
        return list(found.values())
    rows = result.all()
    width = len(result.keys())
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * width


def plain_rows(result: CursorResult[Any]) -> Sequence[Sequence[Any]]:
    """A result's rows, all at once. DuckDB's own rows are plain tuples of Python values
    already: building SQLAlchemy Row objects for them is skipped."""
    if result.dialect.name == "duckdb":
        rows: Sequence[Sequence[Any]] = result.cursor.fetchall()
        result.close()
        return rows
    return result.all()


def board_clause(draft: Any) -> Any:
    """``aggregate.on_board`` in SQL: a confirmed row needs corroborated counters."""
    return or_(draft.c.observed != "confirmed",
               func.coalesce(draft.c.evidence, "none").in_(sorted(CORROBORATED)))


def draft_totals(conn: Connection, filters: Filters) -> Any:
    """Draft results among visible submissions matching the filters (those kept off the
    boards for their evidence included): per verdict in ``VERDICTS`` order, then per
    evidence level in ``LEVELS`` order, as one row of counts (``contributor_tallies``'
    columns, summed)."""
    draft = summ.alias("d")
    level = func.coalesce(draft.c.evidence, "none")
    stmt = (select(draft.c.observed, level, func.count())
            .select_from(draft.join(sub, sub.c.submission_id == draft.c.submission_id))
            .where(draft.c.role == "draft", visible_clause(), *submission_clauses(filters),
                   *draft_clauses(filters, draft))
            .group_by(draft.c.observed, level))
    totals = np.zeros(len(VERDICTS) + len(LEVELS), np.int64)
    for verdict, evidence, count in plain_rows(conn.execute(stmt)):
        if verdict in VERDICTS:
            totals[VERDICTS.index(verdict)] += count
        if evidence in LEVELS:
            totals[len(VERDICTS) + LEVELS.index(evidence)] += count
    return totals


def contributor_tallies(conn: Connection, filters: Filters) -> tuple[Sequence[str], Any]:
    """``draft_totals`` per contributor: their names, and a row of counts each (the verdicts
    in ``VERDICTS`` order, then the levels in ``LEVELS`` order)."""
    draft = summ.alias("d")
    who = func.coalesce(sub.c.key_id, literal("imported:") + sub.c.submission_id)
    level = func.coalesce(draft.c.evidence, "none")
    counts = [func.count().filter(draft.c.observed == v) for v in VERDICTS]
    counts += [func.count().filter(level == name) for name in LEVELS]
    stmt = (select(who, *counts)
            .select_from(draft.join(sub, sub.c.submission_id == draft.c.submission_id))
            .where(draft.c.role == "draft", visible_clause(), *submission_clauses(filters),
                   *draft_clauses(filters, draft))
            .group_by(who))
    found = fetch_columns(conn, stmt)
    table = np.column_stack([np.asarray(c, dtype=np.int64) for c in found[1:]])
    return [str(name) for name in found[0]], table.reshape(-1, len(counts))


@cache
def read_columns() -> dict[str, list[str]]:
    """Per table a restricted read shadows, the columns the board's queries read: those of
    every dimension's fields (their filters compare the same fields), and what visibility,
    contributors, arrivals and the medians need. Copying only these into the shadows is
    about a third cheaper than every column (a scattered row costs per column read)."""
    wanted: dict[str, set[str]] = {
        sub.name: {"submission_id", "key_id", "complete", "hidden", "received_at",
                   "origin_hash"},
        summ.name: {"submission_id", "role", "observed", "evidence", "speedup_tps",
                    "speedup_wall", "baseline_tps"},
    }
    for name in (f for named in DIMENSIONS.values() for f in named):
        for element in visitors.iterate(field_column(name, summ)):
            table = getattr(element, "table", None)
            if isinstance(element, ColumnClause) and table is not None and table.name in wanted:
                wanted[table.name].add(element.name)
    return {table: sorted(names) for table, names in wanted.items()}




@contextmanager
def restricted_to(conn: Connection, contributors: Collection[str]) -> Iterator[None]:
    """Within the block, ``conn`` sees the store as if it held only these contributors'
    submissions (key ids, or ``imported:<submission id>``): every query of this module and
    of ``newkeys`` then reads only their rows, and the same query that computes a whole
    board computes their part of it, with the same medians.

    How: temporary tables named ``submissions`` and ``summaries``, holding those rows (the
    columns in ``read_columns``), shadow the store's for this connection (a temporary table
    is found first on DuckDB and on PostgreSQL). Each is filled from the store's table
    before it exists, so its own name still means the store's table at that moment;
    ``summaries`` is filled after ``submissions`` is shadowed, which picks exactly those
    submissions' rows. Both are dropped by their qualified temporary names on the way out
    (an unqualified drop could reach the store's table); they live in the snapshot's
    transaction, which is rolled back when the connection is returned, so an error inside
    leaves them to that rollback. Only reads run inside."""
    keys = sorted(c for c in contributors if not c.startswith(changes.IMPORTED))
    imported = sorted(c[len(changes.IMPORTED):] for c in contributors
                      if c.startswith(changes.IMPORTED))
    temporary = "temp.main" if conn.dialect.name == "duckdb" else "pg_temp"
    quote = conn.dialect.identifier_preparer.quote

    def listed(table: str) -> str:
        return ", ".join(quote(name) for name in read_columns()[table])

    conn.execute(text(
        f"CREATE TEMPORARY TABLE {sub.name} AS SELECT {listed(sub.name)} FROM {sub.name} "
        "WHERE key_id IN :keys OR submission_id IN :ids"
    ).bindparams(bindparam("keys", expanding=True, type_=String()),
                 bindparam("ids", expanding=True, type_=String())),
        {"keys": keys, "ids": imported})
    conn.exec_driver_sql(
        f"CREATE TEMPORARY TABLE {summ.name} AS SELECT {listed(summ.name)} FROM "
        f"{summ.name} WHERE submission_id IN (SELECT submission_id FROM {sub.name})")
    # On an error the shadows stay: the snapshot is given up, and its rollback drops them
    # (a PostgreSQL transaction that failed takes no DROP either).
    yield
    for table in (summ.name, sub.name):
        conn.exec_driver_sql(f"DROP TABLE {temporary}.{table}")
