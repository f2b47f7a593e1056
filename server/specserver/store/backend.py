"""What the store and the board ask of the database they run on: one ``Backend`` per
database (``DUCKDB``, ``POSTGRESQL``), its capabilities and choices as named fields, so
that code asks ``backend_of(conn).one_writer`` instead of testing the dialect's name
(Django's ``BaseDatabaseFeatures`` is the model). A store runs on these two only.

Why they differ, in short: a DuckDB file is embedded in the one server process that may
open it, so one writer thread makes every write; its own cursor hands back numpy columns,
and the board reduces per-contributor rows over them. PostgreSQL serves several replicas,
which during a rolling upgrade include the version before (rows without the newest
columns), and reduces in SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, CursorResult, Engine
from sqlalchemy.engine import Dialect


@dataclass(frozen=True)
class Backend:
    name: str  # the SQLAlchemy dialect's name
    # The database runs inside this process from a file (DuckDB): its access to files is
    # locked down at connect, and a writer drops the whole instance after a failed write.
    embedded: bool
    # Every write is made by one writer thread of one process (a DuckDB file admits one
    # process): the log's next index and the change log's sequence may be kept or computed
    # without a lock, and its writer needs no insert-or-conflict for other replicas.
    one_writer: bool
    # Replicas of the version before may still write during an upgrade: a column added
    # since may be NULL in their rows (tables._NULL_WHILE_UPGRADING), so reads fall back
    # and no such column is made NOT NULL.
    rolling_upgrades: bool
    # The board reduces each group's per-contributor rows over numpy columns of the sorted
    # rows (board/sql.py's _SortedRows), not in SQL (percentile_cont per group).
    reduces_in_numpy: bool
    # Keys and group keys are named by the database's 64-bit hash() (board/groupkeys.py,
    # newkeys.arrival_columns, incremental's by_key_hash).
    hashes_keys: bool
    # The driver's cursor gives numpy columns (fetchnumpy) and rows as plain tuples.
    fetches_numpy: bool
    # Bulk rows go through the driver's appender, not Core inserts (an executemany is one
    # statement per row there).
    has_appender: bool
    # COPY (query) TO a Parquet file, in the database.
    copies_to_parquet: bool
    # No statement timeout: a query running too long is interrupted by a timer.
    interrupts_long_queries: bool
    # Migrations serialize across replicas on a transaction-scoped advisory lock.
    advisory_locks: bool
    # Secondary indexes on received_at and the log's lookups (DuckDB's zone maps answer
    # those scans, and each index costs its writes: tables.py).
    secondary_indexes: bool
    # VARCHAR(n) lengths are enforced (a widened column needs ALTER ... TYPE).
    enforces_varchar_length: bool
    # A connection whose reads must all see one state of the store asks for this isolation
    # level (None: every transaction is a snapshot already).
    snapshot_isolation: str | None
    # The schema of the connection's temporary tables, to name them unambiguously.
    temporary_schema: str
    # ``rowset.id_digest`` in SQL, of ``{column}``: the first 16 hex digits of its SHA-256
    # read as a signed 64-bit integer (a test holds both equal to the Python).
    id_digest_template: str

    def id_digest_sql(self, column: str = "submission_id") -> str:
        return self.id_digest_template.format(column=column)


DUCKDB = Backend(
    name="duckdb", embedded=True, one_writer=True, rolling_upgrades=False,
    reduces_in_numpy=True, hashes_keys=True, fetches_numpy=True, has_appender=True,
    copies_to_parquet=True, interrupts_long_queries=True, advisory_locks=False,
    secondary_indexes=False, enforces_varchar_length=False, snapshot_isolation=None,
    temporary_schema="temp.main",
    id_digest_template=("(('0x' || substr(sha256({column}), 1, 16))::UBIGINT::HUGEINT "
                        "- CASE WHEN substr(sha256({column}), 1, 1) >= '8' "
                        "THEN 18446744073709551616::HUGEINT ELSE 0 END)::BIGINT"),
)
POSTGRESQL = Backend(
    name="postgresql", embedded=False, one_writer=False, rolling_upgrades=True,
    reduces_in_numpy=False, hashes_keys=False, fetches_numpy=False, has_appender=False,
    copies_to_parquet=False, interrupts_long_queries=False, advisory_locks=True,
    secondary_indexes=True, enforces_varchar_length=True,
    snapshot_isolation="REPEATABLE READ", temporary_schema="pg_temp",
    id_digest_template=("('x' || substr(encode(sha256(convert_to({column}, 'UTF8')), 'hex'), "
                        "1, 16))::bit(64)::bigint"),
)
BACKENDS = {backend.name: backend for backend in (DUCKDB, POSTGRESQL)}


def backend_of(bind: Connection | Engine | CursorResult[object] | Dialect) -> Backend:
    """The backend of a connection, an engine, a result or a dialect."""
    dialect = bind if isinstance(bind, Dialect) else bind.dialect
    try:
        return BACKENDS[dialect.name]
    except KeyError:
        raise ValueError(f"no store runs on {dialect.name}: DuckDB or PostgreSQL") from None
