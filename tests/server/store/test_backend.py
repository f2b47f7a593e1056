"""The store's backends: one object per database, asked for what differs (store/backend.py);
no other module tests a dialect's name."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine

from specserver.store import DUCKDB, POSTGRESQL, backend_of

SERVER = Path(__file__).resolve().parents[3] / "server" / "specserver"


def test_each_dialect_has_its_backend(tmp_path: Path) -> None:
    engine = create_engine(f"duckdb:///{tmp_path / 'store.duckdb'}")
    try:
        with engine.connect() as conn:
            assert backend_of(engine) is backend_of(conn) is DUCKDB
    finally:
        engine.dispose()
    # Made, never connected: a PostgreSQL URL names its backend without a server.
    assert backend_of(create_engine("postgresql+psycopg://127.0.0.1/test")) is POSTGRESQL


def test_a_database_without_a_backend_is_named() -> None:
    with pytest.raises(ValueError, match="no store runs on sqlite"):
        backend_of(create_engine("sqlite://"))


def test_only_the_backends_module_reads_a_dialects_name() -> None:
    readers = sorted(str(path.relative_to(SERVER)) for path in SERVER.rglob("*.py")
                     if "dialect.name" in path.read_text(encoding="utf-8"))
    assert readers == ["store/backend.py"]
