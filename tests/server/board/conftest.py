"""The board tests' stores for the maintained board: one DuckDB file and one private
PostgreSQL schema per module, each migrated (tests/server/board/incremental_support.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.board.incremental_support import Store, _store
from tests.support.postgres import private_schema_url


@pytest.fixture(scope="module")
def duckdb_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path: Path = tmp_path_factory.mktemp("incremental") / "store.duckdb"
    yield from _store(f"duckdb:///{path}")


@pytest.fixture(scope="module")
def postgres_store() -> Iterator[Store]:
    with private_schema_url() as url:
        yield from _store(url)
