"""The leaderboard's SQL: its input rows and the per-contributor reduction, in SQLAlchemy
Core so that they run on DuckDB and PostgreSQL. Filters and visibility are the store's
(``store.queries``); the rules these queries implement are ``board.aggregate``'s.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

import numpy as np
from sqlalchemy import (
    Connection,
    CursorResult,
    String,
    and_,
    bindparam,
    case,
    func,
    literal,
    literal_column,
    select,
    text,
)
from sqlalchemy.sql import visitors
from sqlalchemy.sql.expression import ColumnClause

from specschema.evidence import LEVELS
from specserver.board import groupkeys
from specserver.board.aggregate import DIMENSIONS
from specserver.board.columns import (
    COUNT_FIELDS,
    VALUE_FIELDS,
    Bools,
    Hashes,
    Reduced,
    float_column,
    group_numbers,
    segment_medians,
)
from specserver.store import (
    DUCKDB,
    VERDICTS,
    Backend,
    Filters,
    backend_of,
    changes,
    domainview,
    draft_clauses,
    draft_rows,
    field_column,
    queries,
    submission_clauses,
    tables,
    visible_clause,
)

sub = tables.submissions
summ = tables.summaries


def contributor_columns(conn: Connection, filters: Filters, dimensions: Sequence[str],
                        verdicts: Iterable[str], by_key_hash: bool = False) -> Reduced:
    """Rule 3's first step from the store: each contributor's rows in each group reduced
    to their medians, one row per group and contributor, as columns (``columns.Reduced``;
    held equal to the reference over plain rows, tests/support/reference_board.py).

    Same rules: a group is its key values (``groupkeys``), medians ignore missing values
    (the mean of the middle pair for an even count), submissions are counted once,
    imported rows (no key id) are each their own contributor. Only the verdicts of the
    view are counted (the others are zero: the rows are those verdicts'). ``by_key_hash``
    (DuckDB): a key's rows are named by the hash of its id, not by the id
    (``columns.Codes.learn_hashes``). In two steps (``contributor_rows``, then
    ``ContributorRows.reduced``), which ``board.incremental`` interleaves with its other
    queries."""
    return contributor_rows(conn, filters, dimensions, verdicts, by_key_hash).reduced()


class ContributorRows:
    """``contributor_columns`` read from the store and not yet reduced: ``reduced`` needs no
    store (it may run while the connection serves the next query). On PostgreSQL the SQL
    reduced the rows already."""

    def __init__(self, reduced: Reduced) -> None:
        self._done = reduced

    def reduced(self) -> Reduced:
        return self._done


def contributor_rows(conn: Connection, filters: Filters, dimensions: Sequence[str],
                     verdicts: Iterable[str], by_key_hash: bool = False) -> ContributorRows:
    """The query of ``contributor_columns``."""
    counted = [v for v in VERDICTS if v in set(verdicts)]
    if backend_of(conn).reduces_in_numpy:
        return _SortedRows(conn, filters, dimensions, counted, by_key_hash)
    draft = draft_rows(filters, dimensions)
    keys = [field_column(f, draft) for d in dimensions for f in DIMENSIONS[d]]
    submissions = (func.count() if "draft" in dimensions
                   else func.count(draft.c.submission_id.distinct()))
    counts = [func.count().filter(draft.c.observed == v) for v in counted]
    level = func.coalesce(draft.c.evidence, "none")
    counts += [func.count().filter(level == name) for name in LEVELS]
    # Where each selected count goes among COUNT_FIELDS (submissions first).
    places = [0, *(1 + VERDICTS.index(v) for v in counted),
              *range(1 + len(VERDICTS), len(COUNT_FIELDS))]
    median = func.percentile_cont(literal_column("0.5")).within_group
    contributor = contributor_of()  # one expression: PostgreSQL matches GROUP BY by its text
    stmt = (
        select(*keys, contributor, submissions, median(draft.c.speedup_tps),
               median(draft.c.speedup_wall), median(draft.c.baseline_tps), *counts)
        .select_from(joined_source(draft, backend_of(conn)))
        .where(*board_rows(draft, filters, counted))
        .group_by(*keys, contributor)
    )
    found = fetch_columns(conn, stmt)
    width = len(keys)
    tallies = np.zeros((len(found[width]), len(COUNT_FIELDS)), np.int64)
    for place, column in zip(places, (found[width + 1], *found[width + 5:]), strict=True):
        tallies[:, place] = np.asarray(column, dtype=np.int64)
    values = np.column_stack([float_column(c) for c in found[width + 2:width + 5]]
                             ).reshape(-1, len(VALUE_FIELDS))
    group_keys, group = group_numbers(zip(*found[:width], strict=True) if width
                                      else (() for _ in found[width]))
    return ContributorRows(Reduced(group_keys, group, list(found[width]), values, tallies))


def contributor_of() -> Any:
    return func.coalesce(sub.c.key_id, literal(changes.IMPORTED) + sub.c.submission_id)


def joined_source(draft: Any, backend: Backend) -> Any:
    """The draft's summary rows joined to their submissions. On DuckDB the ids' digests
    are compared first (integers: the join took ~20 % less time at a million
    submissions), then the ids themselves (``store.id_digest``). On PostgreSQL rows written
    by a replica of the version before may have no digest (``tables``): the ids alone."""
    on = sub.c.submission_id == draft.c.submission_id
    if not backend.rolling_upgrades:
        on = and_(sub.c.id_digest == draft.c.id_digest, on)
    return draft.join(sub, on)


def visible_drafts(draft: Any, filters: Filters) -> list[Any]:
    """Draft results of visible submissions that match the filters."""
    return [draft.c.role == "draft", visible_clause(), *submission_clauses(filters),
            *draft_clauses(filters, draft)]


def board_rows(draft: Any, filters: Filters, counted: Sequence[str]) -> list[Any]:
    """Those of them on a board, with one of the view's verdicts."""
    return [*visible_drafts(draft, filters), draft.c.observed.in_(counted),
            queries.on_board_clause(draft)]


class _SortedRows(ContributorRows):
    """On DuckDB: the draft results sorted by group and contributor, reduced over numpy
    columns. At a million submissions (~930,000 rows) this costs about two thirds of the
    CPU of DuckDB's own grouping with three exact medians.

    Groups are their keys (``groupkeys``): rows are sorted on the checked, keyed hashes
    of their key's sides (whose parts are read first) and, where parts share a hash, on
    which of them a row holds. Every query runs in the connection's one transaction: the
    same snapshot. Contributors are told apart exactly: by name, or by the key's hash
    (which ``Codes`` only allows while no two key ids share one) and, for imported rows,
    by the submission's row id (their names read by it)."""

    def __init__(self, conn: Connection, filters: Filters, dimensions: Sequence[str],
                 counted: Sequence[str], by_key_hash: bool) -> None:
        draft = draft_rows(filters, dimensions)
        self.keys = groupkeys.GroupKeys.read(conn, draft, filters, dimensions, counted)
        imported = sub.c.key_id.is_(None)
        submission_row: Any = literal_column(f"{sub.name}.rowid")
        who = ([func.hash(sub.c.key_id), func.coalesce(case((imported, submission_row)), -1)]
               if by_key_hash else [contributor_of()])
        self.once = "draft" not in dimensions  # submissions counted once, by row id
        verdict = case(*((draft.c.observed == v, VERDICTS.index(v)) for v in counted),
                       else_=-1)
        level = func.coalesce(draft.c.evidence, "none")
        levels = case(*((level == name, i) for i, name in enumerate(LEVELS)),
                      else_=len(LEVELS))
        once = [submission_row] if self.once else []
        none: Any = literal_column("'NaN'::DOUBLE")  # no stored value is NaN: it stands for NULL
        tail = [*who, *once, *(func.coalesce(draft.c[name], none) for name in
                               ("speedup_tps", "speedup_wall", "baseline_tps")),
                verdict, levels]
        source, named = self.keys.grouped(joined_source(draft, DUCKDB))
        self.width = len(named)
        self.found = fetch_columns(conn, select(*named, *tail).select_from(source)
                                   .where(*board_rows(draft, filters, counted))
                                   .order_by(*named, *who[:2], *once))
        self.by_key_hash = by_key_hash
        self.imported_names: dict[int, str] = {}  # an imported row's submission row id: name
        if by_key_hash:
            imported_rows = np.unique(np.asarray(self.found[self.width + 1], dtype=np.int64))
            imported_rows = imported_rows[imported_rows >= 0]
            if len(imported_rows):
                self.imported_names = dict(plain_rows(conn.execute(  # type: ignore[arg-type]
                    select(submission_row, literal(changes.IMPORTED) + sub.c.submission_id)
                    .where(submission_row.in_(imported_rows.tolist())))))

    def reduced(self) -> Reduced:
        found, width, by_key_hash = self.found, self.width, self.by_key_hash
        group_names = [np.asarray(column) for column in found[:width]]
        new_group = ~_same_as_before(*group_names)
        at = np.flatnonzero(new_group)
        keys = [self.keys.key(named) for named in zip(
            *(column[at].tolist() for column in group_names), strict=True)]
        head = width + 1 + (1 if by_key_hash else 0) + (1 if self.once else 0)
        rows = len(new_group)
        if by_key_hash:
            key_hashes = np.asarray(found[width], dtype=np.uint64)
            imported_rows = np.asarray(found[width + 1], dtype=np.int64)
            same = ~new_group & _same_as_before(key_hashes, imported_rows)
        else:
            names = np.asarray(found[width], dtype=object)
            same = ~new_group & _same_as_before(names)
        starts = np.flatnonzero(~same)
        segment = np.cumsum(~same) - 1
        values = np.column_stack([np.asarray(c, dtype=np.float64)
                                  for c in found[head:head + 3]]).reshape(-1, len(VALUE_FIELDS))
        tallies = np.zeros((len(starts), len(COUNT_FIELDS)), np.int64)
        if self.once:
            submission = np.asarray(found[head - 1])
            new_submission = ~(same & np.r_[False, submission[1:] == submission[:-1]])
            tallies[:, 0] = np.bincount(segment[new_submission], minlength=len(starts))
        else:
            tallies[:, 0] = np.diff(np.r_[starts, rows])
        for column, offset, size in ((head + 3, 1, len(VERDICTS)),
                                     (head + 4, 1 + len(VERDICTS), len(LEVELS))):
            code = np.asarray(found[column], dtype=np.int64)
            inside = (code >= 0) & (code < size)
            tallies[:, offset:offset + size] = np.bincount(
                segment[inside] * size + code[inside], minlength=len(starts) * size
            ).reshape(-1, size)
        if by_key_hash:
            names_of = self.imported_names
            contributors: list[str | None] = [
                names_of.get(row) for row in imported_rows[starts].tolist()
            ] if names_of else [None] * len(starts)
            hashes: Hashes | None = key_hashes[starts]
        else:
            contributors, hashes = names[starts].tolist(), None
        return Reduced(keys, (np.cumsum(new_group) - 1)[starts], contributors,
                       segment_medians(values, starts), tallies, hashes)


def _same_as_before(*columns: Any) -> Bools:
    """Per row of sorted columns: whether it equals the row before on every column."""
    same = np.zeros(len(columns[0]), np.bool_)
    if len(same):
        same[1:] = True
        for column in columns:
            same[1:] &= column[1:] == column[:-1]
    return same


def fetch_columns(conn: Connection, stmt: Any) -> list[Any]:
    """A query's result as columns: numpy arrays on DuckDB (its own fast path, no Python
    object per value; NULL numbers come masked), lists of Python values elsewhere."""
    result = conn.execute(stmt)
    if backend_of(result).fetches_numpy:
        found = result.cursor.fetchnumpy()
        result.close()
        return list(found.values())
    rows = result.all()
    width = len(result.keys())
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * width


def plain_rows(result: CursorResult[Any]) -> Sequence[Sequence[Any]]:
    """A result's rows, all at once. DuckDB's own rows are plain tuples of Python values
    already: building SQLAlchemy Row objects for them is skipped."""
    if backend_of(result).fetches_numpy:
        rows: Sequence[Sequence[Any]] = result.cursor.fetchall()
        result.close()
        return rows
    return result.all()


def draft_totals(conn: Connection, filters: Filters) -> Any:
    """Draft results among visible submissions matching the filters (those kept off the
    boards for their evidence included): per verdict in ``VERDICTS`` order, then per
    evidence level in ``LEVELS`` order, as one row of counts (``contributor_tallies``'
    columns, summed)."""
    draft = draft_rows(filters)
    level = func.coalesce(draft.c.evidence, "none")
    stmt = (select(draft.c.observed, level, func.count())
            .select_from(joined_source(draft, backend_of(conn)))
            .where(*visible_drafts(draft, filters))
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
    draft = draft_rows(filters)
    who = contributor_of()
    level = func.coalesce(draft.c.evidence, "none")
    counts = [func.count().filter(draft.c.observed == v) for v in VERDICTS]
    counts += [func.count().filter(level == name) for name in LEVELS]
    stmt = (select(who, *counts)
            .select_from(joined_source(draft, backend_of(conn)))
            .where(*visible_drafts(draft, filters))
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
        sub.name: {"submission_id", "id_digest", "key_id", "complete", "hidden",
                   "received_at", "origin_hash", "reaches_board"},
        summ.name: {"submission_id", "id_digest", "role", "observed", "evidence",
                    "speedup_tps", "speedup_wall", "baseline_tps"},
    }
    wanted[summ.name].update(domainview.BOARD_SUMMARY_COLUMNS)  # what the per-domain rows read
    for name in (f for named in DIMENSIONS.values() for f in named if f != "domain"):
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
    temporary = backend_of(conn).temporary_schema
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
