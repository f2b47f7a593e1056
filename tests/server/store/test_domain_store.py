"""Store version 15 on DuckDB and PostgreSQL: a map result's draft configs keep one row per
domain of the protocol's prompt set, from the signed trials by the rule the submission page
shows (``specschema.breakdown``); a result without a prompt set keeps none; a store of the
version before gains the table, filled from its stored envelopes."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, delete, insert, select, text

from specschema.breakdown import domain_results
from specschema.domains import DOMAINS
from specschema.examples import example_submission
from specserver.store import id_digest, positions_of, tables
from specserver.store.database import make_engine
from specserver.store.domainrows import DOMAIN_COLUMNS, domain_rows
from specserver.store.migrations import LATEST, MIGRATIONS, migrate
from tests.server.store.test_acceptance_store import _post, map_result
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for

BEFORE = next(m.version for m in MIGRATIONS if m.apply.__name__ == "add_domain_results") - 1


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def _stored(engine: Engine) -> list[tuple[Any, ...]]:
    table = tables.domain_results
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(*(table.c[name] for name in DOMAIN_COLUMNS))
            .order_by(table.c.submission_id, table.c.config_name, table.c.domain))]


def test_column_order_is_the_tables() -> None:
    assert DOMAIN_COLUMNS == tuple(c.name for c in tables.domain_results.columns)


def test_a_map_result_keeps_each_domain_of_each_draft_config(store_url: str,
                                                            tmp_path: Path) -> None:
    sub = map_result(9300)
    seed = example_submission("ollama-draft", seed=9301, schema_version=2, blocks=True,
                              created_at=datetime.now().astimezone())
    sid = str(sub.submission_id)
    with Served(settings_for(tmp_path, database_url=store_url)) as served:
        _post(served, sub, 1)
        _post(served, seed, 2)
        stored = _stored(served.store.engine)
    drafts = [c for c in sub.configs if c.role == "draft"]
    # every draft config x every domain, nothing for the baseline nor the seed protocol
    assert {(r[0], r[1], r[2]) for r in stored} == {
        (sid, c.name, d) for c in drafts for d in DOMAINS}
    assert all(r[-1] == id_digest(sid) for r in stored)
    # each as the page's rule computes it from the signed trials
    by_key = {(r[1], r[2]): dict(zip(DOMAIN_COLUMNS, r, strict=True)) for r in stored}
    for config in drafts:
        for result in domain_results(sub, config):
            row = by_key[(config.name, result.domain)]
            assert row["trials"] == result.trials > 0
            assert (row["speedup_tps"], row["speedup_tps_ci_low"],
                    row["speedup_tps_ci_high"]) == (result.speedup_tps, result.ci_low,
                                                    result.ci_high)
            assert result.speedup_tps is not None
            assert result.acceptance is not None
            assert (row["drafted"], row["accepted"]) == (result.acceptance.drafted,
                                                         result.acceptance.accepted)
            counts = positions_of(row["accepted_per_position"])
            assert counts is not None and sum(counts) == row["accepted"]
            assert row["rounds"] == result.acceptance.rounds
            assert row["baseline_tps"] is not None and row["baseline_tps"] > 0


def test_a_store_from_before_gets_the_table_filled_from_its_envelopes(
        store_url: str, tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "app", database_url=store_url)
    subs = (map_result(9310), map_result(9311, without_rounds="mtp_n3"))
    with Served(settings) as served:
        for seed, sub in enumerate(subs):
            _post(served, sub, seed + 3)
    engine = make_engine(store_url)
    try:
        written = _stored(engine)
        assert len(written) == 2 * 3 * len(DOMAINS)
        # rows as ingestion builds them (no rounds where a trial did not say)
        assert written == sorted(
            row for sub in subs for row in domain_rows(
                sub, str(sub.submission_id), id_digest(str(sub.submission_id))))
        assert any(r[1] == "mtp_n3" and r[10] is None for r in written)
        with engine.begin() as conn:  # what every store of the version before holds
            conn.execute(text("DROP TABLE domain_results"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(
                version=BEFORE, applied_at=datetime(2026, 12, 6)))
        assert migrate(engine) == LATEST
        assert _stored(engine) == written
        assert migrate(engine) == LATEST  # again: nothing left to do
        assert _stored(engine) == written
    finally:
        engine.dispose()
