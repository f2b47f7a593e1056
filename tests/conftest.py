"""Fixtures shared by every test package.

PostgreSQL: each test gets its own schema in database `test` on 127.0.0.1:5432 (its URL
sets search_path), so runs never collide. When the server is missing the test is skipped,
except under CI=true, where it fails: CI must run the PostgreSQL half.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

POSTGRES_ADMIN_DSN = os.environ.get(
    "SPECBENCH_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)


def _postgres_or_fail() -> object:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the server extra is installed for tests
        pytest.fail(f"psycopg missing: {exc}")
    try:
        return psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL is not reachable at {POSTGRES_ADMIN_DSN}: {exc}".splitlines()[0]
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A SQLAlchemy URL for a fresh, empty PostgreSQL schema, dropped afterwards."""
    connection = _postgres_or_fail()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    connection.execute(f'CREATE SCHEMA "{schema}"')  # type: ignore[attr-defined]
    base = POSTGRES_ADMIN_DSN.replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}?options=-csearch_path%3D{schema}"
    finally:
        connection.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[attr-defined]
        connection.close()  # type: ignore[attr-defined]
