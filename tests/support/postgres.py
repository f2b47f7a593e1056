"""A private PostgreSQL schema that holds no connection while in use.

The shared ``postgres_url`` fixture keeps its admin connection open for the whole test;
module-scoped users and the restart test need one that does not.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg

from tests.conftest import POSTGRES_ADMIN_DSN, _postgres_or_fail


@contextlib.contextmanager
def private_schema_url() -> Iterator[str]:
    connection: Any = _postgres_or_fail()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with connection:
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
