"""Store version 18 on DuckDB and PostgreSQL: each stored cost probe says what its samples
are (``probes.measured``), from its own signed bytes; a store of the version before gains
the column filled from its stored envelopes; a reader takes verification probes over
prefill ones and never mixes the two."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, delete, insert, select, text, update

from specserver.store import tables
from specserver.store.database import make_engine
from specserver.store.migrations import LATEST, MIGRATIONS, migrate
from specserver.store.probes import StoredProbe, prefer_verification
from tests.support.crowd import M2, cost_probe, map_result, signed_probe, target_of
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for

BEFORE = next(m.version for m in MIGRATIONS if m.apply.__name__ == "add_probe_kind") - 1
TARGET = target_of(map_result(0, M2))


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def _kinds(engine: Engine) -> dict[str, str | None]:
    p = tables.probes
    with engine.connect() as conn:
        return {str(r.probe_id): r.measured
                for r in conn.execute(select(p.c.probe_id, p.c.measured))}


def test_a_store_from_before_gets_each_probes_kind_from_its_envelope(
        store_url: str, tmp_path: Path) -> None:
    probes = [cost_probe(TARGET, M2, version=1), cost_probe(TARGET, M2, version=2),
              cost_probe(TARGET, M2, version=2, step_s=0.03)]
    with Served(settings_for(tmp_path / "app", database_url=store_url)) as served:
        for seed, probe in enumerate(probes):
            response = served.client.post("/v1/probes", content=signed_probe(probe, 30 + seed))
            assert response.status_code == 201, response.text
    expected = {str(probes[0].probe_id): "prefill", str(probes[1].probe_id): "verification",
                str(probes[2].probe_id): "verification"}
    engine = make_engine(store_url)
    try:
        assert _kinds(engine) == expected  # ingestion writes it
        with engine.begin() as conn:  # what every store of the version before holds
            conn.execute(text("ALTER TABLE probes DROP COLUMN measured"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(
                version=BEFORE, applied_at=datetime(2026, 12, 6)))
        assert migrate(engine) == LATEST
        assert _kinds(engine) == expected
        # a row whose envelope no longer parses keeps null (read as prefill); again:
        # nothing left to do, nothing changed
        broken = str(probes[2].probe_id)
        with engine.begin() as conn:
            conn.execute(update(tables.probes).where(tables.probes.c.probe_id == broken)
                         .values(measured=None, envelope=b"{"))
        assert migrate(engine) == LATEST
        assert _kinds(engine) == expected | {broken: None}
    finally:
        engine.dispose()


def test_the_kinds_are_never_mixed_and_verification_wins() -> None:
    def probe(key: str, measured: str) -> StoredProbe:
        return StoredProbe(key, None, None, {1: (0.01,)}, measured)

    both = [probe("a", "prefill"), probe("b", "verification"), probe("c", "prefill"),
            probe("d", "verification")]
    chosen, kind = prefer_verification(both)
    assert [p.key_id for p in chosen] == ["b", "d"] and kind == "verification"
    chosen, kind = prefer_verification([p for p in both if p.measured == "prefill"])
    assert [p.key_id for p in chosen] == ["a", "c"] and kind == "prefill"
    assert prefer_verification([]) == ([], None)
