"""Fixtures shared by every test package.

PostgreSQL: ``postgres_url`` gives each test its own schema (tests/support/postgres.py:
skipped without a server, failed instead under CI=true).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A SQLAlchemy URL for a fresh, empty PostgreSQL schema, dropped afterwards."""
    # Imported here: psycopg is the server's dependency, and the schema and client tests
    # must still collect without it.
    from tests.support.postgres import private_schema_url

    with private_schema_url() as url:
        yield url
