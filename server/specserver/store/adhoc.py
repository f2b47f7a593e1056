"""The maintainers' ad-hoc SQL (``specserver query``, ``POST /admin/v1/query``): one SELECT,
read only, with a row limit and a time limit, recorded in the audit log.

No keyword screen and no regular expression decides what a query is: a screen that reads
SQL differently from the engine is a way in (``SELECT 1 --\\r; COMMIT; DELETE
FROM bans`` passed one that ended ``--`` comments at ``\\n`` only; DuckDB ends them at
``\\r`` too and ran all three statements). Each guard below is the engine's own:

DuckDB
  - ``duckdb.extract_statements`` (DuckDB's parser) must find exactly one statement, of
    type SELECT (``SHOW``, ``DESCRIBE``, ``SUMMARIZE``, ``FROM t`` and ``VALUES`` are
    SELECTs to it; ``EXPLAIN``, ``PIVOT``, ``CALL``, ``SET`` and every write are not);
  - the statement may read only the store's own tables (``tables.metadata``), its own
    common table expressions and the table functions of ``TABLE_FUNCTIONS`` (row
    generators): read from DuckDB's own parse tree (``json_serialize_sql``), so
    ``checkpoint()``, ``duckdb_databases()``, ``duckdb_settings()``, ``information_schema``
    and ``SHOW databases`` are refused before anything runs; a scalar function that names
    the store's files or settings (``SCALAR_FUNCTIONS_REFUSED``) is refused the same way;
  - it runs on a connection of its own, in ``BEGIN TRANSACTION READ ONLY``, rolled back;
  - the store's DuckDB instance runs with ``enable_external_access = false`` and
    ``lock_configuration = true`` (``store/database.py`` ``duckdb_lockdown``): no
    ``read_text('/proc/self/environ')``, no ``ATTACH`` of another file, no extension
    installs, and no query can turn either back on;
  - a timer interrupts it after ``timeout_s`` (DuckDB has no statement timeout).

PostgreSQL
  - the same table gate, read by DuckDB's parser (PostgreSQL's own grammar, forked): a
    query it cannot read is refused, so ``pg_settings`` or ``current_setting('data_directory')``
    never show the data folder;
  - the statement is prepared (psycopg ``prepare=True``): the server's parser refuses more
    than one command in a prepared statement;
  - it is wrapped as ``SELECT * FROM (<sql>) LIMIT n``, so only a query that can be a
    subquery runs (a data-modifying ``WITH`` cannot be one);
  - ``SET TRANSACTION READ ONLY`` and ``SET LOCAL statement_timeout``, rolled back;
  - with ``SPECSERVER_ADMIN_QUERY_URL`` it runs as a role that may only read
    (docs/maintainers.md): a superuser's read-only transaction can still call
    ``pg_read_file``.

An error from the engine is shown with the store's file and folder paths replaced by
``<store>`` (``QueryFailed``): a path is never part of an answer.

Errors: ``QueryRefused`` (422, ``not_read_only``) for anything that is not one SELECT,
``QueryFailed`` (422, ``query_failed``) when the engine refuses it while running,
``QueryTimeout`` (422, ``query_timeout``) after the time limit.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from specserver.errors import Invalid
from specserver.store.backend import DUCKDB, POSTGRESQL, backend_of
from specserver.store.tables import metadata

QUERY_ROW_LIMIT = 10_000
QUERY_TIMEOUT_S = 30.0


class QueryRefused(Invalid):
    code = "not_read_only"


class QueryFailed(Invalid):
    code = "query_failed"


class QueryTimeout(Invalid):
    code = "query_timeout"


# Table functions a query may read from: row generators that know nothing of the store.
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
# Scalar functions that show the store's settings, files or environment.
SCALAR_FUNCTIONS_REFUSED = frozenset({"current_setting", "getenv", "getvariable",
                                      "pg_current_logfile", "pg_ls_dir", "pg_stat_file"})
_OWN_SCHEMAS = frozenset({"", "main"})


def _nodes(tree: object) -> Iterator[dict[str, Any]]:
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def check_reads(sql: str) -> None:
    """QueryRefused unless every table ``sql`` reads is one of the store's own, one of
    its common table expressions or an allowed table function (the module doc)."""
    with duckdb.connect() as parser:
        row = parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    tree = json.loads(row[0]) if row else {"error": True}
    if tree.get("error"):
        raise QueryRefused("the query cannot be read as one SELECT of the store's tables: "
                           f"{str(tree.get('error_message', 'unreadable'))[:200]}")
    nodes = list(_nodes(tree.get("statements", [])))
    # Not the address-hash secrets (store/origins.py): with them a query could test guessed
    # address ranges against the stored hashes.
    own = {t.lower() for t in metadata.tables} - {"address_secrets"}
    ctes = {str(entry.get("key", "")).lower() for node in nodes
            if isinstance(node.get("cte_map"), dict)
            for entry in node["cte_map"].get("map", []) if isinstance(entry, dict)}
    for node in nodes:
        kind = node.get("type")
        if kind == "BASE_TABLE":
            name = str(node.get("table_name", "")).lower()
            schema = str(node.get("schema_name", "")).lower()
            catalog = str(node.get("catalog_name", ""))
            if catalog or schema not in _OWN_SCHEMAS or name not in own | ctes:
                shown = ".".join(p for p in (catalog, schema, name) if p)
                raise QueryRefused(f"only the store's own tables can be read, not {shown}",
                                   {"tables": sorted(own)})
        elif kind == "TABLE_FUNCTION":
            function = node.get("function")
            name = str(function.get("function_name", "") if isinstance(function, dict)
                       else "").lower()
            if name not in TABLE_FUNCTIONS:
                raise QueryRefused(f"table function {name}() is not allowed (only "
                                   f"{', '.join(sorted(TABLE_FUNCTIONS))})",
                                   {"table_functions": sorted(TABLE_FUNCTIONS)})
        elif kind == "SHOW_REF" and node.get("table_name"):
            raise QueryRefused("SHOW of the catalog is not allowed: read the store's tables")
        elif node.get("class") == "FUNCTION":
            name = str(node.get("function_name", "")).lower()
            if name in SCALAR_FUNCTIONS_REFUSED or name.startswith("duckdb_"):
                raise QueryRefused(f"function {name}() is not allowed: it shows the store's "
                                   "settings or files")


def audit_target(sql: str) -> str:
    """The audit row's target for a query: the sha256 of its text (the text is the reason)."""
    return hashlib.sha256(sql.encode("utf-8")).hexdigest()


def single_select(sql: str) -> str:
    """The one SELECT statement of ``sql`` as DuckDB's parser reads it; else QueryRefused."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused(f"the query does not parse: {_first_line(exc)}") from None
    if len(statements) != 1:
        raise QueryRefused(f"exactly one statement, please (DuckDB reads {len(statements)})",
                           {"statements": [s.type.name for s in statements]})
    statement = statements[0]
    if statement.type != duckdb.StatementType.SELECT:
        raise QueryRefused(f"only SELECT queries are allowed, not {statement.type.name}",
                           {"statement": statement.type.name})
    check_reads(sql)
    return str(statement.query)


def run_query(conn: Connection, sql: str, limit: int = QUERY_ROW_LIMIT,
              timeout_s: float = QUERY_TIMEOUT_S) -> dict[str, Any]:
    """Columns, rows (at most ``limit``) and whether more were left off; nothing the query
    does is kept. ``conn`` must have no transaction open."""
    if conn.in_transaction():
        raise ValueError("run_query needs a connection without an open transaction")
    if not 1 <= limit <= QUERY_ROW_LIMIT:
        raise QueryRefused(f"the row limit is 1 to {QUERY_ROW_LIMIT}", {"limit": limit})
    backend = backend_of(conn)
    if backend is DUCKDB:
        columns, rows = _run_duckdb(conn, single_select(sql), limit, timeout_s)
    elif backend is POSTGRESQL:
        columns, rows = _run_postgres(conn, sql, limit, timeout_s)
    else:
        raise QueryRefused(f"ad-hoc queries are not supported on {backend.name}")
    return {"columns": columns, "rows": rows[:limit], "truncated": len(rows) > limit}


def run_query_on(engine: Engine, sql: str, limit: int = QUERY_ROW_LIMIT,
                 timeout_s: float = QUERY_TIMEOUT_S) -> dict[str, Any]:
    """``run_query`` on a connection taken from ``engine`` for this query alone."""
    with engine.connect() as conn:
        return run_query(conn, sql, limit, timeout_s)


def _first_line(exc: BaseException, hidden: tuple[str, ...] = ()) -> str:
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    for path in hidden:
        line = line.replace(path, "<store>")
    return line


def _duckdb_paths(duck: Any) -> tuple[str, ...]:
    """The store's file and temporary folder (longest first), to keep them out of errors."""
    rows = duck.execute("SELECT path FROM duckdb_databases() WHERE path IS NOT NULL "
                        "UNION SELECT current_setting('temp_directory')").fetchall()
    return tuple(sorted({str(r[0]) for r in rows if r[0]}, key=len, reverse=True))


class _Deadline:
    """Calls ``interrupt`` once ``timeout_s`` has passed, unless cancelled first."""

    def __init__(self, timeout_s: float, interrupt: Callable[[], object]) -> None:
        self.fired = False

        def fire() -> None:
            self.fired = True
            interrupt()

        self._timer = threading.Timer(timeout_s, fire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _run_duckdb(conn: Connection, statement: str, limit: int,
                timeout_s: float) -> tuple[list[str], list[list[Any]]]:
    # The pooled connection is a DuckDB connection of its own (its own transaction), not
    # the writer's. duckdb_engine's cursor() would share it, and a second duckdb.connect()
    # of the file with other options (read_only=True included) is refused while the
    # writer holds it, so the read-only part is the transaction's.
    duck: Any = conn.connection.driver_connection
    hidden = _duckdb_paths(duck)
    duck.execute("BEGIN TRANSACTION READ ONLY")
    try:
        with _Deadline(timeout_s, duck.interrupt) as deadline:
            try:
                relation = duck.sql(statement)
                columns = list(relation.columns)
                rows = [list(r) for r in relation.limit(limit + 1).fetchall()]
            except duckdb.Error as exc:
                if deadline.fired:
                    raise QueryTimeout(f"the query ran longer than {timeout_s:g} s") from None
                raise QueryFailed(f"the query failed: {_first_line(exc, hidden)}") from None
    finally:
        duck.execute("ROLLBACK")
    return columns, rows


def _run_postgres(conn: Connection, sql: str, limit: int,
                  timeout_s: float) -> tuple[list[str], list[list[Any]]]:
    body = sql.strip().rstrip(";").rstrip()
    if not body:
        raise QueryRefused("empty query")
    check_reads(body)
    # The newline ends a trailing -- comment before the closing parenthesis.
    wrapped = f"SELECT * FROM (\n{body}\n) AS adhoc_query LIMIT {int(limit) + 1}"
    raw: Any = conn.connection.driver_connection  # psycopg.Connection
    transaction = conn.begin()
    try:
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
        cursor = raw.cursor()
        try:
            cursor.execute(wrapped, prepare=True)  # one command only (the module doc)
            columns = [d.name for d in cursor.description or ()]
            rows = [list(r) for r in cursor.fetchall()]
        except Exception as exc:
            sqlstate = getattr(exc, "sqlstate", None)
            if sqlstate == "57014":  # query_canceled: the statement timeout
                raise QueryTimeout(f"the query ran longer than {timeout_s:g} s") from None
            if sqlstate == "42601":  # syntax_error: several commands, or not a subquery
                raise QueryRefused("only one SELECT is allowed (PostgreSQL: "
                                   f"{_first_line(exc)})") from None
            if sqlstate is not None or isinstance(exc, DBAPIError):
                raise QueryFailed(f"the query failed: {_first_line(exc)}") from None
            raise
        finally:
            cursor.close()
    finally:
        transaction.rollback()
    return columns, rows
