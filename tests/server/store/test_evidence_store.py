"""Evidence levels in the store: store version 4 adds summaries.evidence
and evidence_reason; a version-3 store gains them, filled by the same rule ingestion applies.

The upgrade test stores real signed bodies through the ingest path (v1 bodies, honest v2
ones, v2 ones whose counters are reported only or implausible), records the levels
ingestion stored, turns the store back into what store version 3 had (no such columns,
stamped 3), upgrades it with the real ``migrate`` and expects the very same levels back.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, text

from specserver.store import tables
from specserver.store.database import make_engine
from specserver.store.migrations import LATEST, migrate
from tests.reliability.test_integrity_evidence import (
    log_not_read,
    three_x_at_ten_percent,
    unparseable_version,
    v2_dict,
)
from tests.support.backends import board_bodies, stored_envelope_sha
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for
from tests.support.signed import sign_dict


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def _levels(engine: Any) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    summ = tables.summaries
    with engine.connect() as conn:
        return {(r.submission_id, r.config_name): (r.evidence, r.evidence_reason)
                for r in conn.execute(select(summ.c.submission_id, summ.c.config_name,
                                             summ.c.evidence, summ.c.evidence_reason))}


def test_a_version_3_store_gains_the_evidence_levels(store_url: str, tmp_path: Path) -> None:
    assert LATEST >= 4  # migration 4 is the one under test; later ones run after it
    bodies = board_bodies(4, start=7000)  # v1, most of them confirmed
    bodies += [sign_dict(v2_dict(7100, 1.1), 1), sign_dict(log_not_read(7101), 2),
               sign_dict(three_x_at_ten_percent(7102), 3), sign_dict(unparseable_version(7103), 4)]
    (tmp_path / "app").mkdir()
    with Served(settings_for(tmp_path / "app", database_url=store_url)) as served:
        for body in bodies:
            response = served.post(body)
            assert response.status_code == 201, response.text
    engine = make_engine(store_url)
    try:
        stored = _levels(engine)
        assert {level for level, _ in stored.values()} == {
            "none", "log", "reported", "implausible"}
        with engine.begin() as conn:  # what store version 3 had
            for column in ("evidence", "evidence_reason"):
                conn.execute(text(f"ALTER TABLE summaries DROP COLUMN {column}"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(
                version=3, applied_at=datetime(2026, 12, 1)))
        before = stored_envelope_sha(engine)
        assert migrate(engine) == LATEST
        assert stored_envelope_sha(engine) == before
        assert _levels(engine) == stored  # the same rule, from the stored rows
        assert migrate(engine) == LATEST  # idempotent
        assert _levels(engine) == stored
    finally:
        engine.dispose()
    with Served(settings_for(tmp_path / "app", database_url=store_url)) as served:
        assert served.store.schema_version == LATEST
        assert served.post(bodies[0]).status_code == 200
        assert served.post(sign_dict(v2_dict(7200, 1.2), 5)).status_code == 201
