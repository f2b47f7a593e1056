"""The HTTP tests' fixtures: the public read API's store, built once per module and copied
per test, its in-process clients with and without export reuse; and ``served``, the
ingestion app run with checks in process and in a check worker."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from specschema.examples import EXAMPLE_MACHINES, example_submission
from specserver.settings import ServerSettings
from tests.server.http.public_store import COUNT, app_client
from tests.support.boardfill import BASE_TIME, fill, insert_submission, new_engine
from tests.support.served import Served, settings_for


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """Built once per module; each test gets its own copy of the file."""
    path = tmp_path_factory.mktemp("template") / "store.duckdb"
    engine = new_engine(path)
    ids = fill(engine, COUNT)
    # One imported Hard Numbers style reference (no key id): the noise-floor view.
    ref = example_submission("hardnumbers-m2", seed=500, machine=EXAMPLE_MACHINES[0],
                             created_at=datetime(2026, 11, 1, tzinfo=UTC))
    ids.append(insert_submission(engine, ref, None, received_at=BASE_TIME - timedelta(days=1),
                                 source_note="imported"))
    engine.dispose()
    return path, ids


@pytest.fixture
def store(template, tmp_path):
    path, ids = template
    shutil.copy(path, tmp_path / "store.duckdb")
    engine = create_engine(f"duckdb:///{tmp_path / 'store.duckdb'}")
    yield engine, list(ids)
    engine.dispose()


@pytest.fixture
def client(store):
    yield from app_client(store, ServerSettings())


@pytest.fixture
def unreused_client(store):
    yield from app_client(store, ServerSettings(export_reuse_s=0))


# The check-worker variant is the full tier's (``slow``): it starts a worker process per
# test (29 tests, about 50 s of a loaded default tier against 13 s in process). The default
# tier keeps what it checks: tests/server/ingest/test_checkpool.py holds a real pool's
# answers (twelve valid bodies; a refusal at each stage: JSON, signature, schema, rule)
# equal to the server process's, and posts through a `specserver serve` with two workers.
@pytest.fixture(params=[0, pytest.param(1, marks=pytest.mark.slow)],
                ids=["checks-in-process", "check-worker"])
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Every test with this fixture runs twice in the full tier: checks in the server
    process, and in a check worker process (``checkpool``): the answers must not differ."""
    with Served(settings_for(tmp_path, check_workers=request.param)) as s:
        yield s
