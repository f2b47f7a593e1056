"""PostgreSQL for tests: one private schema per user, and the rule for a missing server.

Every test that needs PostgreSQL gets its own schema in database `test` on 127.0.0.1:5432
(``SPECBENCH_TEST_POSTGRES`` overrides the DSN); its SQLAlchemy URL sets search_path, so
runs never collide. When the server is missing the test is skipped, except under CI=true,
where it fails: CI must run the PostgreSQL half.

- ``private_schema_url()``: a context manager yielding such a URL, holding no connection
  while in use (module-scoped users and the restart test need that); the schema is dropped
  afterwards, retrying while the server comes back.
- The ``postgres_url`` fixture (tests/conftest.py) is ``private_schema_url()`` for one test.
- ``STORES``: parametrize over these; the PostgreSQL half carries the `postgres` marker.
  ``store_url_for(kind, tmp_path, request)`` gives the store URL of one of them.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

POSTGRES_ADMIN_DSN = os.environ.get(
    "SPECBENCH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)

STORES = ["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]


def connect_or_fail(dsn: str = POSTGRES_ADMIN_DSN) -> psycopg.Connection[Any]:
    """An autocommit admin connection; skips the test without a server (fails if CI=true)."""
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL is not reachable at {dsn}: {exc}".splitlines()[0]
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@contextlib.contextmanager
def private_schema_url() -> Iterator[str]:
    """A SQLAlchemy URL for a fresh, empty PostgreSQL schema, dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with connect_or_fail() as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    base = POSTGRES_ADMIN_DSN.replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}?options=-csearch_path%3D{schema}"
    finally:
        for _attempt in range(30):
            try:
                with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as cleanup:
                    cleanup.execute(f'DROP SCHEMA "{schema}" CASCADE')
                break
            except psycopg.OperationalError:
                time.sleep(0.5)


def store_url_for(kind: str, tmp_path: Any, request: pytest.FixtureRequest) -> str:
    """The store URL for one of ``STORES``: a DuckDB file in tmp_path, or ``postgres_url``."""
    if kind == "duckdb":
        return f"duckdb:///{tmp_path / 'store.duckdb'}"
    url: str = request.getfixturevalue("postgres_url")
    return url
