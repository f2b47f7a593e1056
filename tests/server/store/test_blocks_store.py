"""Blocks through the ingest path, on DuckDB and PostgreSQL: a blocked result is stored with
its block numbers and block summaries; an unstable one is on the unverified view, never in a
speedup median; a block number that contradicts the schedule is refused; and a store of the
version before blocks gains the columns (null on its rows)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, text

from specschema.examples import example_submission
from specschema.payload import submission_bytes
from specserver.store import tables
from specserver.store.database import make_engine
from specserver.store.migrations import LATEST, MIGRATIONS, migrate
from tests.support.postgres import STORES, store_url_for
from tests.support.served import Served, settings_for
from tests.support.signed import sign_dict

# The store version before blocks (the migration that added them is the one after it).
BEFORE_BLOCKS = next(m.version for m in MIGRATIONS if m.apply.__name__ == "blocks") - 1


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return store_url_for(request.param, tmp_path, request)


def llama(seed: int, drift: float, speedup: float = 2.0) -> dict[str, Any]:
    sub = example_submission("llamacpp-draft", seed=seed, engine_version="b1", schema_version=2,
                             runtime="ggml", counters_seen=True, blocks=True, drift=drift,
                             created_at=datetime.now().astimezone(),
                             draft_speedups={"draft_qwen3_0.6b_n8": speedup})
    data: dict[str, Any] = json.loads(submission_bytes(sub))
    data["engine"].update(name="llama-server", build="0.5.0-dev (build 1, commit 0c1e570)")
    for config in data["configs"]:  # llama-server's counters come from its own API
        for trial in config["trials"]:
            if trial.get("counters"):
                trial["counters"]["source"] = "engine_api"
        if config["speculation"]["counters_source"]:
            config["speculation"]["counters_source"] = "engine_api"
    return data


def _groups(served: Served, view: str) -> list[dict[str, Any]]:
    body = served.get("/v1/leaderboard", params={"view": view, "draft": "draft_qwen3_0.6b_n8"})
    assert body.status_code == 200, body.text
    groups: list[dict[str, Any]] = body.json()["groups"]
    return groups


def test_blocks_are_stored_and_unstable_results_stay_off_the_speedup_board(
        store_url: str, tmp_path: Path) -> None:
    with Served(settings_for(tmp_path, database_url=store_url)) as served:
        steady, shaky = llama(8100, 0.1, 2.0), llama(8101, 0.6, 3.24)
        for key_seed, data in enumerate((steady, shaky)):
            response = served.post(sign_dict(data, key_seed))
            assert response.status_code == 201, response.text
        speed = _groups(served, "speedup")
        # only the steady result's 2x: the unstable 3.24x is not merged into its median
        assert [g["verdicts"]["confirmed"] for g in speed] == [1]
        assert speed[0]["median_speedup"] == pytest.approx(2.0, rel=0.1)
        unverified = _groups(served, "unverified")
        assert [g["key"]["verdict"]["verdict"] for g in unverified] == ["unstable"]
        assert unverified[0]["median_speedup"] > 2.5
        page = served.get(f"/submissions/{shaky['submission_id']}").text
        assert "is unstable" in page and "Stability:" in page
        wrong = llama(8102, 0.1)
        wrong["configs"][1]["trials"][0]["block"] = 7
        refused = served.post(sign_dict(wrong, 3))
        assert refused.status_code == 422
        assert "trials_fit_schedule" in refused.text and "runs in block 1" in refused.text
    engine = make_engine(store_url)
    try:
        with engine.connect() as conn:
            trials = tables.trials
            blocks = conn.execute(select(trials.c.block_number).where(
                trials.c.submission_id == steady["submission_id"],
                trials.c.config_name == "no_draft").order_by(trials.c.trial_index)).scalars()
            assert list(blocks) == [0, 0, 6, 6, 12, 12, 18, 18, 24, 24]  # 5 blocks of 2
            summ = tables.summaries
            row = conn.execute(select(summ.c.blocks, summ.c.block_drift,
                                      summ.c.speedup_wall_ci_low).where(
                summ.c.submission_id == steady["submission_id"],
                summ.c.config_name == "draft_qwen3_0.6b_n8")).one()
            assert row.blocks == 4 and row.speedup_wall_ci_low is not None
        with engine.begin() as conn:  # what the store version before blocks had
            for table, column in (("trials", "block_number"), ("summaries", "blocks"),
                                  ("summaries", "block_drift"),
                                  ("summaries", "speedup_wall_ci_low"),
                                  ("summaries", "speedup_wall_ci_high")):
                conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
            conn.execute(delete(tables.schema_version))
            conn.execute(insert(tables.schema_version).values(
                version=BEFORE_BLOCKS, applied_at=datetime(2026, 12, 3)))
        assert migrate(engine) == LATEST
        with engine.connect() as conn:
            assert conn.execute(select(tables.trials.c.block_number)).scalars().first() is None
    finally:
        engine.dispose()
